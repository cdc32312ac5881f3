"""The disk tier: fixed-size blocks in one preallocated file under the spill directory.

Contract. ``DiskTier(directory, slot_bytes)`` creates the directory (mode 0700) if missing, takes an
exclusive ``flock`` on ``worldpager.lock`` (a second session gets a one-line ``SpillLockedError``
naming the directory), and opens ``blocks.dat`` with ``O_DIRECT``. Blocks are appended at 4 KiB-aligned
offsets; the file grows in large ``posix_fallocate``d extents. ``write(chunk, buf)`` and
``read(chunk, buf)`` move bytes straight between the file and a caller-owned, 4 KiB-aligned uint8
tensor (a host-pool slot) with ``os.pwritev`` / ``os.preadv`` on a memoryview of it: no extra copy.

Integrity. Each block's crc32 is kept in the index (XORed with its chunk's ``chunk_salt``, so a block
under another chunk's entry fails too) and checked on every read; a mismatch (or a short read) raises
``CorruptBlockError``, so a bad block becomes a failed read, never data. For a block of
more than one piece the crc runs on a helper thread while the drive moves the bytes (on reads it
follows the pieces as they land), so it costs no I/O time unless the CPU is the slower; each I/O thread
makes its helper once and keeps it (no thread start per block). The index
(JSON: chunk -> offset, length, crc, format) is written atomically — data fdatasync'ed first, then a
temp file, fdatasync, rename, directory fsync — every ``index_every`` writes and on ``close()``, so a
session can be resumed after a crash with ``resume=True`` (blocks written after the last index write
are simply absent). Read back (``read_index``), a damaged entry (a field missing or of the wrong type)
is dropped with a warning and its chunk becomes a miss; a document that is not JSON or not an index is
a one-line ``SpillIndexError`` naming the file.

Quota (``--spill-max``, ``engine.memory.quota``). ``max_bytes`` caps the block file. A dropped chunk is
``retire``d: its block and index entry stay (a save point made before the drop may still need it) until
``release(before)`` gives back the blocks retired before chunk ``before`` (a newer save point is on the
drive): their entries leave the index and their offsets are reused by later writes, so the file stops
growing at the cap. When a write finds neither a free block nor room under the cap, the oldest retired
block is given back at once (``early_releases``; only a save point older than the newest could have
needed it). Only a tier with a cap reuses the blocks of chunks a resume forgets; without one they stay
unreferenced in the file, as they always have. ``allocated_bytes`` is what the tier takes on the drive: the block file's allocated blocks
and the index file.

Set-up. A tier whose set-up fails closes what it opened and removes what it created (the directory
if it made it, the lock, the block file, the index); ``discard()`` does the same for a closed tier whose
session generated nothing. Files and directories that were there before are never removed.

Failures. No room (ENOSPC, or the ``max_bytes`` cap) raises a one-line ``DiskFullError`` naming the
directory; earlier blocks stay readable. A block file past the process's file-size limit (EFBIG,
``ulimit -f``) is not a full drive: its ``OSError`` goes on as it is, for the session to name the limit. Where the file system refuses O_DIRECT (EINVAL on open or
first I/O) one warning is logged and buffered I/O is used (``io_mode`` says which). Opening the tier (the
directory, its lock, the block file, the index) on a drive that fails for another reason (EIO, ENOMEM,
EACCES) is one ``engine.files.probe.DriveError`` line naming the path and the errno. ``pace(nbytes)``,
when given, is called before each piece of I/O (the bandwidth cap lives with the caller).
Thread-safe: reads and writes may run on different threads.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import queue
import threading
import zlib
from pathlib import Path
from typing import Callable

import torch

from engine.files import probe
from engine.files.bounded_json import JsonInputError, parse_json
from engine.files.durable import fsync_directory
from engine.files.file_lock import release_lock, try_lock
from engine.errors import ConfigError, InputError, OutputError
from engine.files.input_files import open_input, shown
from engine.memory.types import ChunkId, CorruptBlockError, DiskFullError, SpillIndexError, SpillLockedError

log = logging.getLogger("worldpager.memory")

ALIGN = 4096
MiB = 1 << 20
LOCK_NAME, DATA_NAME, INDEX_NAME = "worldpager.lock", "blocks.dat", "index.json"
INDEX_VERSION = 2   # 2: a block's crc32 is bound to its chunk id (a block under another chunk's entry fails)
RESERVE_BYTES = 1 * MiB   # left free on the drive for the index
SPILL_FIX = "check or replace the drive, or choose another --spill directory"
Pace = Callable[[int], None]


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _round_down(n: int, to: int) -> int:
    return max(0, n // to * to)


class _CrcHelper:
    """A daemon thread that checksums pieces for one I/O thread; made on that thread's first multi-piece
    block and kept, so that a block costs no thread start (one per reader and writer thread)."""

    _local = threading.local()

    def __init__(self) -> None:
        self.pieces: queue.SimpleQueue = queue.SimpleQueue()   # memoryview pieces, None ends a block
        self.results: queue.SimpleQueue = queue.SimpleQueue()  # (crc, error) per block
        threading.Thread(target=self._run, name="wp-crc", daemon=True).start()

    @classmethod
    def for_this_thread(cls) -> "_CrcHelper":
        helper = getattr(cls._local, "helper", None)
        if helper is None:
            helper = cls._local.helper = cls()
        return helper

    def _run(self) -> None:
        crc, error = 0, None
        while True:
            piece = self.pieces.get()
            if piece is None:
                self.results.put((crc, error))
                crc, error = 0, None
            elif error is None:
                try:
                    crc = zlib.crc32(piece, crc)
                except Exception as exc:   # handed to the caller with the block's result, never lost
                    error = exc


def chunk_salt(chunk: ChunkId) -> int:
    """What a block's crc32 is XORed with in the index: its chunk's own value, so a block found under
    another chunk's entry (a damaged or edited index) fails its check instead of feeding the wrong KV."""
    return zlib.crc32(f"worldpager chunk {int(chunk)}".encode())


