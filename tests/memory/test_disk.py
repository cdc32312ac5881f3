"""The disk tier: bit-exact round trips, crc detection, full disk, lock, mode, atomic index, resume,
buffered fallback and paced reads."""
from __future__ import annotations

import errno
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from engine.errors import ConfigError
from engine.memory import disk as disk_mod
from engine.memory.disk import DATA_NAME, INDEX_NAME, DiskTier
from engine.memory.host_pool import HostPool
from engine.memory.transfer import TokenBucket
from engine.memory.types import CorruptBlockError, DiskFullError, SpillLockedError

SLOT = 4096
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def block_bytes(chunk: int, n: int = SLOT) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(chunk).integers(0, 256, n, dtype=np.uint8))


@pytest.fixture
def pool():
    p = HostPool(2, 16 * SLOT)
    yield p
    p.close()


def write(tier: DiskTier, pool: HostPool, chunk: int, n: int = SLOT) -> None:
    buf = pool.slot(0)[:n]
    buf.copy_(block_bytes(chunk, n))
    tier.write(chunk, buf)


def read(tier: DiskTier, pool: HostPool, chunk: int, n: int = SLOT) -> torch.Tensor:
    buf = pool.slot(1)[:n]
    tier.read(chunk, buf)
    return buf


def test_thousands_of_blocks_round_trip_bit_for_bit(tmp_path, pool):
    with DiskTier(tmp_path / "spill", SLOT, index_every=0, extent_bytes=1 << 20) as tier:
        assert tier.io_mode == "direct"
        for c in range(3000):
            write(tier, pool, c)
        assert tier.blocks == 3000 and tier.bytes_written == 3000 * SLOT
        for c in reversed(range(3000)):
            assert torch.equal(read(tier, pool, c), block_bytes(c)), c
        assert tier.bytes_read == 3000 * SLOT


def test_large_blocks_in_pieces_round_trip(tmp_path, pool):
    n = 16 * SLOT
    with DiskTier(tmp_path, n, piece_bytes=3 * SLOT) as tier:
        for c in range(20):
            write(tier, pool, c, n)
        for c in range(20):
            assert torch.equal(read(tier, pool, c, n), block_bytes(c, n))


def test_corrupted_block_is_a_failed_read(tmp_path, pool):
    with DiskTier(tmp_path, SLOT) as tier:
        for c in range(3):
            write(tier, pool, c)
        offset = tier._index[1]["offset"]
        with open(tmp_path / DATA_NAME, "r+b") as f:
            f.seek(offset + 100)
            byte = f.read(1)
            f.seek(offset + 100)
            f.write(bytes([byte[0] ^ 0x40]))
            f.flush()
            os.fsync(f.fileno())
        with pytest.raises(CorruptBlockError, match="chunk 1.*crc32"):
            read(tier, pool, 1)
        assert torch.equal(read(tier, pool, 0), block_bytes(0))
        assert torch.equal(read(tier, pool, 2), block_bytes(2))


def test_full_disk_is_one_line_and_earlier_blocks_stay_readable(tmp_path, pool):
    with DiskTier(tmp_path / "spill", SLOT, max_bytes=3 * SLOT, extent_bytes=2 * SLOT) as tier:
        for c in range(3):
            write(tier, pool, c)
        for _ in range(2):
            with pytest.raises(DiskFullError) as info:
                write(tier, pool, 3)
            msg = str(info.value)
            assert "\n" not in msg and str(tmp_path / "spill") in msg and "full" in msg
        assert tier.blocks == 3
        for c in range(3):
            assert torch.equal(read(tier, pool, c), block_bytes(c))


def test_enospc_from_the_file_system_is_a_disk_full_error(tmp_path, pool, monkeypatch):
    real = os.pwritev
    with DiskTier(tmp_path, SLOT) as tier:
        write(tier, pool, 0)

        def no_space(fd, buffers, offset):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "pwritev", no_space)
        with pytest.raises(DiskFullError, match=str(tmp_path)):
            write(tier, pool, 1)
        monkeypatch.setattr(os, "pwritev", real)
        assert torch.equal(read(tier, pool, 0), block_bytes(0))
        write(tier, pool, 2)                          # the failed block's space is reused
        assert tier._index[2]["offset"] == SLOT


def test_lock_keeps_a_second_session_out(tmp_path):
    first = DiskTier(tmp_path / "spill", SLOT)
    with pytest.raises(SpillLockedError) as info:
        DiskTier(tmp_path / "spill", SLOT)
    assert "\n" not in str(info.value) and str(tmp_path / "spill") in str(info.value)
    first.close()
    DiskTier(tmp_path / "spill", SLOT).close()        # released on close


