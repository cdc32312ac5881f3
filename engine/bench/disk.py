"""Throughput of the disk tier against the raw drive, measured in the same directory in the same run.

Contract: :func:`bench_disk` works inside a fresh sub-directory of ``spill_dir`` (which must exist and
be writable; nothing else in it is touched) and removes that sub-directory afterwards, whatever
happens. It measures, one pass after another on the same number of bytes:

1. the raw drive: ``dd if=/dev/zero of=raw.bin bs=BLOCK count=N oflag=direct conv=fsync`` and
   ``dd if=raw.bin of=/dev/null bs=BLOCK iflag=direct``, seconds and bytes parsed from dd's summary
   line; where ``dd`` is missing or its output cannot be read, an equivalent ``os.write`` /
   ``os.readv`` loop over one page-aligned buffer (``raw_method`` says which ran);
2. :class:`~engine.memory.disk.DiskTier` writing ``N`` whole blocks from a host-pool slot and reading
   them back into another (the code path a session uses: aligned pool buffers, pieces, crc32 on
   both sides, index flushes); the write pass ends with ``flush_index()`` (an fdatasync), as dd's
   ends with ``conv=fsync``.

The four passes are repeated ``rounds`` times, raw first and tier first in turn, and each figure is
the median over rounds (a drive's speed drifts, and a shared or virtual one's jumps). It returns a
flat dict: seconds and GB/s (1e9 B/s) of each pass, ``write_vs_raw`` / ``read_vs_raw`` (tier GB/s over
raw GB/s; the aim is >= 0.9) with the per-round ratios beside them, the in-memory crc32 rate (the
tier's only CPU work per byte), whether O_DIRECT was in effect, and ``notes``. It prints nothing and
asserts nothing about speed (benchmarks are never tests).

The page cache must not inflate reads: with O_DIRECT it is bypassed. Where the file system refuses
O_DIRECT, both sides run buffered, each file is fsync'ed and dropped from the cache with
``POSIX_FADV_DONTNEED`` before it is read back, and a note says so (a best effort: the kernel may
keep pages it cannot drop).

A block defaults to one mg2-universal int4 chunk slot (129,441,792 B), scaled down (4 KiB-aligned) so
that at least :data:`MIN_BLOCKS` blocks fit in ``total_bytes``.
"""
from __future__ import annotations

import errno
import mmap
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import model_config
from engine.errors import ConfigError, OutputError
from engine.facts.kv_format import ChunkFormat
from engine.memory.disk import ALIGN, DATA_NAME, DiskTier
from engine.memory.host_pool import HostPool

MiB, GiB = 1 << 20, 1 << 30
MIN_BLOCKS = 4
FREE_MARGIN = 256 * MiB        # the tier's file grows in extents: leave it room past the last block
RAW_NAME, TIER_DIR = "raw.bin", "tier"
RAW_METHODS = ("auto", "dd", "python")
_DD_SUMMARY = re.compile(r"^(\d+) bytes\b.*copied, ([0-9.]+) s", re.MULTILINE)


def default_block_bytes() -> int:
    """One mg2-universal int4 chunk as the pool and the disk tier hold it."""
    return ChunkFormat.from_layout(model_config("mg2-universal").kv_layout(), bits=4).slot_bytes


@dataclass(frozen=True)
class Pass:
    """One timed pass over the drive."""

    nbytes: int
    seconds: float

    @property
    def gbps(self) -> float:
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")


# ---- set-up ---------------------------------------------------------------------------------------

