"""A quick measured probe of a spill directory's drive, for ``worldpager plan --spill DIR``.

Contract. ``probe_drive(directory, nbytes)`` writes ``nbytes`` (a few hundred MiB; rounded up to whole
pieces) to a fresh file in ``directory`` with ``O_DIRECT`` from one page-aligned buffer, fsyncs, reads
it back with ``O_DIRECT``, removes the file (also on failure) and returns the sequential write and
read rates plus the directory's free space. It measures the way the disk tier moves bytes
(``engine.memory.disk``: aligned pieces, ``O_DIRECT``); where the file system refuses ``O_DIRECT``
(EINVAL) it falls back to buffered I/O and says so (``direct=False``) — the page cache is dropped with
``posix_fadvise`` before the read, but a buffered read rate can still be optimistic.

Standard library only: no torch (the planner's import rule), no numpy.
"""
from __future__ import annotations

import errno
import mmap
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from engine.errors import OutputError

MiB = 1 << 20
PIECE_BYTES = 8 * MiB          # the disk tier's piece size: large enough to reach sequential speed
DEFAULT_PROBE_BYTES = 256 * MiB


@dataclass(frozen=True)
class DriveProbe:
    """Measured sequential rates in B/s, the bytes moved, whether O_DIRECT was used, free bytes."""

    read_Bps: float
    write_Bps: float
    nbytes: int
    direct: bool
    free_bytes: int


def _open(path: Path, flags: int, direct: bool) -> tuple[int, bool]:
    """Open with O_DIRECT when asked and allowed; (fd, whether O_DIRECT is on)."""
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o600), True
        except OSError as exc:
            if exc.errno != errno.EINVAL:   # only "this file system refuses O_DIRECT" falls back
                raise
    return os.open(path, flags, 0o600), False


def _write(path: Path, buf: mmap.mmap, pieces: int, direct: bool) -> tuple[float, bool]:
    fd, direct = _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, direct)
    try:
        t0 = time.perf_counter()
        for i in range(pieces):
            done = os.pwrite(fd, buf, i * len(buf))
            if done != len(buf):
                raise OutputError(f"short write while probing {path.parent} ({done} of {len(buf)} B)")
        os.fsync(fd)                 # the rate includes getting the bytes onto the drive
        return time.perf_counter() - t0, direct
    finally:
        os.close(fd)


def _read(path: Path, buf: mmap.mmap, pieces: int, direct: bool) -> float:
    fd, direct = _open(path, os.O_RDONLY, direct)
    try:
        if not direct and hasattr(os, "posix_fadvise"):
            # Buffered fallback: drop the cached pages we just wrote, or we would time memory.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t0 = time.perf_counter()
        for i in range(pieces):
            if os.preadv(fd, [buf], i * len(buf)) != len(buf):
                raise OutputError(f"short read while probing {path.parent}")
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def probe_drive(directory: str | os.PathLike, nbytes: int = DEFAULT_PROBE_BYTES,
                piece_bytes: int = PIECE_BYTES) -> DriveProbe:
    """Write then read ``nbytes`` in ``directory``; the file is always removed."""
    where = Path(directory)
    if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
        raise OutputError(f"--spill {where}: not a writable directory")
    assert piece_bytes % mmap.PAGESIZE == 0, piece_bytes
    pieces = max(1, -(-nbytes // piece_bytes))
    buf = mmap.mmap(-1, piece_bytes)           # anonymous maps are page-aligned, as O_DIRECT needs
    # Incompressible bytes: some drives compress or deduplicate, which would flatter zeros.
    buf.write(os.urandom(piece_bytes))
    path = where / f".worldpager-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        write_s, direct = _write(path, buf, pieces, direct=True)
        read_s = _read(path, buf, pieces, direct)
    except OSError as exc:
        raise OutputError(f"--spill {where}: drive probe failed: {exc.strerror or exc}") from None
    finally:
        path.unlink(missing_ok=True)
        buf.close()
    moved = pieces * piece_bytes
    return DriveProbe(read_Bps=moved / max(read_s, 1e-9), write_Bps=moved / max(write_s, 1e-9),
                      nbytes=moved, direct=direct, free_bytes=shutil.disk_usage(where).free)
