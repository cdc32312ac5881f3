"""A spill drive that fills up or gets stuck: the run stops with one line saying how much room it needs, the MP4 plays,
the log has its summary, and after space is freed ``worldpager resume`` finishes the same video as a
run that never ran out.

The drive is a real one: a small ext4 file system on a loop device (needs root and ``mkfs.ext4``;
skipped elsewhere), with a filler file that leaves room for about a dozen of the arena model's chunks.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from engine.runtime.telemetry import read_log
from tests_support import WORLDPAGER, nearly_full_drive

CHUNKS = 30
ARGS = ["--model", "arena", "--pool-slots", "4", "--save-every", "2", "--chunks", str(CHUNKS), "--quiet",
        "--late-prefetch", "wait"]   # the resumed frames are compared exactly: independent of the machine's speed
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FREE_FOR = 2_300_000          # bytes left on the drive: about 12 chunks of 184 KiB


@pytest.fixture
def small_drive(tmp_path):
    with nearly_full_drive(tmp_path, FREE_FOR, root_reserve_too=False) as (mount, filler):
        yield mount, filler


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _generate(cwd: Path, out: Path, spill: Path) -> subprocess.CompletedProcess:
    return subprocess.run(WORLDPAGER + ["generate", *ARGS, "--out", str(out), "--spill", str(spill)], cwd=cwd,
                          env=ENV, capture_output=True, text=True, timeout=600)


def test_full_drive_stops_with_the_room_needed_then_resumes(tmp_path, small_drive):
    mount, filler = small_drive
    reference = _generate(tmp_path, tmp_path / "reference.mp4", tmp_path / "reference.spill")
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "run.mp4"
    full = _generate(tmp_path, out, mount / "spill")
    assert full.returncode == 1, full.stderr
    lines = [line for line in full.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("worldpager: error: ") and "Traceback" not in full.stderr, full.stderr
    assert sum(line.startswith("worldpager: error") for line in lines) == 1, full.stderr
    message = lines[-1]
    assert "spill drive is full" in message and str(mount / "spill") in message
    assert "MiB more" in message and "worldpager resume" in message, message
    records = read_log(out.with_suffix(".log.jsonl"))
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed"
    assert any(r["type"] == "savepoint" and "path" in r for r in records), "no save point before the drive filled"
    made = [r["chunk"] for r in records if r["type"] == "chunk"]
    assert 0 < len(made) < CHUNKS
    assert len(_frames(out)) == sum(r["frames"] for r in records if r["type"] == "chunk")   # it plays

    filler.unlink()
    resumed = subprocess.run(WORLDPAGER + ["resume", str(out), "--quiet"], cwd=tmp_path, env=ENV,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    ours, theirs = _frames(out), _frames(tmp_path / "reference.mp4")
    assert len(ours) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(ours, theirs))


def test_a_stuck_drive_ends_the_run_at_the_deadline(tmp_path):
    """A drive whose writes crawl (an emulated 20 kB/s) past ``--io-deadline``: the run stops with one line
    naming the deadline and the save point to resume from, instead of waiting on the drive."""
    out = tmp_path / "stuck.mp4"
    stuck = subprocess.run(WORLDPAGER + ["generate", *ARGS, "--out", str(out), "--spill", str(tmp_path / "spill"),
                                         "--drive-bw", "w=0.00002", "--io-deadline", "2"],
                           cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert stuck.returncode == 1, stuck.stderr
    lines = [line for line in stuck.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("worldpager: error: the spill drive failed") and "Traceback" not in stuck.stderr
    assert "has not finished in 2 s" in lines[-1] and "worldpager resume" in lines[-1], lines[-1]
    records = read_log(out.with_suffix(".log.jsonl"))
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed"
    assert len(_frames(out)) == sum(r["frames"] for r in records if r["type"] == "chunk")
