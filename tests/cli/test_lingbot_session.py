"""LingBot-World-Fast (the tiny seeded model) through the whole session: the tiered int4 store with a
spill directory and a 4-chunk host pool, retrieval beside the sink and the window, positions past its
rotary table (re-rotated), save points, and ``resume`` after SIGKILL giving the uninterrupted run's
video frame for frame (the pattern of ``test_resume.py``; ``--late-prefetch wait`` so that the frames do
not depend on the machine's speed)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import av
import numpy as np
import pytest

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER

CHUNKS = 8          # lingbot-tiny's horizon is chunk 5: chunks 5..7 are past its rotary table
ARGS = ["--model", "lingbot-tiny", "--pool-slots", "4", "--save-every", "2", "--late-prefetch", "wait", "--sink",
        "--chunks", str(CHUNKS), "--quiet"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _generate(tmp: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(WORLDPAGER + ["generate", *ARGS, "--out", str(tmp / f"{name}.mp4"),
                                          "--spill", str(tmp / f"{name}.spill")],
                            cwd=tmp, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _chunks(records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == "chunk"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lingbot")
    proc = _generate(tmp, "ref")
    _, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, err
    return _frames(tmp / "ref.mp4"), read_log(tmp / "ref.log.jsonl")


def test_generates_through_the_store_with_retrieval_past_the_horizon(reference):
    frames, records = reference
    assert len(frames) == 9 + 12 * (CHUNKS - 1) and frames[0].shape == (96, 160, 3)
    header, chunks = records[0], _chunks(records)
    assert header["type"] == "header" and header["config"]["model"] == "lingbot-tiny"
    assert [r["chunk"] for r in chunks] == list(range(CHUNKS))
    assert sum(r["hits"] for r in chunks) > 0                        # retrieved memory was attended
    assert sum(r["disk_bytes_written"] for r in chunks) > 0          # the pool spilled to the drive
    assert all(r["rerotated"] == 0 for r in chunks[:5]) and any(r["rerotated"] > 0 for r in chunks[5:])
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "done"


def test_killed_and_resumed_equals_uninterrupted(tmp_path, reference):
    proc = _generate(tmp_path, "run")
    log = tmp_path / "run.log.jsonl"
    deadline = time.time() + PATIENCE_S
    # killed during chunk 4 (save point 2 is durable by then): the resumed part crosses the horizon
    while not (log.exists() and any(r.get("type") == "chunk" and r["chunk"] >= 3 for r in read_log(log))):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the run never reached chunk 3"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = subprocess.run(WORLDPAGER + ["resume", str(tmp_path / "run.mp4"), "--quiet"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    frames = _frames(tmp_path / "run.mp4")
    assert len(frames) == len(reference[0])
    assert all(np.array_equal(a, b) for a, b in zip(frames, reference[0])), "resumed frames differ"
    records = read_log(log)
    assert [r["chunk"] for r in _chunks(records)] == list(range(CHUNKS))
    resume = next(r for r in records if r["type"] == "resume")
    assert 2 <= resume["chunk"] <= 5 and records[-1]["status"] == "done"