class _Crc:
    """crc32 of a buffer fed piece by piece; ``threaded``: computed on this thread's helper meanwhile.

    zlib.crc32 and os.preadv/pwritev all release the GIL, so the checksum and the drive run at once.
    """

    def __init__(self, threaded: bool) -> None:
        self._crc = 0
        self._helper = _CrcHelper.for_this_thread() if threaded else None

    def feed(self, piece: memoryview) -> None:
        if self._helper is None:
            self._crc = zlib.crc32(piece, self._crc)
        else:
            self._helper.pieces.put(piece)

    def result(self) -> int:
        """Wait for every fed piece; the crc32 of them all, in feeding order."""
        if self._helper is not None:
            self._helper.pieces.put(None)
            self._crc, error = self._helper.results.get()
            self._helper = None
            if error is not None:
                raise error
        return self._crc


class DiskTier:
    """Append-only block file + crc index under one locked directory (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike, slot_bytes: int, *, format_tag: str = "",
                 max_bytes: int | None = None, extent_bytes: int = 256 * MiB, direct: bool = True,
                 resume: bool = False, index_every: int = 8, piece_bytes: int = 8 * MiB):
        assert slot_bytes % ALIGN == 0 and piece_bytes % ALIGN == 0
        self.dir = Path(directory)
        self.slot_bytes = slot_bytes
        self.format_tag = format_tag
        self.max_bytes = max_bytes
        self.extent_bytes = max(_round_up(extent_bytes, ALIGN), ALIGN)
        self.piece_bytes = piece_bytes
        self.index_every = index_every
        self._lock = threading.Lock()         # offsets, index, fd swaps
        self._index_lock = threading.Lock()   # one index writer at a time
        self._index: dict[ChunkId, dict] = {}
        self._free: list[int] = []            # offsets of blocks whose write failed or were released
        self._retired: dict[ChunkId, int] = {}  # dropped chunk -> the chunk it was dropped at (oldest first)
        self.early_releases = 0               # retired blocks given back before a save point allowed it
        self._next = 0
        self._unsaved = 0
        self._retired_fds: list[int] = []
        self.bytes_read = self.bytes_written = 0
        self.damaged_entries = 0              # index entries dropped at load (their chunks are misses)
        self._lock_fd = self._fd = -1
        self.created: list[Path] = []          # what this tier makes: the only paths ``discard`` removes
        # Opening the tier looks at the drive first: a failing one (EIO, ENOMEM…) is one line, not a traceback.
        try:
            with probe.probing(self.dir, "spill directory", SPILL_FIX):
                self.created = self._missing()
                self._make_dir()
                self._lock_fd = self._take_lock()
                self._open_data(direct, resume)
        except BaseException:   # nothing of a tier that could not be set up is left open or behind
            if self._fd >= 0:
                os.close(self._fd)
            self._release_lock()
            self.discard()
            raise

    # ---- set-up ---------------------------------------------------------------------------------

    def _missing(self) -> list[Path]:
        """The paths set-up may create that are not there yet: directories outermost first, then files."""
        dirs = [d for d in (self.dir, *self.dir.parents) if not d.exists()][::-1]
        names = (LOCK_NAME, DATA_NAME, INDEX_NAME, INDEX_NAME + ".tmp")
        return dirs + [self.dir / n for n in names if not (self.dir / n).exists()]

    def discard(self) -> None:
        """Remove what set-up created — files, then the directories it made if they are empty — for a
        session that generated nothing; a tier still open removes nothing (a thread may use it)."""
        if self._lock_fd >= 0:
            return
        made = [p for p in self.created if p.parent == self.dir]
        for path in made:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        for directory in reversed([p for p in self.created if p not in made]):
            try:
                directory.rmdir()
            except OSError:   # holds something else (or is gone): left as it is
                pass
        self.created = []

    def _make_dir(self) -> None:
        try:
            if not probe.exists(self.dir, "spill directory", SPILL_FIX):
                self.dir.mkdir(mode=0o700, parents=True)
                os.chmod(self.dir, 0o700)   # mkdir's mode is masked by the umask
        except OSError as exc:
            raise OutputError(f"cannot create spill directory {self.dir}: {exc.strerror}") from None
        if not probe.is_dir(self.dir, "spill directory", SPILL_FIX) or not os.access(self.dir, os.W_OK | os.X_OK):
            raise OutputError(f"spill directory {self.dir} is not a writable directory")

    def _take_lock(self) -> int:
        path = self.dir / LOCK_NAME
        fd = try_lock(path, 0o600)
        if fd is None:
            raise SpillLockedError(
                f"spill directory {self.dir} is in use by another WorldPager session "
                f"(lock {path} is held); choose another --spill directory")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            release_lock(self._lock_fd)
            self._lock_fd = -1

    def _open_data(self, direct: bool, resume: bool) -> None:
        flags = os.O_RDWR | os.O_CREAT | (0 if resume else os.O_TRUNC)
        if not resume and probe.exists(self.dir / INDEX_NAME, "spill directory", SPILL_FIX):
            log.info("spill directory %s: starting fresh; blocks of an earlier session are "
                     "discarded (resume=True keeps them)", self.dir)
        self.io_mode = "direct" if direct else "buffered"
        self._fd = -1
        if direct:
            try:
                self._fd = os.open(self.dir / DATA_NAME, flags | os.O_DIRECT, 0o600)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._warn_buffered("open")
        if self._fd < 0:
            self._fd = os.open(self.dir / DATA_NAME, flags, 0o600)
        self._size = os.fstat(self._fd).st_size
        if resume:
            self._load_index()
        else:
            self._write_index()

    def _warn_buffered(self, where: str) -> None:
        self.io_mode = "buffered"
        log.warning("spill directory %s: the file system refuses O_DIRECT (EINVAL on %s); "
                    "using buffered I/O (slower, goes through the page cache)", self.dir, where)

    def _fall_back_to_buffered(self) -> None:
        """EINVAL on the first direct I/O: reopen without O_DIRECT, once, for every thread."""
        with self._lock:
            if self.io_mode == "buffered":
                return
            self._retired_fds.append(self._fd)
            self._fd = os.open(self.dir / DATA_NAME, os.O_RDWR)
            self._warn_buffered("first I/O")

    # ---- blocks ---------------------------------------------------------------------------------

    def __contains__(self, chunk: ChunkId) -> bool:
        return chunk in self._index

    def chunks(self) -> list[ChunkId]:
        with self._lock:
            return sorted(self._index)

    @property
    def blocks(self) -> int:
        return len(self._index)

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return sum(e["length"] for e in self._index.values())

    @property
    def allocated_bytes(self) -> int:
        """Bytes the tier takes on the drive: the block file's allocated blocks and the index."""
        total = 0
        for name in (DATA_NAME, INDEX_NAME):
            try:
                total += os.stat(self.dir / name).st_blocks * 512
            except FileNotFoundError:
                pass
        return total

    @property
    def retired(self) -> int:
        with self._lock:
            return len(self._retired)

    def retire(self, chunk: ChunkId, at: ChunkId) -> None:
        """``chunk`` was dropped at chunk ``at``: its block is given back by a later ``release``."""
        with self._lock:
            if chunk in self._index:
                self._retired.setdefault(chunk, at)

    def release(self, before: ChunkId | None = None) -> int:
        """Give back the blocks of chunks retired before chunk ``before`` (all: None); how many."""
        with self._lock:
            gone = [c for c, at in self._retired.items() if before is None or at < before]
            for chunk in gone:
                self._release_locked(chunk)
            return len(gone)

    def _release_locked(self, chunk: ChunkId) -> None:
        del self._retired[chunk]
        entry = self._index.pop(chunk)
        self._free.append(entry["offset"])
        self._unsaved += 1

    def write(self, chunk: ChunkId, buf: torch.Tensor, pace: Pace | None = None) -> int:
        """Append ``buf`` (uint8, 4 KiB-aligned address and length) as ``chunk``'s block."""
        view = self._check_buffer(buf)
        assert chunk not in self._index, f"chunk {chunk} written to disk twice"
        offset = self._reserve(len(view))
        checksum = self._crc(view)
        checksum.feed(view)   # the drive and the checksum only read the source: both at once
        try:
            self._io(os.pwritev, view, offset, pace)
        except Exception:
            with self._lock:
                self._free.append(offset)
            raise
        finally:
            crc = checksum.result()   # also on failure: no crc thread outlives the call
        with self._lock:
            self._index[chunk] = {"offset": offset, "length": len(view), "crc": crc ^ chunk_salt(chunk),
                                  "format": self.format_tag}
            self.bytes_written += len(view)
            self._unsaved += 1
            due = self.index_every > 0 and self._unsaved >= self.index_every
        if due:
            self.flush_index()
        return len(view)

    def read(self, chunk: ChunkId, buf: torch.Tensor, pace: Pace | None = None) -> int:
        """Fill ``buf`` with ``chunk``'s block; CorruptBlockError when it fails its crc."""
        with self._lock:
            entry = self._index.get(chunk)
        if entry is None:
            raise KeyError(f"chunk {chunk} is not on disk in {self.dir}")
        view = self._check_buffer(buf)[:entry["length"]]
        assert len(view) == entry["length"], "read buffer smaller than the block"
        checksum = self._crc(view)
        try:
            got = self._io(os.preadv, view, entry["offset"], pace, checksum.feed)
        finally:
            crc = checksum.result()
        if got != len(view) or crc ^ chunk_salt(chunk) != entry["crc"]:
            raise CorruptBlockError(f"chunk {chunk}: block at offset {entry['offset']} of "
                                    f"{self.dir / DATA_NAME} fails its crc32 check")
        with self._lock:
            self.bytes_read += len(view)
        return len(view)

    def _check_buffer(self, buf: torch.Tensor) -> memoryview:
        assert buf.dtype == torch.uint8 and buf.device.type == "cpu" and buf.is_contiguous()
        assert buf.data_ptr() % ALIGN == 0 and buf.numel() % ALIGN == 0, (
            "disk I/O buffers must be 4 KiB-aligned in address and length (use host-pool slots)")
        return memoryview(buf.numpy()).cast("B")

    def _crc(self, view: memoryview) -> _Crc:
        """A crc thread for multi-piece blocks; a one-piece block has no I/O to overlap it with."""
        return _Crc(threaded=len(view) > self.piece_bytes)

    def _io(self, call, view: memoryview, offset: int, pace: Pace | None,
            landed: Callable[[memoryview], None] | None = None) -> int:
        """pread/pwrite ``view`` at ``offset`` in pieces; returns the bytes moved (short at EOF).

        ``landed`` receives each piece's moved bytes, in order, as soon as the call returns.
        """
        done = 0
        while done < len(view):
            piece = view[done:done + self.piece_bytes]
            if pace is not None:
                pace(len(piece))
            try:
                n = call(self._fd, [piece], offset + done)
            except OSError as exc:
                if exc.errno == errno.EINVAL and self.io_mode == "direct":
                    self._fall_back_to_buffered()
                    continue
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise self._full(len(view)) from None
                raise
            if n == 0:
                break
            if landed is not None:
                landed(piece[:n])
            done += n
        return done

    # ---- space ----------------------------------------------------------------------------------

    def _reserve(self, length: int) -> int:
        with self._lock:
            if self._free and length <= self.slot_bytes:
                return self._free.pop()
            offset = self._next
            if self.max_bytes is not None and offset + length > self.max_bytes and self._retired:
                self._release_locked(next(iter(self._retired)))   # the cap reached: the oldest retired block
                self.early_releases += 1
                return self._free.pop()
            if offset + length > self._size:
                self._grow(offset + length)
            self._next = offset + length
            return offset

    def _grow(self, needed: int) -> None:
        if self.max_bytes is not None and needed > self.max_bytes:
            raise self._full(needed - self._next)
        new_size = _round_up(needed, self.extent_bytes)
        if self.max_bytes is not None:
            new_size = min(new_size, self.max_bytes)
        # Never take the drive's last RESERVE_BYTES: the index (and whatever else lives there) must
        # still be rewritable when the blocks have filled it. Near the end, grow by the block only.
        free = self._free_bytes()
        if free is not None:
            if needed - self._size > free - RESERVE_BYTES:
                raise self._full(needed - self._next)
            new_size = min(new_size, self._size + _round_down(free - RESERVE_BYTES, ALIGN))
        try:
            try:
                os.posix_fallocate(self._fd, self._size, new_size - self._size)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or new_size <= needed:
                    raise
                # A failed fallocate may keep what it got past the end of the file: give it back,
                # then take only what this block needs.
                os.ftruncate(self._fd, self._size)
                new_size = _round_up(needed, ALIGN)
                os.posix_fallocate(self._fd, self._size, new_size - self._size)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise self._full(needed - self._next) from None
            if exc.errno == errno.EFBIG:   # the file-size limit (ulimit -f), not a full drive: said as such
                raise
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            os.ftruncate(self._fd, new_size)   # no fallocate here: a sparse file, ENOSPC at write
        self._size = new_size

    def _free_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.dir)
        except OSError:
            return None
        if st.f_blocks == 0:   # no size reported (ramfs): free space unknown, not none
            return None
        return st.f_bavail * st.f_frsize

    def _full(self, length: int) -> DiskFullError:
        return DiskFullError(f"spill directory {self.dir} is full: no room for another "
                             f"{length / MiB:.1f} MiB block after {len(self._index)} blocks")

    # ---- index ----------------------------------------------------------------------------------

    def forget_from(self, chunk: ChunkId) -> None:
        """Drop chunks ``chunk`` and later from the index (a run resumed at ``chunk`` makes them
        again; their blocks are reused by later writes)."""
        with self._lock:
            for c in [c for c in self._index if c >= chunk]:
                offset = self._index.pop(c)["offset"]
                if self.max_bytes is not None:   # only a quota reuses them; otherwise they stay unreferenced
                    self._free.append(offset)
                self._retired.pop(c, None)
            self._unsaved += 1

    def flush_index(self) -> None:
        """Make every block written so far durable and findable after a crash."""
        with self._index_lock:
            os.fdatasync(self._fd)
            self._write_index()

    def _write_index(self) -> None:
        with self._lock:
            blocks = {str(c): dict(e) for c, e in self._index.items()}
            self._unsaved = 0
        doc = {"version": INDEX_VERSION, "slot_bytes": self.slot_bytes,
               "format": self.format_tag, "blocks": blocks}
        tmp = self.dir / (INDEX_NAME + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f)
                f.flush()
                os.fdatasync(f.fileno())
        except OSError as exc:   # the previous index stays whole: it is only ever replaced by rename
            tmp.unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"spill directory {self.dir} is full: no room to rewrite its "
                                    f"{INDEX_NAME}") from None
            raise
        os.replace(tmp, self.dir / INDEX_NAME)
        fsync_directory(self.dir)

    def _load_index(self) -> None:
        blocks, damaged = read_index(self.dir / INDEX_NAME, self.slot_bytes, self.format_tag)
        for chunk, why in damaged:
            log.warning("%s: the entry of chunk %s is damaged (%s): that chunk is a miss and is made "
                        "again if needed", self.dir / INDEX_NAME, chunk, why)
        self.damaged_entries = len(damaged)
        self._index = blocks
        self._next = max((e["offset"] + e["length"] for e in self._index.values()), default=0)
        if self.max_bytes is not None:   # a quota reuses the blocks given back before the resume
            used = {e["offset"] for e in self._index.values()}
            self._free = [o for o in range(0, self._next, self.slot_bytes) if o not in used]

    def close(self, write_index: bool = True) -> None:
        """Write the index (unless told not to: an abort keeps the last durable one), close the
        file, release the lock (idempotent)."""
        if self._lock_fd < 0:
            return
        try:
            if write_index:
                self.flush_index()
        except (OSError, DiskFullError) as exc:
            # A full drive: the index written last (at the last save point, or every few blocks)
            # stays; blocks written since are not findable, and a resume makes them again.
            log.warning("%s: index not rewritten at close (%s)", self.dir, exc)
        finally:
            for fd in [self._fd, *self._retired_fds]:
                os.close(fd)
            self._retired_fds.clear()
            self._release_lock()

    def __enter__(self) -> "DiskTier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- reading an index back (resume, fork, checks): damage is data, never a traceback -------------------

