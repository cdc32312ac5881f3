"""The read-only base of a forked run: ``BaseTier`` reads another run's spill directory below a chunk
without a lock and without writing anything; ``KVStore(base_layers=...)`` serves those chunks and writes
its own to its own directory only."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from engine.config import model_config
from engine.errors import InputError
from engine.facts.kv_format import ChunkFormat
from engine.memory.disk import DiskTier
from engine.memory.disk_base import BaseTier
from engine.memory.host_pool import HostPool
from engine.memory.store import KVStore

CFG = model_config("tiny")
LAYOUT = CFG.kv_layout()
RAW = ChunkFormat.from_layout(LAYOUT, bits=16, raw_dtype="float32")   # exact on CPU float32 KV
SLOT = 64 * 1024


def chunk_kv(chunk: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(chunk)
    shape = (1, CFG.tokens_per_chunk, CFG.dit.num_heads, CFG.dit.head_dim)
    return [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(CFG.dit.num_layers)]


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def filled(directory: Path, chunks: int) -> HostPool:
    pool = HostPool(2, SLOT)
    with DiskTier(directory, SLOT, format_tag="t", direct=False) as tier:
        for c in range(chunks):
            pool.slot(0).fill_(c + 1)
            tier.write(c, pool.slot(0))
    return pool


def test_base_tier_reads_below_its_chunk_and_changes_nothing(tmp_path):
    pool = filled(tmp_path / "parent", 5)
    before = digest(tmp_path / "parent")
    with BaseTier(tmp_path / "parent", SLOT, before=3, format_tag="t") as base:
        assert base.chunks() == [0, 1, 2] and 3 not in base
        for c in range(3):
            base.read(c, pool.slot(1))
            assert bool((pool.slot(1) == c + 1).all())
        with pytest.raises(KeyError):
            base.read(3, pool.slot(1))
        with pytest.raises(AssertionError):
            base.write(7, pool.slot(1))
    assert digest(tmp_path / "parent") == before
    base.close()   # idempotent


def test_base_tier_takes_no_lock(tmp_path):
    filled(tmp_path / "parent", 2)
    with DiskTier(tmp_path / "parent", SLOT, format_tag="t", resume=True, direct=False) as owner, \
            BaseTier(tmp_path / "parent", SLOT, before=9, format_tag="t") as base:
        assert base.chunks() == owner.chunks() == [0, 1]


def test_base_tier_of_a_directory_without_chunks_is_a_one_line_error(tmp_path):
    with pytest.raises(InputError, match="holds no stored chunks"):
        BaseTier(tmp_path / "missing", SLOT, before=3)
    assert not (tmp_path / "missing").exists()


def test_store_reads_the_base_and_writes_only_its_own(tmp_path):
    with KVStore(LAYOUT, RAW, n_slots=2, spill_dir=tmp_path / "parent", k_slots=3) as parent:
        for c in range(6):
            parent.put(c, chunk_kv(c))
        assert parent.persist_through(6, 30)
    before = digest(tmp_path / "parent")
    with KVStore(LAYOUT, RAW, n_slots=2, spill_dir=tmp_path / "branch", k_slots=3,
                 base_layers=[(tmp_path / "parent", 4)]) as branch:
        got = branch.load_now([0, 2, 3])
        for c in (0, 2, 3):
            for (k, v), (k_ref, v_ref) in zip(got.kv[c], chunk_kv(c), strict=True):
                assert torch.equal(k, k_ref) and torch.equal(v, v_ref)
        assert branch.load_now([4]).misses == (4,)   # the parent's chunks from the fork on are not the branch's
        for c in range(4, 7):
            branch.put(c, chunk_kv(c + 100))
        assert branch.persist_through(7, 30)
        assert branch.disk.chunks() == [4, 5, 6]
        got = branch.load_now([4, 1])
        assert torch.equal(got.kv[4][0][0], chunk_kv(104)[0][0]) and torch.equal(got.kv[1][0][0], chunk_kv(1)[0][0])
    assert digest(tmp_path / "parent") == before
