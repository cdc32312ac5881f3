"""Save points and ``worldpager resume``: a run killed with SIGKILL at any moment, resumed, gives the same
video frame for frame as a run never interrupted.

Each case generates a reference run, then the same run in a subprocess killed with SIGKILL once its log
shows a given point (a chunk record: the next chunk's denoise is under way; a save-point record: one
was just made durable, write-back of later chunks running), then ``worldpager resume``. The resumed MP4
decodes to exactly the reference's frames, its log has every chunk once, a ``resume`` record and a
``done`` summary, and at most the chunks since the save point were made again. The memory goes through
the disk tier (a spill directory, a small host pool), so retrieved chunks come back from the drive after
the resume (arena, micro and synthetic models). Also: killed before the first save point -> a one-line error; a damaged newest save point
-> the one before it; a finished run -> a one-line error; a run resumed twice.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import av
import numpy as np
import pytest

from engine.session.save import savepoint_dir
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER

CHUNKS = 12
# A late prefetch is waited for (--late-prefetch wait): the frames compared below then do not depend on
# how fast the machine was (with the default, a set still loading is a miss by design).
ARENA = ["--model", "arena", "--pool-slots", "4", "--save-every", "2", "--late-prefetch", "wait"]
MICRO = ["--model", "micro", "--pool-slots", "4", "--save-every", "2", "--late-prefetch", "wait"]
SYNTHETIC = ["--model", "synthetic", "--chunk-ms", "20", "--kv-scale", "0.034", "--pool-slots", "4",
             "--save-every", "2", "--late-prefetch", "wait"]
MODELS = {"arena": ARENA, "micro": MICRO, "synthetic": SYNTHETIC}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _generate(tmp: Path, name: str, args: list[str], chunks: int = CHUNKS) -> subprocess.Popen:
    return subprocess.Popen(WORLDPAGER + ["generate", *args, "--chunks", str(chunks), "--quiet",
                                          "--out", str(tmp / f"{name}.mp4"), "--spill", str(tmp / f"{name}.spill")],
                            cwd=tmp, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _resume(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(WORLDPAGER + ["resume", str(out), "--quiet"], cwd=out.parent, env=ENV,
                          capture_output=True, text=True, timeout=PATIENCE_S)


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _kill_when(proc: subprocess.Popen, log: Path, seen, timeout: float = PATIENCE_S) -> None:
    """SIGKILL ``proc`` as soon as a record of its log satisfies ``seen`` (a tuple: each of them has a
    record; a save point is written in the background, so on a busy machine chunks can run ahead of
    it, and a kill point that needs one to resume from names it)."""
    wanted = seen if isinstance(seen, tuple) else (seen,)
    deadline = time.time() + timeout
    while time.time() < deadline:
        records = read_log(log) if log.exists() else []
        if all(any(want(r) for r in records) for want in wanted):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError(f"{log} never showed the kill point")


def _chunk_at_least(n):
    return lambda r: r.get("type") == "chunk" and r["chunk"] >= n


def _savepoint_at_least(n):
    return lambda r: r.get("type") == "savepoint" and r["chunk"] >= n and "path" in r


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    out = {}
    for name, args in MODELS.items():
        proc = _generate(tmp, name, args)
        assert proc.wait(timeout=PATIENCE_S) == 0, proc.communicate()
        out[name] = _frames(tmp / f"{name}.mp4")
    return out


def _check_resumed(tmp: Path, name: str, reference_frames) -> dict:
    out = tmp / f"{name}.mp4"
    done = _resume(out)
    assert done.returncode == 0, done.stderr
    frames = _frames(out)
    assert len(frames) == len(reference_frames)
    assert all(np.array_equal(a, b) for a, b in zip(frames, reference_frames)), "resumed frames differ"
    records = read_log(out.with_suffix(".log.jsonl"))
    chunks = [r["chunk"] for r in records if r["type"] == "chunk"]
    assert chunks == list(range(CHUNKS))
    assert records[0]["type"] == "header" and records[-1]["type"] == "summary"
    assert records[-1]["status"] == "done" and records[-1]["chunks"] == CHUNKS
    if name == "arena":   # its look around was observed once, and the resume did not look around again
        assert [bool(r.get("observed")) for r in records if r["type"] == "chunk"] == [True] * 7 + [False] * 5
    return next(r for r in records if r["type"] == "resume")


@pytest.mark.parametrize("model, point, seen", [
    ("arena", "chunk 4, inside the look around", _chunk_at_least(3)),     # chunks 0-6 are its look around
    ("arena", "just after save point 6", _savepoint_at_least(6)),
    ("arena", "just after save point 8, past the look around", _savepoint_at_least(8)),
    ("micro", "denoise of chunk 6", _chunk_at_least(5)),
    ("synthetic", "write-back after chunk 8", (_chunk_at_least(7), _savepoint_at_least(2))),
])
def test_killed_and_resumed_equals_uninterrupted(tmp_path, reference, model, point, seen):
    proc = _generate(tmp_path, model, MODELS[model])
    log = tmp_path / f"{model}.log.jsonl"
    _kill_when(proc, log, seen)
    before = read_log(log)
    last_chunk = max(r["chunk"] for r in before if r["type"] == "chunk")
    saved = max((r["chunk"] for r in before if r["type"] == "savepoint" and "path" in r), default=0)
    resume = _check_resumed(tmp_path, model, reference[model])
    # from the newest durable save point: at least the newest one logged (a later one may have become
    # durable after its chunk's record), never past what was made
    assert saved <= resume["chunk"] <= last_chunk + 1


def test_killed_twice(tmp_path, reference):
    proc = _generate(tmp_path, "arena", ARENA)
    log = tmp_path / "arena.log.jsonl"
    _kill_when(proc, log, _chunk_at_least(4))
    second = subprocess.Popen(WORLDPAGER + ["resume", str(tmp_path / "arena.mp4"), "--quiet"], cwd=tmp_path,
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _kill_when(second, log, _chunk_at_least(8))
    _check_resumed(tmp_path, "arena", reference["arena"])


def test_damaged_newest_save_point_falls_back(tmp_path, reference):
    proc = _generate(tmp_path, "arena", ARENA)
    log = tmp_path / "arena.log.jsonl"
    _kill_when(proc, log, _savepoint_at_least(8))
    newest = sorted(savepoint_dir(tmp_path / "arena.mp4").glob("savepoint-*.wps"))[-1]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    resume = _check_resumed(tmp_path, "arena", reference["arena"])
    assert resume["chunk"] < 8


def test_nothing_to_resume_is_a_one_line_error(tmp_path):
    proc = _generate(tmp_path, "arena", ARENA)
    _kill_when(proc, tmp_path / "arena.log.jsonl", _chunk_at_least(0))
    done = _resume(tmp_path / "arena.mp4")
    if (savepoint_dir(tmp_path / "arena.mp4")).exists() and any(savepoint_dir(tmp_path / "arena.mp4").iterdir()):
        pytest.skip("the run reached its first save point before the kill")
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no save point" in lines[0] and "Traceback" not in done.stderr


def test_a_finished_run_is_not_resumed(tmp_path):
    proc = _generate(tmp_path, "arena", ARENA, chunks=3)
    assert proc.wait(timeout=PATIENCE_S) == 0
    done = _resume(tmp_path / "arena.mp4")
    assert done.returncode == 1 and "finished" in done.stderr and "Traceback" not in done.stderr


def test_a_stop_on_sigterm_saves_so_nothing_is_redone(tmp_path, reference):
    args = [a if a != "2" else "100" for a in ARENA]           # no save point but the one at the stop
    proc = _generate(tmp_path, "arena", args)
    log = tmp_path / "arena.log.jsonl"
    deadline = time.time() + PATIENCE_S
    while not (log.exists() and any(_chunk_at_least(4)(r) for r in read_log(log))):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=PATIENCE_S) == 130
    made = sum(r["type"] == "chunk" for r in read_log(log))
    resume = _check_resumed(tmp_path, "arena", reference["arena"])
    assert resume["chunk"] == made
