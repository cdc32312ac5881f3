"""One writer per output, and checks before cuts (``engine/session/ownership.py``, ``resume.py``, ``fork.py``).

Two processes never write one MP4: a second ``generate``, ``resume`` or ``fork`` of an output in use is
one line naming the owner's pid, and the owner's video then decodes to the frames its log says. A
``resume`` or ``fork`` that lacks a piece (the log, the spill directory, a save point the video reaches)
says what and where, and has changed nothing; a fork killed during its set-up leaves no file under the
branch's names. Runs in progress are subprocesses watched through their logs (records selected by
type), long enough that they cannot finish first, then stopped with SIGTERM.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.io.video import VideoWriter, count_frames
from engine.model.registry import model_spec
from engine.session.ownership import OutputInUseError, claim_output, lock_path
from engine.session.preflight import usable_free_bytes
from engine.session.resume import run_config
from engine.session.save import savepoint_dir
from engine.session.savepoint import savepoint_paths
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, one_line_error, run_cli_inprocess, sigkill_when_ready
from worldpager_cli.main import cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
MICRO = ["--model", "micro", "--pool-slots", "4", "--save-every", "2", "--quiet"]
LONG = 400   # chunks: a run that cannot finish while a test watches it
YAW = Path(__file__).resolve().parents[2] / "trajectories" / "yaw.yaml"


def _start(cwd: Path, *args) -> subprocess.Popen:
    return subprocess.Popen(WORLDPAGER + [str(a) for a in args], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _run(cwd: Path, *args) -> str:
    """``worldpager ARGS`` run to its end in this process, from ``cwd`` (what is claimed is its files and
    what it says; the runs that must be processes of their own, the ones killed or watched, are
    ``_start``ed); ``_here`` for commands that are refused. Returns its stderr."""
    code, _, err = run_cli_inprocess(args, cwd=cwd)
    assert code == 0, err
    return err


def _here(*args):
    """``worldpager ARGS`` in this process (the current directory is the test's): no interpreter start
    for a command that is refused, or for a short run."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _wait(log: Path, proc: subprocess.Popen, seen) -> None:
    """Until ``seen(records)`` holds for ``log`` (``proc`` must keep running meanwhile)."""
    deadline = time.time() + PATIENCE_S
    while not (log.exists() and seen(read_log(log))):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{log} never got there"
        time.sleep(0.02)


def _after(kind: str, chunks: int = 1):
    """A log holding ``chunks`` chunk records after its last ``kind`` record (header, resume, fork)."""
    def seen(records) -> bool:
        marks = [i for i, r in enumerate(records) if r.get("type") == kind]
        return bool(marks) and sum(r["type"] == "chunk" for r in records[marks[-1]:]) >= chunks
    return seen


def _savepoint(at_least: int):
    return lambda records: any(r["type"] == "savepoint" and r["chunk"] >= at_least and "path" in r for r in records)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM: the run finishes its chunk, closes video and log, exits 130."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, err


def _decodes_to_its_log(out: Path, log: Path) -> int:
    records = read_log(log)
    assert records[-1]["type"] == "summary", records[-1]
    assert sum(r["type"] == "header" for r in records) == 1
    frames = [r for r in records if r["type"] == "chunk"][-1]["frames_total"]
    assert count_frames(out) == frames
    return frames


def _killed(cwd: Path, name: str, chunks: int, savepoint: int = 2, *extra) -> Path:
    """``generate`` SIGKILLed once a save point at ``savepoint`` or later is durable."""
    proc = _start(cwd, "generate", *MICRO, "--chunks", chunks, "--out", f"{name}.mp4", "--spill", f"{name}.spill",
                  *extra)
    _wait(cwd / f"{name}.log.jsonl", proc, _savepoint(savepoint))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return cwd / f"{name}.mp4"


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """A long run killed after its save point at chunk 2 (forks only read it)."""
    return _killed(tmp_path_factory.mktemp("parent"), "p", LONG)


# ---- one writer per output ----------------------------------------------------------------------------

def test_two_resumes_at_once_one_goes_on_the_other_is_one_line(tmp_path):
    out = _killed(tmp_path, "k", LONG)
    log = out.with_suffix(".log.jsonl")
    first = _start(tmp_path, "resume", out, "--quiet")
    _wait(log, first, _after("resume"))
    one_line_error(_here("resume", out), f"cannot resume {out}", f"pid {first.pid}", "another WorldPager process")
    _stop(first)
    _decodes_to_its_log(out, log)


def test_resume_during_its_generate_is_refused_before_it_touches_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = _start(tmp_path, "generate", *MICRO, "--chunks", LONG, "--out", "g.mp4", "--spill", "g.spill")
    log = tmp_path / "g.log.jsonl"
    _wait(log, proc, _savepoint(2))
    one_line_error(_here("resume", "g.mp4"), "cannot resume g.mp4", f"pid {proc.pid}")
    _wait(log, proc, _after("header", 4))   # still writing its own file
    _stop(proc)
    assert not any(r["type"] == "resume" for r in read_log(log))
    _decodes_to_its_log(tmp_path / "g.mp4", log)


def test_two_generates_to_one_output_one_goes_on_the_other_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = _start(tmp_path, "generate", *MICRO, "--chunks", LONG, "--out", "same.mp4", "--spill", "a.spill")
    log = tmp_path / "same.log.jsonl"
    _wait(log, proc, _after("header"))
    for extra in ([], ["--overwrite"]):   # --overwrite replaces a finished run's files, never a running one's
        one_line_error(_here("generate", *MICRO, "--chunks", 2, "--out", "same.mp4", "--spill", "b.spill", *extra),
                       "same.mp4", f"pid {proc.pid}")
    assert proc.poll() is None
    _stop(proc)
    _decodes_to_its_log(tmp_path / "same.mp4", log)


def test_two_forks_to_one_output_one_goes_on_the_other_is_one_line(tmp_path, parent, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _start(tmp_path, "fork", parent, "--trajectory", YAW, "--out", "b.mp4", "--quiet")
    log = tmp_path / "b.log.jsonl"
    _wait(log, first, _after("fork"))
    one_line_error(_here("fork", parent, "--trajectory", YAW, "--out", "b.mp4"), "b.mp4", f"pid {first.pid}")
    _stop(first)
    assert sum(r["type"] == "fork" for r in read_log(log)) == 1
    _decodes_to_its_log(tmp_path / "b.mp4", log)


def test_an_earlier_run_is_not_overwritten_without_overwrite(tmp_path, parent, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(tmp_path, "generate", *MICRO, "--chunks", 1, "--out", "o.mp4")
    before = (tmp_path / "o.mp4").read_bytes()
    one_line_error(_here("generate", *MICRO, "--chunks", 1, "--out", "o.mp4"), "o.mp4", "--overwrite")
    one_line_error(_here("fork", parent, "--trajectory", YAW, "--out", "o.mp4"), "o.mp4", "--overwrite")
    assert (tmp_path / "o.mp4").read_bytes() == before
    _run(tmp_path, "generate", *MICRO, "--chunks", 2, "--out", "o.mp4", "--overwrite")
    _decodes_to_its_log(tmp_path / "o.mp4", tmp_path / "o.log.jsonl")
    assert not lock_path(tmp_path / "o.mp4").exists()   # the owner removes its lock at the end


def test_a_claim_names_its_owner_and_is_freed_by_release(tmp_path):
    out = tmp_path / "x.mp4"
    with claim_output(out):
        with pytest.raises(OutputInUseError, match=f"pid {os.getpid()}"):
            claim_output(out, "resume")
    claim_output(out).release()
    assert not lock_path(out).exists()


# ---- checks before cuts ---------------------------------------------------------------------------------

def test_resume_checks_every_piece_before_it_cuts_and_works_from_another_directory(tmp_path, monkeypatch):
    """A relative --spill, resumed from the directory above: missing log and spill are one line each,
    nothing changed; put back, the resume goes on and the video decodes to its log."""
    run = tmp_path / "run"
    run.mkdir()
    out = _killed(run, "k", 6)
    video, log, spill = out.read_bytes(), out.with_suffix(".log.jsonl"), run / "k.spill"
    text = log.read_text()
    away = tmp_path / "away"
    monkeypatch.chdir(tmp_path)
    log.rename(away)
    one_line_error(_here("resume", "run/k.mp4"), "log", "k.log.jsonl", "missing")
    away.rename(log)
    spill.rename(away)
    one_line_error(_here("resume", "run/k.mp4"), "spill directory", str(spill), "missing")
    assert out.read_bytes() == video and log.read_text() == text
    away.rename(spill)
    one_line_error(_here("generate", *MICRO, "--chunks", 2, "--out", "run/k.mp4"),
                   "unfinished run", "worldpager resume run/k.mp4", "--overwrite")
    _run(tmp_path, "resume", "run/k.mp4", "--quiet")
    assert _decodes_to_its_log(out, log) == model_spec(run_config(out)).grid.frames_total(6)


def test_a_finished_run_whose_log_is_gone_is_not_cut(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run(tmp_path, "generate", *MICRO, "--chunks", 3, "--save-every", 1, "--out", "f.mp4", "--spill", "f.spill")
    video = (tmp_path / "f.mp4").read_bytes()
    (tmp_path / "f.log.jsonl").unlink()
    one_line_error(_here("resume", "f.mp4"), "log", "missing")
    assert (tmp_path / "f.mp4").read_bytes() == video


def test_a_video_shorter_than_the_newest_save_point_resumes_from_an_older_one(tmp_path):
    out = _killed(tmp_path, "s", 8, 4, "--keep-savepoints", "3")
    spec = model_spec(run_config(out))
    kept = sorted(int(p.stem.removeprefix("savepoint-")) for p in savepoint_paths(savepoint_dir(out)))
    assert len(kept) >= 2, kept
    older = spec.grid.frames_total(kept[0])   # the video now ends at the oldest save point
    height, width = spec.frame_size
    VideoWriter.reopen(out, older, width, height, spec.grid.fps, preset=spec.encoder_preset).close()
    said = _run(tmp_path, "resume", out, "--quiet")
    assert f"holds {older}" in said and "(skipped)" in said
    log = out.with_suffix(".log.jsonl")
    assert [r["chunk"] for r in read_log(log) if r["type"] == "resume"] == [kept[0]]
    assert _decodes_to_its_log(out, log) == spec.grid.frames_total(8)


FORK_SET_UP = """
import sys, time
from pathlib import Path
from engine.session.fork import prepare_fork
from engine.session.loop import Session
parent, trajectory, out = map(Path, sys.argv[1:])
branch = prepare_fork(parent, None, trajectory, out)
Session(branch.cfg, resume_from=branch.savepoint, fork_of=branch)   # copies made, video cut, log kept
print("ready", flush=True)
time.sleep(600)
"""


def test_a_fork_killed_during_its_set_up_leaves_no_branch_named_file(tmp_path, parent, monkeypatch):
    assert sigkill_when_ready(FORK_SET_UP, str(parent), str(YAW), "b.mp4", cwd=tmp_path, env=ENV) == -signal.SIGKILL
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("b.")]
    monkeypatch.chdir(tmp_path)
    one_line_error(_here("resume", "b.mp4"), "config", "missing")
    newest = max(int(p.stem.removeprefix("savepoint-")) for p in savepoint_paths(savepoint_dir(parent)))
    _run(tmp_path, "fork", parent, "--trajectory", YAW, "--out", "b.mp4", "--chunks", newest + 2, "--quiet")
    _decodes_to_its_log(tmp_path / "b.mp4", tmp_path / "b.log.jsonl")


# ---- paths and the spill drive, before any output ---------------------------------------------------------

@pytest.mark.parametrize("out, needles", [
    ("nodir/x.mp4", ["--out nodir/x.mp4", "does not exist"]),
    ("clip.avi", ["--out clip.avi", ".mp4"]),
])
def test_a_bad_video_name_blames_out(tmp_path, monkeypatch, out, needles):
    monkeypatch.chdir(tmp_path)
    result = _here("generate", "--model", "micro", "--chunks", 1, "--out", out)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "--log" not in lines[0], result.output
    assert all(n in lines[0] for n in needles), lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_spill_that_is_a_file_is_refused_before_any_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("x")
    result = _here("generate", "--model", "micro", "--chunks", 1, "--out", "o.mp4", "--spill", "f")
    assert result.exit_code == 1 and "--spill" in result.output and "is a file" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_file_system_without_a_size_has_free_space_unknown():
    ramfs = os.statvfs_result((4096, 4096, 0, 0, 0, 0, 0, 0, 0, 255))
    assert usable_free_bytes(ramfs) is None
    disk = os.statvfs_result((4096, 4096, 100, 10, 8, 0, 0, 0, 0, 255))
    assert usable_free_bytes(disk) == 8 * 4096


@contextlib.contextmanager
def _mounted(where: Path, fstype: str, *options: str):
    """A fresh ``fstype`` at ``where`` (root only; skipped where mounting is not allowed)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a file system needs root")
    where.mkdir()
    done = subprocess.run(["mount", "-t", fstype, *options, fstype, str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount {fstype} here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_read_only_spill_is_refused_before_any_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with _mounted(tmp_path / "ro", "tmpfs", "-o", "ro,size=1m"):
        one_line_error(_here("generate", *MICRO, "--chunks", 1, "--out", "o.mp4", "--spill", "ro/sp"),
                       "--spill", "not writable")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"]


def test_a_spill_on_ramfs_is_not_full(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with _mounted(tmp_path / "ram", "ramfs"):
        # was: "the spill drive is full: ram/sp (0 MiB free)"
        _run(tmp_path, "generate", *MICRO, "--chunks", 3, "--writeback", "through", "--out", "r.mp4",
             "--spill", "ram/sp")
        records = read_log(tmp_path / "r.log.jsonl")
        assert records[-1]["status"] == "done"
        assert sum(r["disk_bytes_written"] for r in records if r["type"] == "chunk") > 0