_ENTRY_INTS = ("offset", "length", "crc")


MAX_INDEX_BYTES = 1 << 30   # ~100 bytes a chunk: millions of chunks


def _index_bytes(path: Path, what: str, fix: str) -> bytes:
    """The index file's bytes through the input gate: a FIFO, a directory or a file under /proc there is
    refused (never waited on)."""
    try:
        with open_input(path, what) as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
    except InputError as exc:
        reason = str(exc).removeprefix(f"{what} {shown(path)} ").removeprefix("is ").split(";")[0]
        raise SpillIndexError(path, f"unreadable ({reason})") from None
    except OSError as exc:
        raise probe.drive_error(path, exc, what, fix) from None
    if len(raw) > MAX_INDEX_BYTES:
        raise SpillIndexError(path, f"larger than {MAX_INDEX_BYTES:,} bytes: not an index")
    return raw


def _parse_index(path: Path, raw: bytes):
    """The JSON value of the index's bytes (bounded: encoding, nesting depth); else one SpillIndexError."""
    try:
        return parse_json(raw, "it", MAX_INDEX_BYTES)
    except JsonInputError as exc:
        why = str(exc).removeprefix("it is ")
        raise SpillIndexError(path, "it is not text" if why.startswith("not UTF-8") else
                              f"not valid JSON ({why.removeprefix('not JSON: ')})") from None


