"""A read-only view of another run's spill directory: the chunks a forked run starts from.

Contract. ``BaseTier(directory, slot_bytes, before=c, format_tag=...)`` opens ``blocks.dat`` read-only
(``O_RDONLY``, with ``O_DIRECT`` where the file system takes it), reads ``index.json`` once and keeps
only chunks below ``c``. It takes no lock and never writes: not the blocks, not the index, not the lock
file, so the run that owns the directory may be resumed or go on meanwhile. Blocks are append-only in
the owner's file, so the offsets read here stay valid while the owner appends (a *fresh* run in that
directory truncates it: then reads fail their crc32 and become misses). ``read``, ``chunks``, ``in``
and the counters are those of ``DiskTier``; ``write``, ``forget_from`` and ``flush_index`` are bugs.
"""
from __future__ import annotations

import errno
import os

from engine.files import probe
from engine.errors import InputError
from engine.memory.disk import DATA_NAME, INDEX_NAME, DiskTier
from engine.memory.types import ChunkId


class BaseTier(DiskTier):
    """Chunks ``< before`` of a spill directory, read-only and unlocked (see the module docstring)."""

    def __init__(self, directory, slot_bytes: int, *, before: ChunkId, format_tag: str = "",
                 direct: bool = True, piece_bytes: int = 8 * 2 ** 20):
        self.before = before
        super().__init__(directory, slot_bytes, format_tag=format_tag, direct=direct, resume=True,
                         index_every=0, piece_bytes=piece_bytes)

    # DiskTier's set-up steps, read-only: no directory made, no lock taken, nothing created.

    def _make_dir(self) -> None:
        for path in (self.dir / INDEX_NAME, self.dir / DATA_NAME):
            if not probe.is_file(path, "spill directory"):
                raise InputError(f"spill directory {self.dir} has no {path.name}: it holds no stored chunks")

    def _take_lock(self) -> int:
        return -1

    def _release_lock(self) -> None:
        pass

    def _open_data(self, direct: bool, resume: bool) -> None:
        self.io_mode = "buffered"
        self._fd = -1
        if direct:
            try:
                self._fd = os.open(self.dir / DATA_NAME, os.O_RDONLY | os.O_DIRECT)
                self.io_mode = "direct"
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
        if self._fd < 0:
            self._fd = os.open(self.dir / DATA_NAME, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size
        self._load_index()
        self._index = {c: e for c, e in self._index.items() if c < self.before}
        self._next = self._size   # nothing is ever appended here

    def _fall_back_to_buffered(self) -> None:
        with self._lock:
            if self.io_mode == "buffered":
                return
            self._retired_fds.append(self._fd)
            self._fd = os.open(self.dir / DATA_NAME, os.O_RDONLY)
            self.io_mode = "buffered"

    # ---- never on a base ----------------------------------------------------------------------

    def write(self, chunk, buf, pace=None) -> int:
        raise AssertionError(f"chunk {chunk} written to the read-only base {self.dir}")

    def forget_from(self, chunk) -> None:
        raise AssertionError(f"forget_from on the read-only base {self.dir}")

    def flush_index(self) -> None:
        raise AssertionError(f"index write on the read-only base {self.dir}")

    def close(self) -> None:
        """Close the file (idempotent); nothing is written."""
        for fd in [self._fd, *self._retired_fds]:
            if fd >= 0:
                os.close(fd)
        self._fd = -1
        self._retired_fds.clear()