def test_directory_is_created_private(tmp_path):
    target = tmp_path / "a" / "spill"
    old = os.umask(0o022)
    try:
        DiskTier(target, SLOT).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


def test_index_is_replaced_atomically(tmp_path, pool, monkeypatch):
    with DiskTier(tmp_path, SLOT, format_tag="int4", index_every=0) as tier:
        write(tier, pool, 0)
        tier.flush_index()
        write(tier, pool, 1)

        def crash(src, dst):
            raise OSError(errno.EIO, "crash during rename")
        monkeypatch.setattr(os, "replace", crash)
        with pytest.raises(OSError):
            tier.flush_index()
        doc = json.loads((tmp_path / INDEX_NAME).read_text())   # still the old, whole index
        assert list(doc["blocks"]) == ["0"] and doc["format"] == "int4"
        monkeypatch.undo()
    doc = json.loads((tmp_path / INDEX_NAME).read_text())
    assert sorted(doc["blocks"]) == ["0", "1"]
    assert set(doc["blocks"]["1"]) == {"offset", "length", "crc", "format"}


def test_resume_after_a_crash_finds_the_indexed_blocks(tmp_path, pool):
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {REPO!r})
        import numpy as np, torch
        from engine.memory.disk import DiskTier
        from engine.memory.host_pool import HostPool
        pool = HostPool(1, {SLOT})
        tier = DiskTier({str(tmp_path)!r}, {SLOT}, format_tag="int4", index_every=4)
        for c in range(10):   # indexed after 4 and 8; 8 and 9 are lost with the crash
            pool.slot(0).copy_(torch.from_numpy(
                np.random.default_rng(c).integers(0, 256, {SLOT}, dtype=np.uint8)))
            tier.write(c, pool.slot(0))
        os._exit(0)           # no close(): a crash
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    assert not (tmp_path / (INDEX_NAME + ".tmp")).exists()
    with DiskTier(tmp_path, SLOT, format_tag="int4", resume=True) as tier:
        assert tier.chunks() == list(range(8))
        for c in range(8):
            assert torch.equal(read(tier, pool, c), block_bytes(c))
        write(tier, pool, 8)                          # appends after the resumed blocks
        assert tier._index[8]["offset"] == 8 * SLOT
    with pytest.raises(ConfigError, match="cannot resume"):
        DiskTier(tmp_path, 2 * SLOT, format_tag="int4", resume=True)


def test_o_direct_refused_at_open_warns_once_and_buffers(tmp_path, pool, monkeypatch, caplog):
    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)
    monkeypatch.setattr(disk_mod.os, "open", no_direct)
    with caplog.at_level(logging.WARNING, "worldpager.memory"):
        with DiskTier(tmp_path, SLOT) as tier:
            assert tier.io_mode == "buffered"
            for c in range(5):
                write(tier, pool, c)
            assert torch.equal(read(tier, pool, 3), block_bytes(3))
    warnings = [r for r in caplog.records if "O_DIRECT" in r.getMessage()]
    assert len(warnings) == 1 and str(tmp_path) in warnings[0].getMessage()


def test_o_direct_refused_at_first_io_falls_back_once(tmp_path, pool, monkeypatch, caplog):
    real = os.pwritev
    calls = []

    def einval_once(fd, buffers, offset):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, buffers, offset)
    monkeypatch.setattr(os, "pwritev", einval_once)
    with caplog.at_level(logging.WARNING, "worldpager.memory"):
        with DiskTier(tmp_path, SLOT) as tier:
            for c in range(4):
                write(tier, pool, c)
            assert tier.io_mode == "buffered"
            assert torch.equal(read(tier, pool, 0), block_bytes(0))
    assert sum("O_DIRECT" in r.getMessage() for r in caplog.records) == 1


def test_reads_are_paced_by_the_bucket(tmp_path, pool):
    """A 64 KiB block read in 4 KiB pieces at 16 KiB/s takes (64 − 4 burst) / 16 s of bucket time."""
    n = 16 * SLOT
    now = [0.0]
    bucket = TokenBucket(rate=4 * SLOT, burst=SLOT, clock=lambda: now[0],
                         sleep=lambda s: now.__setitem__(0, now[0] + s))
    with DiskTier(tmp_path, n, piece_bytes=SLOT) as tier:
        write(tier, pool, 0, n)
        buf = pool.slot(1)
        tier.read(0, buf, pace=bucket.acquire)
    assert now[0] == pytest.approx((n - SLOT) / (4 * SLOT))