def index_document(path: Path, fix: str = SPILL_FIX, what: str = "spill index") -> dict:
    """The parsed ``index.json`` at ``path``, checked for its overall shape; ``SpillIndexError`` (one
    line naming the file) when it is missing, unreadable, not JSON or not an index; a drive that fails
    to read it is a ``DriveError`` ending with ``fix``."""
    if probe.stat(path, what, fix) is None:   # the drive, not the file (EIO, ENOMEM, EACCES…): a DriveError
        raise SpillIndexError(path, "missing")
    doc = _parse_index(path, _index_bytes(path, what, fix))
    if not isinstance(doc, dict):
        raise SpillIndexError(path, f"not an index (a JSON {type(doc).__name__}, not an object)")
    for key in ("version", "slot_bytes", "format", "blocks"):
        if key not in doc:
            raise SpillIndexError(path, f"not an index (no {key!r})")
    if not isinstance(doc["blocks"], dict):
        raise SpillIndexError(path, f"not an index ('blocks' is a {type(doc['blocks']).__name__})")
    return doc


def _entry_problem(key: str, entry, slot_bytes: int) -> str | None:
    """Why one block entry cannot be used, or None."""
    if not key.isdigit() or not key.isascii():
        return f"chunk id {key[:20]!r} is not a whole number"
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__}, not an object"
    for name in _ENTRY_INTS:
        value = entry.get(name)
        if value is None:
            return f"no {name!r}"
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{name!r} is {str(value)[:20]!r}, not a whole number"
    if not 0 < entry["length"] <= slot_bytes:
        return f"'length' {entry['length']} is not within one block of {slot_bytes} B"
    if entry["offset"] % ALIGN or entry["crc"] >= 2 ** 32:
        return "'offset' is not 4 KiB-aligned" if entry["offset"] % ALIGN else "'crc' is not a crc32"
    return None


