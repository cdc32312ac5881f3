"""Exclusive locks: the one place that takes and gives back an advisory ``flock``.

Owns ``try_lock(path)`` (open or create the lock file and take an exclusive, non-blocking lock: its fd,
or None when another process holds it), ``release_lock(fd)``, ``try_lock_fd(fd)`` (the same lock on a
file already open: an output a writer holds while it writes it, ``engine.files.output_files``) and
``lock_holder(st)`` (the pid holding a flock on a file, from ``/proc/locks``; None where unknown). A lock
lives as long as its open file, so a killed holder frees it; callers turn a held lock into their own
one-line error (a spill directory in use, a batch output directory in use, an output being written).

A holder that removes its lock file on the way out (``release_and_remove``) uses ``try_lock_at``: a
process that opened the file just before its removal locks a file no longer at the path, sees it
(``still_at``) and tries again on the new one, so two holders never lock two files for one path.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_lock(path: Path, mode: int = 0o600) -> int | None:
    """An fd holding an exclusive lock on ``path`` (created with ``mode``), or None if it is held."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def try_lock_fd(fd: int) -> bool:
    """Take an exclusive, non-blocking flock on the open file ``fd``: False when another open file of it
    holds one (flock locks belong to the open file, so a second open in this process conflicts too)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_holder(st: os.stat_result) -> int | None:
    """The pid holding a flock on the file ``st`` describes (``/proc/locks``), or None if unknown."""
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == inode and fields[4].isdigit():
                    return int(fields[4])
    except OSError:
        pass
    return None


def release_lock(fd: int) -> None:
    """Give back a lock taken by ``try_lock`` and close its fd."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def still_at(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not one its holder removed)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def try_lock_at(path: Path, mode: int = 0o600, tries: int = 8) -> int | None:
    """``try_lock`` of the file that is at ``path`` when the lock is taken (see the module docstring);
    None when it is held. Each retry follows a removal by another holder: a handful is plenty."""
    for _ in range(tries):
        fd = try_lock(path, mode)
        if fd is None or still_at(fd, path):
            return fd
        release_lock(fd)
    return None


def release_and_remove(fd: int, path: Path) -> None:
    """Remove the lock file at ``path`` if ``fd`` still is it, then give the lock back. The removal is
    tidying: a failure to remove it never hides the error a caller is leaving with."""
    try:
        if still_at(fd, path):
            os.unlink(path)
    except OSError:
        pass
    finally:
        release_lock(fd)
