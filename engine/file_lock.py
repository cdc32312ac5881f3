"""Exclusive directory locks: the one place that takes and gives back an advisory ``flock``.

Owns ``try_lock(path)`` (open or create the lock file and take an exclusive, non-blocking lock: its fd,
or None when another process holds it) and ``release_lock(fd)``. The lock lives as long as the fd, so a
killed holder frees it; callers turn a held lock into their own one-line error (a spill directory in
use, a batch output directory in use).
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


def release_lock(fd: int) -> None:
    """Give back a lock taken by ``try_lock`` and close its fd."""
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