def _shown(value) -> str:
    """A value read from a file, for a one-line message: a number as it is, anything else quoted
    (so a newline or a long text in it cannot break the line), shortened."""
    text = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_index(path: Path, slot_bytes: int, format_tag: str) -> tuple[dict[ChunkId, dict], list[tuple[str, str]]]:
    """The usable block entries of ``index.json`` (chunk -> offset, length, crc, format) and the damaged
    ones as (chunk, why): a damaged entry is dropped (its chunk is a miss), a damaged document is a
    ``SpillIndexError``, an index of another format a ``ConfigError``."""
    doc = index_document(path)
    if doc["version"] != INDEX_VERSION or doc["slot_bytes"] != slot_bytes or doc["format"] != format_tag:
        raise ConfigError(f"cannot resume from spill directory {Path(path).parent}: its {path} holds "
                          f"{_shown(doc['format'])} blocks of {_shown(doc['slot_bytes'])} B (index version "
                          f"{_shown(doc['version'])}), this session stores {format_tag!r} blocks of {slot_bytes} B")
    blocks, damaged = {}, []
    for key, entry in doc["blocks"].items():
        why = _entry_problem(key, entry, slot_bytes)
        if why is None:
            blocks[int(key)] = {name: entry[name] for name in _ENTRY_INTS} | {"format": format_tag}
        else:
            damaged.append((key[:20], why))
    return blocks, damaged
