"""A spill drive (or a save-point directory) that fails while ``generate`` sets up, ``resume`` checks and
reopens, or ``fork`` reads a parent, or the drive of a branch's (or a run's) output directory fails: one
line naming the path and the errno (the drive's words for an output: "the drive holding it failed"; an
ENOMEM the drive answers is never "out of memory"), exit 1, no traceback, and nothing the user had is
changed.

The drive's failure is injected at the ``os`` level in the CLI's own process (``tests/failing_drive.py``:
``os.stat``, ``os.open``, ``os.scandir``, ``os.statvfs``… raise EIO or ENOMEM for paths under a
directory, or only for some file names there), so every probe is covered, also those no test names.
(Device-mapper's ``error`` target would be a real failing drive, but the kernel here has no
device-mapper.) The run is a stopped micro-model run with save points (``tests/spill_runs.py``), copied
per test; the check that it is still resumable to the uninterrupted video is made after one failure of
each command.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spill_runs import decodes_to_its_log, one_error_line, same_frames, snapshot, stopped_run, worldpager

YAW = Path(__file__).resolve().parents[2] / "trajectories" / "yaw.yaml"
ERRNOS = {"EIO": "Input/output error (EIO)", "ENOMEM": "Cannot allocate memory (ENOMEM)"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """(a run stopped after chunk 5, the same run uninterrupted)."""
    root = tmp_path_factory.mktemp("failing")
    return stopped_run(root / "stopped", 5), stopped_run(root / "whole", -1)


@pytest.fixture
def run(runs, tmp_path) -> Path:
    work = tmp_path / "run"
    shutil.copytree(runs[0], work)
    return work


def _resumes_to_the_whole_video(run: Path, whole: Path) -> None:
    done = worldpager(run, "resume", "k.mp4", "--quiet")
    assert done.returncode == 0, done.stderr
    same_frames(run / "k.mp4", whole / "k.mp4")
    decodes_to_its_log(run / "k.mp4", run / "k.log.jsonl")


@pytest.mark.parametrize("errno_name", sorted(ERRNOS))
@pytest.mark.parametrize("where", ["a new directory", "an earlier run's directory"])
def test_generate_on_a_failing_spill_drive_is_one_line_before_any_output(tmp_path, errno_name, where):
    drive = tmp_path / "drive"
    spill = drive / "spill"
    names = ""
    if where == "an earlier run's directory":   # its files fail, the directory itself does not
        spill.mkdir(parents=True)
        (spill / "index.json").write_text("{}")
        names = "index.json"
    before = snapshot(tmp_path)
    done = worldpager(tmp_path, "generate", "--model", "micro", "--chunks", "3", "--out", "g.mp4", "--spill", spill,
                      "--quiet", fail_under=drive, errno_name=errno_name, names=names)
    one_error_line(done, f"--spill {spill}", ERRNOS[errno_name], "check or replace the drive")
    assert snapshot(tmp_path) == before   # no output made, the earlier run's files as they were


@pytest.mark.parametrize("errno_name, names", [("EIO", ""), ("ENOMEM", ""), ("EIO", "index.json"),
                                               ("EIO", "blocks.dat"), ("ENOMEM", "worldpager.lock")])
def test_resume_on_a_failing_spill_drive_is_one_line_and_changes_nothing(run, runs, errno_name, names):
    before = snapshot(run)
    done = worldpager(run, "resume", "k.mp4", "--quiet", fail_under=run / "sp", errno_name=errno_name, names=names)
    line = one_error_line(done, "cannot resume k.mp4: its spill", ERRNOS[errno_name], "--spill NEWDIR")
    assert f"sp/{names}" in line if names else " sp: " in line
    assert snapshot(run) == before   # the MP4 is not cut, the log not touched
    decodes_to_its_log(run / "k.mp4", run / "k.log.jsonl")
    if (errno_name, names) == ("EIO", ""):
        _resumes_to_the_whole_video(run, runs[1])


@pytest.mark.parametrize("errno_name", sorted(ERRNOS))
def test_resume_with_failing_save_points_is_one_line(run, errno_name):
    before = snapshot(run)
    done = worldpager(run, "resume", "k.mp4", "--quiet", fail_under=run / "k.mp4.save", errno_name=errno_name)
    one_error_line(done, "k.mp4.save", ERRNOS[errno_name])
    assert snapshot(run) == before


@pytest.mark.parametrize("errno_name, names", [("EIO", ""), ("ENOMEM", ""), ("EIO", "index.json"),
                                               ("ENOMEM", "blocks.dat")])
def test_fork_of_a_parent_on_a_failing_drive_is_one_line(run, runs, errno_name, names):
    before = snapshot(run)
    done = worldpager(run, "fork", "k.mp4", "--trajectory", YAW, "--out", "b.mp4", "--quiet",
                      fail_under=run / "sp", errno_name=errno_name, names=names)
    line = one_error_line(done, "cannot fork k.mp4: its spill", ERRNOS[errno_name])
    assert f"sp/{names}" in line if names else " sp: " in line
    assert snapshot(run) == before   # no branch file, not even a staged one; the parent as it was
    if (errno_name, names) == ("ENOMEM", ""):
        _resumes_to_the_whole_video(run, runs[1])


@pytest.mark.parametrize("errno_name", sorted(ERRNOS))
def test_fork_onto_a_failing_drive_is_one_line(run, errno_name):
    before = snapshot(run)
    drive = run / "drive"
    done = worldpager(run, "fork", "k.mp4", "--trajectory", YAW, "--out", "b.mp4", "--spill", drive / "b.spill",
                      "--quiet", fail_under=drive, errno_name=errno_name)
    one_error_line(done, f"--spill {drive / 'b.spill'}", ERRNOS[errno_name])
    assert snapshot(run) == before


OUTPUT_WORDS = {"EIO": "Input/output error: the drive holding it failed", "EROFS": "Read-only file system: the "
                "drive holding it went read-only", "ENOMEM": "Cannot allocate memory"}


@pytest.mark.parametrize("errno_name", sorted(OUTPUT_WORDS))
@pytest.mark.parametrize("names", ["", ".b.mp4.fork"])
def test_fork_into_a_directory_on_a_failing_drive_is_the_drive_not_memory(run, errno_name, names):
    """The branch's directory (or only its staged MP4) on a drive that fails: the drive's words, never
    "out of memory" (an ENOMEM the drive answers is not the process's) and never a traceback."""
    (run / "out").mkdir()
    before = snapshot(run)
    done = worldpager(run, "fork", "k.mp4", "--trajectory", YAW, "--out", "out/b.mp4", "--spill", "b.spill",
                      "--quiet", fail_under=run / "out", errno_name=errno_name, names=names)
    line = one_error_line(done, "cannot check --out out/b.mp4", OUTPUT_WORDS[errno_name])
    assert "out of memory" not in line and "Traceback" not in done.stderr
    assert snapshot(run) == before


@pytest.mark.parametrize("errno_name", sorted(OUTPUT_WORDS))
def test_generate_into_a_directory_on_a_failing_drive_is_the_drive_not_memory(tmp_path, errno_name):
    (tmp_path / "out").mkdir()
    done = worldpager(tmp_path, "generate", "--model", "micro", "--chunks", "1", "--out", "out/g.mp4", "--quiet",
                      fail_under=tmp_path / "out", errno_name=errno_name)
    line = one_error_line(done, "cannot check --out out/g.mp4", OUTPUT_WORDS[errno_name])
    assert "out of memory" not in line and "Traceback" not in done.stderr
    assert list((tmp_path / "out").iterdir()) == []


def test_resume_moved_to_another_drive_after_the_failure(run, runs):
    """The fix the line gives: ``resume --spill`` with a copy made elsewhere (here from the failing one's
    files while they could still be read) goes on to the uninterrupted video."""
    shutil.copytree(run / "sp", run / "copy")
    done = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", run / "copy", fail_under=run / "sp")
    assert done.returncode == 0, done.stderr
    same_frames(run / "k.mp4", runs[1] / "k.mp4")