def plan_blocks(total_bytes: int, block_bytes: int | None = None) -> tuple[int, int]:
    """(block size, block count): explicit blocks are kept (4 KiB-aligned); the default shrinks."""
    if total_bytes < ALIGN:
        raise ConfigError(f"benchmark size of {total_bytes} B is below one 4 KiB block")
    if block_bytes is not None:
        if block_bytes <= 0:
            raise ConfigError(f"block of {block_bytes} B: must be positive")
        block = -(-block_bytes // ALIGN) * ALIGN
        if block > total_bytes:
            raise ConfigError(f"block of {block / MiB:.1f} MiB is larger than the "
                              f"{total_bytes / MiB:.1f} MiB to move; raise the total or lower the block")
    else:
        # Several blocks, so that per-block costs (crc, index flushes) show up as they do in a session.
        block = min(default_block_bytes(), total_bytes // MIN_BLOCKS // ALIGN * ALIGN) or ALIGN
    return block, total_bytes // block


def check_spill_dir(spill_dir: Path, need_bytes: int) -> None:
    """One-line errors for a directory the benchmark cannot use; it is never created here."""
    if not spill_dir.exists():
        raise OutputError(f"spill directory {spill_dir} does not exist (the benchmark writes only "
                          "where it is told to: create it first)")
    if not spill_dir.is_dir() or not os.access(spill_dir, os.W_OK | os.X_OK):
        raise OutputError(f"spill directory {spill_dir} is not a writable directory")
    free = shutil.disk_usage(spill_dir).free
    if free < need_bytes:
        raise OutputError(f"spill directory {spill_dir} has {free / GiB:.2f} GiB free; the benchmark "
                          f"needs {need_bytes / GiB:.2f} GiB (lower --total-gib)")


def check_disk_bench(spill_dir: str | os.PathLike, total_bytes: int,
                     block_bytes: int | None = None) -> tuple[int, int]:
    """Everything a user can get wrong, before any byte is written: (block size, block count)."""
    block, count = plan_blocks(total_bytes, block_bytes)
    check_spill_dir(Path(spill_dir), block * count + FREE_MARGIN)
    return block, count


def direct_io_works(directory: Path) -> bool:
    """Whether this file system takes an O_DIRECT write of one aligned 4 KiB page."""
    probe = directory / "direct.probe"
    buf = mmap.mmap(-1, ALIGN)   # page-aligned, as O_DIRECT requires
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
        try:
            os.write(fd, buf)
        finally:
            os.close(fd)
        return True
    except OSError as exc:
        if exc.errno != errno.EINVAL:   # EINVAL is the refusal; anything else is a real failure
            raise
        return False
    finally:
        probe.unlink(missing_ok=True)   # some file systems create the file before refusing
        buf.close()


def drop_cache(path: Path) -> None:
    """Buffered fallback only: make the file's pages clean, then ask the kernel to forget them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drive_name(path: Path) -> str | None:
    """Block device under ``path`` (``nvme0n1p2 (Samsung ...)``) from sysfs; None where there is none."""
    st = os.stat(path)
    node = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    try:
        real = node.resolve(strict=True)
    except OSError:
        return None   # overlay, tmpfs, btrfs subvolume: no single block device to name
    disk = real.parent if (real / "partition").exists() else real
    try:
        model = (disk / "device" / "model").read_text().strip()
    except OSError:
        model = ""
    return f"{real.name} ({model})" if model else real.name


# ---- the raw drive --------------------------------------------------------------------------------

def run_dd(args: list[str]) -> Pass | None:
    """Run dd in the C locale; its summary line as a Pass, or None when dd failed or said nothing usable."""
    proc = subprocess.run(["dd", *args], capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"}, check=False)
    match = _DD_SUMMARY.search(proc.stderr)
    if proc.returncode != 0 or match is None:
        return None
    return Pass(int(match.group(1)), float(match.group(2)))


def raw_with_dd(path: Path, block: int, count: int, direct: bool) -> tuple[Pass, Pass] | None:
    oflag, iflag = (["oflag=direct"], ["iflag=direct"]) if direct else ([], [])
    wrote = run_dd(["if=/dev/zero", f"of={path}", f"bs={block}", f"count={count}", *oflag,
                    "conv=fsync"])
    if wrote is None:
        return None
    if not direct:
        drop_cache(path)
    read = run_dd([f"if={path}", "of=/dev/null", f"bs={block}", *iflag])
    return None if read is None else (wrote, read)


def raw_with_python(path: Path, block: int, count: int, direct: bool) -> tuple[Pass, Pass]:
    """dd's two passes as plain syscalls: one write / read of ``block`` bytes each."""
    buf = mmap.mmap(-1, block)            # page-aligned zeros, like /dev/zero through dd's buffer
    view = memoryview(buf)
    flag = os.O_DIRECT if direct else 0
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flag, 0o600)
        try:
            t0 = time.perf_counter()
            for _ in range(count):
                written = 0
                while written < block:
                    written += os.write(fd, view[written:])
            os.fsync(fd)
            wrote = Pass(block * count, time.perf_counter() - t0)
        finally:
            os.close(fd)
        if not direct:
            drop_cache(path)
        fd = os.open(path, os.O_RDONLY | flag)
        try:
            t0, got = time.perf_counter(), 0
            while (n := os.readv(fd, [view])) > 0:
                got += n
            read = Pass(got, time.perf_counter() - t0)
        finally:
            os.close(fd)
    finally:
        view.release()
        buf.close()
    return wrote, read


def measure_raw(path: Path, block: int, count: int, direct: bool, method: str,
                notes: list[str]) -> tuple[str, Pass, Pass]:
    if method not in RAW_METHODS:
        raise ConfigError(f"raw method {method!r} (choose from {', '.join(RAW_METHODS)})")
    if method != "python":
        if shutil.which("dd") is None:
            if method == "dd":
                raise ConfigError("dd is not on PATH (use the python raw method)")
            notes.append("dd not found: raw drive measured with an os.write/os.readv loop")
        else:
            passes = raw_with_dd(path, block, count, direct)
            if passes is not None:
                return "dd", *passes
            if method == "dd":
                raise OutputError(f"dd could not write and read {path} (or printed no summary line)")
            notes.append("dd failed or printed no summary: raw drive measured with an os.write/os.readv loop")
    return "python", *raw_with_python(path, block, count, direct)


# ---- the tier -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TierPasses:
    io_mode: str          # "direct" or "buffered", as the tier ended up
    piece_bytes: int      # the tier's largest single syscall
    write: Pass
    read: Pass
    crc_gbps: float       # zlib.crc32 over one block in memory


def measure_tier(directory: Path, block: int, count: int, direct: bool, piece_bytes: int | None,
                 index_every: int) -> TierPasses:
    """Write ``count`` blocks through a DiskTier from a pool slot, read them back into another."""
    pool = HostPool(2, block)
    src, dst = pool.slot(0), pool.slot(1)
    # Random bytes: int4 codes are high-entropy, and a compressing drive must not flatter the tier.
    src.copy_(torch.randint(0, 256, (block,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)))
    crc_s = _crc_seconds(src)
    extra = {} if piece_bytes is None else {"piece_bytes": piece_bytes}
    tier = DiskTier(directory, block, format_tag="bench", direct=direct, index_every=index_every, **extra)
    try:
        t0 = time.perf_counter()
        for chunk in range(count):
            tier.write(chunk, src)
        tier.flush_index()
        wrote = Pass(block * count, time.perf_counter() - t0)
        if tier.io_mode != "direct":
            drop_cache(directory / DATA_NAME)
        t0 = time.perf_counter()
        for chunk in range(count):
            tier.read(chunk, dst)
        read = Pass(block * count, time.perf_counter() - t0)
        assert torch.equal(src, dst), "the last block read back differs from what was written"
        return TierPasses(tier.io_mode, tier.piece_bytes, wrote, read, block / crc_s / 1e9)
    finally:
        tier.close()
        pool.close()


def _crc_seconds(buf: torch.Tensor) -> float:
    view = memoryview(buf.numpy()).cast("B")
    zlib.crc32(view)   # warm: fault the pages in, load the tables
    t0 = time.perf_counter()
    zlib.crc32(view)
    return time.perf_counter() - t0


# ---- the benchmark --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Round:
    raw_method: str
    raw_write: Pass
    raw_read: Pass
    tier: TierPasses


def one_round(work: Path, block: int, count: int, direct: bool, raw_method: str, tier_first: bool,
              tier_kw: dict, notes: list[str]) -> Round:
    """Raw and tier passes on the same bytes; each side's files are gone before the other starts."""
    def raw() -> tuple[str, Pass, Pass]:
        out = measure_raw(work / RAW_NAME, block, count, direct, raw_method, notes)
        (work / RAW_NAME).unlink()
        return out

    def tier() -> TierPasses:
        out = measure_tier(work / TIER_DIR, block, count, direct, **tier_kw)
        shutil.rmtree(work / TIER_DIR)
        return out

    if tier_first:
        t = tier()
        r = raw()
    else:
        r = raw()
        t = tier()
    return Round(r[0], r[1], r[2], t)


def bench_disk(spill_dir: str | os.PathLike, total_bytes: int, block_bytes: int | None = None, *,
               rounds: int = 3, raw_method: str = "auto", piece_bytes: int | None = None,
               index_every: int = 8) -> dict:
    """Raw drive vs DiskTier on ``total_bytes`` in ``spill_dir``; see the module docstring.

    ``rounds`` repeats the four passes, raw first in even rounds and tier first in odd ones (drives
    drift: caches fill, clocks throttle); every figure is the median over rounds.
    """
    if rounds < 1:
        raise ConfigError(f"rounds must be at least 1, got {rounds}")
    spill = Path(spill_dir)
    block, count = check_disk_bench(spill, total_bytes, block_bytes)
    notes: list[str] = []
    if piece_bytes is not None:
        if piece_bytes <= 0:
            raise ConfigError(f"I/O piece of {piece_bytes} B: must be positive")
        piece_bytes = -(-piece_bytes // ALIGN) * ALIGN   # O_DIRECT moves whole 4 KiB pages
    tier_kw = {"piece_bytes": piece_bytes, "index_every": index_every}
    work = Path(tempfile.mkdtemp(prefix="worldpager-bench-", dir=spill))
    try:
        direct = direct_io_works(work)
        if not direct:
            notes.append("O_DIRECT refused by this file system: both sides buffered, files fsync'ed "
                         "and dropped from the page cache (POSIX_FADV_DONTNEED) before each read")
        done = [one_round(work, block, count, direct, raw_method, r % 2 == 1, tier_kw, notes)
                for r in range(rounds)]
    finally:
        shutil.rmtree(work)
    return summarise(spill, done, block, count, direct, index_every, notes)


def summarise(spill: Path, done: list[Round], block: int, count: int, direct: bool, index_every: int,
              notes: list[str]) -> dict:
    nbytes = block * count
    notes = list(dict.fromkeys(notes))   # a fallback taken every round is said once
    if any(r.raw_read.nbytes != nbytes for r in done):
        notes.append(f"a raw read moved fewer than the {nbytes} B written")
    med = lambda pick: statistics.median(pick(r) for r in done)  # noqa: E731 - one figure over rounds
    raw_w, raw_r = med(lambda r: r.raw_write.seconds), med(lambda r: r.raw_read.seconds)
    tier_w, tier_r = med(lambda r: r.tier.write.seconds), med(lambda r: r.tier.read.seconds)
    gbps = lambda s: nbytes / s / 1e9  # noqa: E731 - one-line unit conversion
    io_mode = done[-1].tier.io_mode
    return {
        "spill": str(spill), "drive": drive_name(spill), "o_direct": direct and io_mode == "direct",
        "raw_method": done[-1].raw_method, "io_mode": io_mode, "total_bytes": nbytes,
        "block_bytes": block, "blocks": count, "piece_bytes": done[-1].tier.piece_bytes,
        "index_every": index_every, "rounds": len(done),
        "raw_write_s": raw_w, "raw_read_s": raw_r, "write_s": tier_w, "read_s": tier_r,
        "raw_write_gbps": gbps(raw_w), "raw_read_gbps": gbps(raw_r),
        "write_gbps": gbps(tier_w), "read_gbps": gbps(tier_r),
        "crc_gbps": med(lambda r: r.tier.crc_gbps),
        "write_vs_raw": raw_w / tier_w, "read_vs_raw": raw_r / tier_r,
        "write_vs_raw_rounds": [r.raw_write.seconds / r.tier.write.seconds for r in done],
        "read_vs_raw_rounds": [r.raw_read.seconds / r.tier.read.seconds for r in done],
        "notes": notes,
    }
