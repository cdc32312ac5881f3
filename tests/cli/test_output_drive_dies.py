"""The output drive dies mid-run: one error line naming the file and the drive problem, exit 1, no
traceback from closing the MP4, the log or the output's lock, no hang; the MP4 keeps the whole frames it
had and the log the lines it had (``engine/files/cleanup.py``, ``engine/session/loop.py``).

The drive is a small ext4 on a loop device (root and ``mkfs.ext4``: ``nearly_full_drive``), shut down
with ``EXT4_IOC_SHUTDOWN`` (no log flush) while a long run writes to it: every write, read and unlink on
it then fails with EIO. The run is stopped (SIGSTOP) while the drive's file system is synced and shut
down, so what the drive keeps is exactly what was written before the stop; after the run the drive is
mounted again to read it. Three layouts: the MP4 and the log on the dying drive; only the MP4 there
(the log, elsewhere, records what the MP4 holds); only the log there (the MP4, elsewhere, is cut back to
the chunks the log holds).
"""
from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
from pathlib import Path

import pytest

from engine.io.video import count_frames
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, nearly_full_drive, wait_for_chunks

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# linux/ext4.h: EXT4_IOC_SHUTDOWN = _IOR('X', 125, __u32); _IOR = (2 << 30) | (size << 16) | (type << 8) | nr
EXT4_IOC_SHUTDOWN = (2 << 30) | (4 << 16) | (ord("X") << 8) | 125
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
CHUNK_FRAMES = 12   # the micro model's chunks after the first


def _shut_down(mount: Path) -> None:
    """Flush the drive, then shut its file system down: from here every operation on it fails (EIO)."""
    subprocess.run(["sync", "-f", str(mount)], check=True)
    fd = os.open(mount, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
    except OSError as exc:
        pytest.skip(f"this kernel cannot shut an ext4 down ({exc.strerror})")
    finally:
        os.close(fd)


def _remount(tmp_path: Path, mount: Path) -> None:
    """The dead file system unmounted and mounted again: what the drive kept, readable."""
    subprocess.run(["umount", str(mount)], check=True)
    subprocess.run(["mount", "-o", "loop", str(tmp_path / "drive.img"), str(mount)], check=True)


def _dies_under(tmp_path: Path, mount: Path, out: Path, log: Path) -> subprocess.CompletedProcess:
    """A long micro run writing ``out`` and ``log``; the drive shut down after its third chunk."""
    (mount / "before.txt").write_text("the user's own file")
    proc = subprocess.Popen(WORLDPAGER + ["generate", "--model", "micro", "--chunks", "400", "--out", str(out),
                                          "--log", str(log), "--save-every", "0", "--quiet"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_chunks(log, 3, proc)
        proc.send_signal(signal.SIGSTOP)   # what reaches the drive is what was written before this
        try:
            _shut_down(mount)
        finally:
            proc.send_signal(signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _one_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("worldpager: error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], done.stderr
    assert all(line.startswith("worldpager: warning: ") for line in lines[:-1]), done.stderr
    assert "Input/output error" in errors[0] and "the drive holding it failed" in errors[0], errors[0]
    assert any(needle in errors[0] for needle in needles), errors[0]
    return errors[0]


def _frames(log: Path) -> int:
    chunks = [r for r in read_log(log) if r["type"] == "chunk"]
    return chunks[-1]["frames_total"] if chunks else 0


@pytest.fixture
def drive(tmp_path):
    with nearly_full_drive(tmp_path, 5_000_000, root_reserve_too=True) as (mount, _filler):
        yield mount


def test_the_drive_of_the_video_and_the_log_dies(tmp_path, drive):
    out, log = drive / "s.mp4", drive / "s.log.jsonl"
    done = _dies_under(tmp_path, drive, out, log)
    _one_error(done, str(out), str(log))
    _remount(tmp_path, drive)
    assert (drive / "before.txt").read_text() == "the user's own file"
    kept = _frames(log)
    assert kept >= 9 + 2 * CHUNK_FRAMES   # the lines written before the drive died
    # The MP4 plays every whole fragment it had; its last chunk may be one the log had no line for yet.
    assert count_frames(out) in (kept, kept + CHUNK_FRAMES)


def test_the_drive_of_the_video_dies_and_the_log_elsewhere_says_what_it_holds(tmp_path, drive):
    out, log = drive / "s.mp4", tmp_path / "s.log.jsonl"
    done = _dies_under(tmp_path, drive, out, log)
    _one_error(done, f"cannot write video {out}")
    records = read_log(log)
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed", records[-1]
    assert "cannot write video" in records[-1]["error"]
    _remount(tmp_path, drive)
    assert count_frames(out) == _frames(log) >= 9 + 2 * CHUNK_FRAMES
    assert (drive / "before.txt").read_text() == "the user's own file"


def test_the_drive_of_the_log_dies_and_the_video_elsewhere_is_cut_back_to_it(tmp_path, drive):
    out, log = tmp_path / "s.mp4", drive / "s.log.jsonl"
    done = _dies_under(tmp_path, drive, out, log)
    _one_error(done, f"cannot write log {log}")
    assert not (tmp_path / ".s.mp4.lock").exists()   # released: the lock was on the good drive
    _remount(tmp_path, drive)
    assert count_frames(out) == _frames(log) >= 9 + 2 * CHUNK_FRAMES
