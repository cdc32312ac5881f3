"""``worldpager resume OUT --spill DIR``: the run's spill directory moves, and the resumed video is frame for
frame the uninterrupted one.

* (a) DIR is a copy of the old directory (the old one gone): checked (its index, every block's crc32, the
  save point's chunks) and used; a copy with a damaged block is one line, nothing changed.
* (b) the old directory can still be read: the chunks below the save point are copied into DIR, the old
  one is left byte for byte as it was, and the config names DIR: a later plain ``resume`` (the run
  stopped again, the old directory deleted) goes on there.
* (c) the old directory is gone and DIR holds no copy: one line naming both, nothing changed.
Also: a video copied elsewhere without its ``OUT.mp4.save/`` says the save points were left behind.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spill_runs import decodes_to_its_log, one_error_line, same_frames, snapshot, stopped_run, worldpager


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """(a run stopped after chunk 3, the same run uninterrupted)."""
    root = tmp_path_factory.mktemp("moves")
    return stopped_run(root / "stopped", 3), stopped_run(root / "whole", -1)


@pytest.fixture
def run(runs, tmp_path) -> Path:
    work = tmp_path / "run"
    shutil.copytree(runs[0], work)
    return work


def _spill_named(run: Path) -> str:
    return json.loads((run / "k.config.json").read_text())["memory"]["spill"]


def test_a_copy_is_checked_and_used(run, runs):
    shutil.copytree(run / "sp", run / "copy")
    shutil.rmtree(run / "sp")
    done = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", "copy")
    assert done.returncode == 0, done.stderr
    assert f"going on in {run / 'copy'}, a copy of sp" in done.stderr, done.stderr
    same_frames(run / "k.mp4", runs[1] / "k.mp4")
    decodes_to_its_log(run / "k.mp4", run / "k.log.jsonl")
    assert _spill_named(run) == str(run / "copy") and not (run / "sp").exists()


def test_a_damaged_copy_is_one_line_and_changes_nothing(run):
    shutil.copytree(run / "sp", run / "copy")
    index = json.loads((run / "copy" / "index.json").read_text())
    offset = index["blocks"]["1"]["offset"]
    with open(run / "copy" / "blocks.dat", "r+b") as f:
        f.seek(offset + 100)
        byte = f.read(1)
        f.seek(offset + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = snapshot(run)
    done = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", "copy")
    one_error_line(done, "--spill", "chunks 1 of the copy fail their crc32 check", "copy it again")
    assert snapshot(run) == before


def test_copied_from_a_readable_old_directory(run, runs):
    old = snapshot(run / "sp")
    done = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", "moved")
    assert done.returncode == 0, done.stderr
    assert "spill directory moved: copied the" in done.stderr and "sp is left as it was" in done.stderr
    assert snapshot(run / "sp") == old
    assert _spill_named(run) == str(run / "moved")
    same_frames(run / "k.mp4", runs[1] / "k.mp4")


def test_a_later_resume_goes_on_in_the_moved_directory(runs, tmp_path):
    """Moved when resumed from the stop after chunk 3; then the run reads as killed before its summary
    (its newest save point, before chunk 8, was made in the moved directory's run) and the old directory
    is deleted: ``resume`` alone goes on in the moved one."""
    run = tmp_path / "run"
    shutil.copytree(runs[0], run)
    first = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", "moved")
    assert first.returncode == 0, first.stderr
    _unfinish(run)
    shutil.rmtree(run / "sp")
    again = worldpager(run, "resume", "k.mp4", "--quiet")
    assert again.returncode == 0, again.stderr
    same_frames(run / "k.mp4", runs[1] / "k.mp4")
    decodes_to_its_log(run / "k.mp4", run / "k.log.jsonl")


def _unfinish(run: Path) -> None:
    """The log without its summary line: the run reads as killed after its last chunk (its newest save
    point is the one the resume continues from)."""
    log = run / "k.log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "summary"
    log.write_text("".join(lines[:-1]))


def test_the_old_directory_gone_and_no_copy_is_one_line(run):
    shutil.rmtree(run / "sp")
    before = snapshot(run)
    done = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", "new")
    one_error_line(done, "its spill directory sp is missing", f"--spill {run / 'new'} holds no copy of it",
                   "copy sp's index.json and blocks.dat")
    assert snapshot(run) == before and not (run / "new").exists()


def test_a_video_copied_without_its_save_points_says_so(run, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("k.mp4", "k.log.jsonl", "k.config.json"):
        shutil.copy(run / name, elsewhere / name)
    before = snapshot(elsewhere)
    done = worldpager(elsewhere, "resume", "k.mp4", "--quiet")
    one_error_line(done, "its log records save points", "k.mp4.save is missing", "copy the run's k.mp4.save/")
    assert snapshot(elsewhere) == before
