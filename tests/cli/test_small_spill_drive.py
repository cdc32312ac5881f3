"""A spill drive so small that the disk tier's block file takes all of it but the index's reserve, then a
plain kill -9: ``resume`` goes on (the room inside the block file past its blocks is the tier's own) and
the video is frame for frame the uninterrupted one; ``resume --spill`` to another drive copies what the
save point needs and leaves the full one as it was; a fork reads the parent from the full drive.

The drive is a loop-mounted ext4 with a filler file leaving 2 MB free (``tests_support.nearly_full_drive``;
root and ``mkfs.ext4`` needed, skipped elsewhere). On a drive under about 257 MB the tier's first extent
is the drive's free space less ``RESERVE_BYTES``: after the kill about 1 MiB is free, less than a chunk and
the reserve, which is what the free-space check used to refuse the resume for.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.memory.disk import DATA_NAME, RESERVE_BYTES
from spill_runs import decodes_to_its_log, killed_run, same_frames, snapshot, stopped_run, worldpager
from tests_support import nearly_full_drive

FREE = 2_000_000
YAW = Path(__file__).resolve().parents[2] / "trajectories" / "yaw.yaml"


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    return stopped_run(tmp_path_factory.mktemp("whole"), -1)


@pytest.fixture
def killed_on_a_full_drive(tmp_path):
    with nearly_full_drive(tmp_path, FREE) as (mount, _):
        run = killed_run(tmp_path / "run", mount / "sp")
        st = os.statvfs(mount)
        # the case: the tier's block file took the drive, less than a chunk and the reserve is left
        assert st.f_bavail * st.f_frsize < RESERVE_BYTES + 8192
        assert (mount / "sp" / DATA_NAME).stat().st_size > FREE - 2 * RESERVE_BYTES
        yield run, mount


def test_killed_on_a_drive_the_tier_filled_resumes_to_the_same_video(killed_on_a_full_drive, whole):
    run, _ = killed_on_a_full_drive
    done = worldpager(run, "resume", "k.mp4", "--quiet")
    assert done.returncode == 0, done.stderr
    same_frames(run / "k.mp4", whole / "k.mp4")
    decodes_to_its_log(run / "k.mp4", run / "k.log.jsonl")


def test_resume_moves_the_spill_directory_off_the_full_drive(killed_on_a_full_drive, whole, tmp_path):
    run, mount = killed_on_a_full_drive
    old = snapshot(mount / "sp")
    done = worldpager(run, "resume", "k.mp4", "--quiet", "--spill", tmp_path / "elsewhere")
    assert done.returncode == 0, done.stderr
    assert "spill directory moved" in done.stderr and "left as it was" in done.stderr
    same_frames(run / "k.mp4", whole / "k.mp4")
    assert snapshot(mount / "sp") == old   # the old directory is only read
    assert str(tmp_path / "elsewhere") in (run / "k.config.json").read_text()


def test_a_fork_reads_its_parent_from_the_full_drive(killed_on_a_full_drive, tmp_path):
    run, mount = killed_on_a_full_drive
    old = snapshot(mount / "sp")
    done = worldpager(run, "fork", "k.mp4", "--trajectory", YAW, "--out", "b.mp4", "--chunks", "6",
                      "--spill", tmp_path / "b.spill", "--quiet")
    assert done.returncode == 0, done.stderr
    decodes_to_its_log(run / "b.mp4", run / "b.log.jsonl")
    assert snapshot(mount / "sp") == old
