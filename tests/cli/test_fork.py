"""``worldpager fork``: a new run from a save point of another that goes another way.

One parent (the arena model through the disk tier, a save point every 2 chunks, all kept) is killed with
SIGKILL after its save point at chunk 8, like a crash. Then: a branch at chunk 6 on another trajectory
has the parent's frames before the fork and other frames after it; a branch at chunk 4 that goes the
parent's own way equals an uninterrupted parent frame for frame (the memory's chunks before the fork come
from the parent's spill directory); a branch of that branch reads both spill directories; none of it
changes a byte of the parent's spill directory, and the parent is then resumed to the same video as an
uninterrupted run. A fork at a chunk without a save point is a one-line error that writes nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import av
import numpy as np
import pytest

from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER

CHUNKS = 12
# on-demand: every chunk's memory is the chunks it asks for, loaded before it runs, so the comparisons of
# frames below do not depend on the machine's speed (with prefetch, a load that comes late on a loaded
# machine is a miss by design, and the run it is in differs from one where it came in time)
ARENA = ["--model", "arena", "--store", "on-demand", "--io-deadline", "600", "--pool-slots", "4",
         "--save-every", "2", "--keep-savepoints", "6", "--chunks", str(CHUNKS), "--quiet",
         # the tour as one file, no look around: every chunk is generated (forks across an observed prefix:
         # tests/cli/test_observe.py, tests/cli/test_look_around.py)
         "--trajectory", str(packaged_trajectory("arena_tour.yaml")), "--look-around", "0"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _worldpager(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(WORLDPAGER + [str(a) for a in args], cwd=tmp, env=ENV, capture_output=True, text=True,
                          timeout=PATIENCE_S)


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _fork_record(log: Path) -> dict:
    """The last ``fork`` record (a branch of a branch keeps its parent's before its own)."""
    return [r for r in read_log(log) if r["type"] == "fork"][-1]


def _actions_csv(path: Path, trajectory, start: int) -> Path:
    """An action CSV of ``trajectory``'s frames from ``start`` on: the way the run itself went on."""
    keyboard, mouse = trajectory.actions.keyboard.numpy()[start:], trajectory.actions.mouse.numpy()[start:]
    rows = ["frame,w,s,a,d,mouse_pitch,mouse_yaw"]
    rows += [",".join([str(i), *(str(int(v)) for v in k), *(repr(float(v)) for v in m)])
             for i, (k, m) in enumerate(zip(keyboard, mouse))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted reference run, and the same run killed after its save point at chunk 8."""
    tmp = tmp_path_factory.mktemp("fork")
    done = _worldpager(tmp, "generate", *ARENA, "--out", tmp / "ref.mp4", "--spill", tmp / "ref.spill")
    assert done.returncode == 0, done.stderr
    _killed_after_savepoint(tmp, tmp / "parent.log.jsonl", 8, "generate", *ARENA, "--out", tmp / "parent.mp4",
                            "--spill", tmp / "parent.spill")
    return tmp, _frames(tmp / "ref.mp4")


def _killed_after_savepoint(tmp: Path, log: Path, chunk: int, *args) -> None:
    """Run ``worldpager ARGS``, SIGKILLed once its log shows a durable save point at ``chunk`` or later."""
    proc = subprocess.Popen(WORLDPAGER + [str(a) for a in args], cwd=tmp, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    def made(records) -> bool:   # in a branch's log: after its fork record (the parent's come before)
        forks = [i for i, r in enumerate(records) if r.get("type") == "fork"]
        if args[0] == "fork" and not forks:
            return False
        ours = records[max(forks, default=0):]
        return any(r.get("type") == "savepoint" and r["chunk"] >= chunk and "path" in r for r in ours)

    deadline = time.time() + PATIENCE_S
    while not (log.exists() and made(read_log(log))):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_fork(runs):
    tmp, reference = runs
    parent, spill = tmp / "parent.mp4", tmp / "parent.spill"
    untouched = _digest(spill)

    # another way from chunk 6: the parent's frames before the fork, others after it
    branch = tmp / "branch.mp4"
    done = _worldpager(tmp, "fork", parent, "--at", 6, "--trajectory", packaged_trajectory("yaw.yaml"),
                       "--out", branch, "--chunks", CHUNKS, "--quiet")
    assert done.returncode == 0, done.stderr
    fork_frames = _fork_record(tmp / "branch.log.jsonl")["frames_total"]
    frames = _frames(branch)
    assert len(frames) == len(reference)
    assert all(np.array_equal(a, b) for a, b in zip(frames[:fork_frames], reference[:fork_frames]))
    assert not any(np.array_equal(a, b) for a, b in zip(frames[fork_frames:], reference[fork_frames:]))
    assert sorted(map(int, json.loads((tmp / "branch.mp4.spill/index.json").read_text())["blocks"])) \
        == list(range(6, CHUNKS - 1))   # only its own chunks (the last one needs no store)
    assert read_log(tmp / "branch.log.jsonl")[-1]["status"] == "done"

    # the parent's own way from chunk 4, to the parent's length: the uninterrupted run
    cfg = json.loads((tmp / "parent.config.json").read_text())
    own_way = load_trajectory(packaged_trajectory("arena_tour.yaml"), "universal", frames=len(reference))
    same = tmp / "same.mp4"
    _killed_after_savepoint(tmp, tmp / "same.log.jsonl", 8, "fork", parent, "--at", 4, "--out", same, "--chunks", CHUNKS, "--quiet",
                            "--trajectory", _actions_csv(tmp / "rest4.csv", own_way, _frames_before(4)))
    done = _worldpager(tmp, "resume", same, "--quiet")   # a killed branch resumes like any run
    assert done.returncode == 0, done.stderr
    assert _fork_record(tmp / "same.log.jsonl")["frames_total"] == _frames_before(4)
    assert cfg["trajectory"].endswith("arena_tour.yaml") and cfg["observe"] is None
    assert all(np.array_equal(a, b) for a, b in zip(_frames(same), reference, strict=True))
    reads = [r["disk_bytes_read"] for r in read_log(tmp / "same.log.jsonl") if r.get("type") == "chunk"]
    assert sum(reads[4:]) > 0   # the memory's chunks before the fork came from the parent's drive

    # a branch of the branch (its newest save point, 10) reads the parent's chunks < 6 and the branch's 6..9
    twig = tmp / "twig.mp4"
    branch_way = load_trajectory(tmp / "branch.trajectory.yaml", "universal", frames=len(reference))
    done = _worldpager(tmp, "fork", branch, "--out", twig, "--chunks", CHUNKS, "--quiet", "--trajectory",
                       _actions_csv(tmp / "rest10.csv", branch_way, _frames_before(10)))
    assert done.returncode == 0, done.stderr
    assert [r["chunk"] for r in read_log(tmp / "twig.log.jsonl") if r["type"] == "fork"] == [6, 10]
    assert [layer["before"] for layer in _fork_record(tmp / "twig.log.jsonl")["base"]] == [6, 10]
    assert all(np.array_equal(a, b) for a, b in zip(_frames(twig), frames, strict=True))

    assert _digest(spill) == untouched   # not a byte of the parent's memory changed

    # the parent goes on as if nothing happened
    done = _worldpager(tmp, "resume", parent, "--quiet")
    assert done.returncode == 0, done.stderr
    assert all(np.array_equal(a, b) for a, b in zip(_frames(parent), reference, strict=True))


def _frames_before(chunk: int) -> int:
    """Video frames before ``chunk`` (9 in the first chunk, 12 in each after)."""
    return 9 + 12 * (chunk - 1)


def test_fork_without_a_save_point_there_is_a_one_line_error(runs):
    tmp, _ = runs
    before = sorted(p.name for p in tmp.iterdir())
    done = _worldpager(tmp, "fork", tmp / "ref.mp4", "--at", 5, "--trajectory", packaged_trajectory("yaw.yaml"),
                       "--out", tmp / "nowhere.mp4")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "chunk 5" in lines[0] and "2, 4, 6, 8, 10" in lines[0], lines[0]
    assert sorted(p.name for p in tmp.iterdir()) == before


def test_the_default_branch_is_30_s_of_new_video(runs):
    """Without --chunks the branch goes on for generate's default length after its save point (40 micro
    chunks of 12 frames at 16 fps), not to the parent's length (which left 6 chunks here)."""
    from engine.session.fork import prepare_fork

    tmp, _ = runs
    branch = prepare_fork(tmp / "parent.mp4", 6, packaged_trajectory("yaw.yaml"), tmp / "default.mp4")
    try:
        assert branch.cfg.chunks == 6 + 40
    finally:
        branch.discard()
    assert not any(p.name.startswith((".default", "default")) for p in tmp.iterdir())
