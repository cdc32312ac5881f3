"""The KVStore facade on the tiny model: round trips through every tier, misses never wait, failures
are reported, memory stays flat, the pool keeps to its budget, close/resume."""
from __future__ import annotations

import gc
import threading
import time

import psutil
import pytest
import torch

from engine.config import model_config
from engine.memory.host_pool import DEFAULT_MARGIN, process_baseline_bytes
from engine.facts.kv_format import ChunkFormat
from engine.memory.store import KVStore
from engine.memory.transfer import TokenBucket
from engine.memory.types import CapacityError, CorruptBlockError, SpillLockedError, Tier
from engine.model.kv_context import AttentionContext
from engine.session.memory import context_slot_views

CFG = model_config("tiny")
LAYOUT = CFG.kv_layout()
MiB = 1 << 20
RAW = ChunkFormat.from_layout(LAYOUT, bits=16, raw_dtype="float32")   # exact on CPU float32 KV
INT4 = ChunkFormat.from_layout(LAYOUT, bits=4)


def chunk_kv(chunk: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic per-chunk KV, per layer (k, v) [1, T, H, D]."""
    g = torch.Generator().manual_seed(chunk)
    shape = (1, CFG.tokens_per_chunk, CFG.dit.num_heads, CFG.dit.head_dim)
    return [(torch.randn(shape, generator=g), torch.randn(shape, generator=g) * 3)
            for _ in range(CFG.dit.num_layers)]


def assert_exact(staged, chunk):
    for (k, v), (k_ref, v_ref) in zip(staged.kv[chunk], chunk_kv(chunk), strict=True):
        assert torch.equal(k, k_ref) and torch.equal(v, v_ref)


def int4_bound(x: torch.Tensor, groups_dim: int) -> torch.Tensor:
    """Half a quantisation step of x's group + fp16 metadata rounding, per element."""
    rows = x[0].reshape(x.shape[1], -1)                          # [T, C]
    if groups_dim == 0:                                          # keys: per channel over tokens
        mn, mx = rows.amin(0, keepdim=True).expand_as(rows), rows.amax(0, keepdim=True).expand_as(rows)
    else:                                                        # values: per token, 64 channels
        g = rows.reshape(rows.shape[0], -1, INT4.value_group)
        mn = g.amin(-1, keepdim=True).expand_as(g).reshape_as(rows)
        mx = g.amax(-1, keepdim=True).expand_as(g).reshape_as(rows)
    step = (mx - mn) / 15
    return (step / 2 + 16 * 2 ** -11 * (mx - mn) + 2 ** -11 * mn.abs() + 1e-6).reshape_as(x)


def put_all(store: KVStore, chunks) -> None:
    for c in chunks:
        store.put(c, chunk_kv(c))


def wait_until(predicate, timeout=300.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.fixture
def spill(tmp_path):
    return tmp_path / "spill"


def test_raw_round_trip_is_exact_from_host_and_disk(spill):
    with KVStore(LAYOUT, RAW, n_slots=6, spill_dir=spill) as store:
        put_all(store, range(12))
        tiers = {c: store.manager.lookup(c) for c in (0, 5, 11)}
        assert tiers == {0: Tier.DISK, 5: Tier.DISK, 11: Tier.HOST}
        store.stage([0, 5, 11])
        staged = store.take_staged(timeout=30)
        assert staged.hits == (0, 5, 11) and staged.misses == () and staged.failed == ()
        for c in staged.hits:
            assert_exact(staged, c)
        counters = store.counters()
        assert counters["disk_read_bytes"] == 2 * RAW.slot_bytes and counters["hits"] == 3
        assert counters["pool_used_slots"] <= counters["pool_slots"] == 6
        assert store.errors() == []


def test_int4_round_trip_within_the_stated_bound(spill):
    with KVStore(LAYOUT, INT4, n_slots=4, spill_dir=spill) as store:
        put_all(store, range(6))
        assert store.manager.lookup(0) is Tier.DISK
        staged = store.load_now([0, 5])
        assert staged.hits == (0, 5)
        for c in (0, 5):
            for (k, v), (k_ref, v_ref) in zip(staged.kv[c], chunk_kv(c)):
                assert ((k - k_ref).abs() <= int4_bound(k_ref, 0)).all()
                assert ((v - v_ref).abs() <= int4_bound(v_ref, 1)).all()


def test_copy_into_the_attention_context(spill):
    ctx = AttentionContext(LAYOUT, memory_chunks=3)
    with KVStore(LAYOUT, RAW, n_slots=8, spill_dir=spill) as store:
        put_all(store, range(3))
        staged = store.load_now([2, 0])
        assert staged.copy_into({2: context_slot_views(ctx, 0), 0: context_slot_views(ctx, 1)}) \
            == [2, 0]
    k0, v0 = ctx.layers[1].self_kv.memory_slot(CFG.tokens_per_chunk, CFG.tokens_per_chunk)
    assert torch.equal(k0, chunk_kv(0)[1][0]) and torch.equal(v0, chunk_kv(0)[1][1])


def test_unknown_chunk_is_a_failed_miss_and_second_take_is_the_same_set(spill):
    with KVStore(LAYOUT, RAW, n_slots=8, spill_dir=spill) as store:
        put_all(store, [0])
        store.stage([0, 42])
        first = store.take_staged(timeout=30)
        assert first.hits == (0,) and first.misses == (42,) and first.failed == (42,)
        assert store.take_staged() is first
        assert store.counters()["misses"] == 1


def test_a_hung_read_does_not_block_take_staged(spill):
    release = threading.Event()
    with KVStore(LAYOUT, RAW, n_slots=6, spill_dir=spill) as store:
        put_all(store, range(10))
        assert store.manager.lookup(0) is Tier.DISK
        real_read = store.disk.read

        def hung_read(*args, **kw):
            release.wait(30)
            return real_read(*args, **kw)
        store.disk.read = hung_read
        store.stage([9, 0])
        wait_until(lambda: store._staging.pending == 1)           # chunk 9 (host) is ready
        t0 = time.monotonic()
        staged = store.take_staged(timeout=0)
        assert time.monotonic() - t0 < 2.0                       # returned, did not wait on 0
        assert staged.hits == (9,) and staged.misses == (0,) and staged.failed == ()
        assert_exact(staged, 9)
        release.set()                                            # the read lands late ...
        wait_until(lambda: store.manager.lookup(0) is Tier.HOST)
        wait_until(lambda: store.counters()["late"] == 1)
        store.disk.read = real_read
        again = store.load_now([0])                              # ... and is a host hit now
        assert again.hits == (0,) and store.counters()["disk_read_bytes"] == RAW.slot_bytes
        assert_exact(again, 0)


def test_corrupt_block_is_reported_as_a_failed_miss(spill):
    with KVStore(LAYOUT, RAW, n_slots=6, spill_dir=spill) as store:
        put_all(store, range(10))
        store.disk.flush_index()
        offset = store.disk._index[1]["offset"]
        with open(spill / "blocks.dat", "r+b") as f:
            f.seek(offset + 12345)
            f.write(b"\xff\x00\xff")
        staged = store.load_now([1, 2])
        assert staged.hits == (2,) and staged.misses == (1,) and staged.failed == (1,)
        assert store.manager.lookup(1) is Tier.DISK           # the slot went back, data did not
        [error] = store.errors()
        assert isinstance(error.error, CorruptBlockError) and error.chunk == 1
        assert store.counters()["failed_reads"] == store.counters()["corrupt_blocks"] == 1


def test_a_failed_put_rolls_back_its_slot(spill):
    with KVStore(LAYOUT, RAW, n_slots=4, spill_dir=spill) as store:
        put_all(store, [0])
        wrong = [(k.to(torch.bfloat16), v.to(torch.bfloat16)) for k, v in chunk_kv(1)]
        with pytest.raises(AssertionError, match="not exact"):   # raw float32 format, bf16 KV
            store.put(1, wrong)
        assert store.manager.lookup(1) is None and store.counters()["store_rollbacks"] == 1
        assert store.counters()["pool_free_slots"] == 3
        put_all(store, [1])
        assert_exact(store.load_now([1]), 1)


def test_dram_only_stops_with_a_capacity_error():
    with KVStore(LAYOUT, RAW, n_slots=3) as store:
        put_all(store, range(3))
        with pytest.raises(CapacityError, match="dram-only") as info:
            store.put(3, chunk_kv(3))
        assert "\n" not in str(info.value)
        assert store.load_now([0, 2]).hits == (0, 2)          # what is stored stays readable


def test_full_disk_reported_and_earlier_blocks_readable(spill):
    cap = {"max_bytes": 3 * RAW.slot_bytes, "extent_bytes": RAW.slot_bytes}
    with KVStore(LAYOUT, RAW, n_slots=5, spill_dir=spill, disk_options=cap, put_timeout_s=10) as store:
        with pytest.raises(CapacityError, match="full") as info:
            put_all(store, range(20))
        assert str(spill) in str(info.value) and "\n" not in str(info.value)
        counters = store.counters()
        assert counters["disk_failed"] and counters["disk_blocks"] == 3 and counters["errors"] >= 1
        on_disk = store.disk.chunks()
        assert store.load_now([c for c in store.manager.host_chunks()][:3]).misses == ()
    # the pool is full of dirty blocks, so the session ends; the blocks already on disk are intact
    with KVStore(LAYOUT, RAW, n_slots=5, spill_dir=spill, resume=True) as store:
        staged = store.load_now(on_disk)
        assert staged.hits == tuple(on_disk)
        for c in staged.hits:
            assert_exact(staged, c)


def test_second_store_on_the_same_spill_is_refused(spill):
    with KVStore(LAYOUT, RAW, n_slots=4, spill_dir=spill):
        with pytest.raises(SpillLockedError, match=str(spill)):
            KVStore(LAYOUT, RAW, n_slots=4, spill_dir=spill)


def test_close_persists_and_a_new_store_resumes(spill):
    with KVStore(LAYOUT, RAW, n_slots=6, spill_dir=spill) as store:
        put_all(store, range(8))
        store.close(persist_all=True)
        assert store.counters()["disk_blocks"] == 8
    with KVStore(LAYOUT, RAW, n_slots=6, spill_dir=spill, resume=True) as store:
        assert all(store.manager.lookup(c) is Tier.DISK for c in range(8))
        staged = store.load_now([7, 0, 3])
        assert staged.hits == (7, 0, 3)
        for c in staged.hits:
            assert_exact(staged, c)


def test_pool_is_sized_from_the_host_budget_and_kept_to_it(spill):
    baseline = process_baseline_bytes()
    host_bytes = baseline + DEFAULT_MARGIN + 12 * RAW.slot_bytes
    with KVStore(LAYOUT, RAW, host_bytes=host_bytes, spill_dir=spill) as store:
        assert store.pool.nbytes <= host_bytes - baseline - DEFAULT_MARGIN + 2 * RAW.slot_bytes
        ptr = store.pool.data.data_ptr()
        for c in range(3 * store.pool.n_slots):
            store.put(c, chunk_kv(c))
            counters = store.counters()
            assert counters["pool_used_bytes"] <= counters["pool_bytes"] == store.pool.nbytes
        assert store.pool.data.data_ptr() == ptr


def test_reads_are_capped_by_the_drive_bucket(spill):
    """Injected clock: two disk reads of one slot each at rate R take (2 slots − burst) / R."""
    with KVStore(LAYOUT, RAW, n_slots=6, spill_dir=spill, drive_bw="r=0.001") as store:
        assert store.throttle.read_bucket.rate == 1e6 and store.throttle.write_bucket is None
        now = [0.0]
        store.throttle.read_bucket = TokenBucket(1e6, burst=4096, clock=lambda: now[0],
                                                 sleep=lambda s: now.__setitem__(0, now[0] + s))
        put_all(store, range(10))
        assert store.load_now([0, 1]).hits == (0, 1)
    assert now[0] == pytest.approx((2 * RAW.slot_bytes - 4096) / 1e6)


def test_rss_stays_flat_while_ten_pools_are_written_through(spill):
    """After a warm-up, writing 10x the pool's capacity through the store grows RSS < 16 MiB."""
    n_slots = 8
    kv = chunk_kv(0)
    proc = psutil.Process()
    with KVStore(LAYOUT, RAW, n_slots=n_slots, spill_dir=spill) as store:
        def run(chunks):
            for c in chunks:
                kv[0][0][0, 0, 0, 0] = float(c)
                store.put(c, kv)
                store.stage([c - 5, c - 3, c - 1] if c >= 5 else [])
                store.take_staged(timeout=10)
        run(range(2 * n_slots))                                  # warm-up: every code path once
        gc.collect()
        rss0 = proc.memory_info().rss
        run(range(2 * n_slots, 12 * n_slots))
        gc.collect()
        grown = proc.memory_info().rss - rss0
        counters = store.counters()
    assert counters["puts"] == 12 * n_slots and counters["disk_blocks"] >= 10 * n_slots - 8
    assert counters["hits"] > 0 and counters["errors"] == 0
    assert grown < 16 * MiB, f"RSS grew {grown / MiB:.1f} MiB"


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", [ChunkFormat.from_layout(LAYOUT, bits=16), INT4], ids=["bf16", "int4"])
def test_cuda_round_trip_through_pinned_pool_and_disk(spill, fmt):
    dev = torch.device("cuda")
    with KVStore(LAYOUT, fmt, n_slots=6, spill_dir=spill, device=dev) as store:
        assert store.pool.pinned
        for c in range(10):
            kv = [(k.to(dev, torch.bfloat16), v.to(dev, torch.bfloat16)) for k, v in chunk_kv(c)]
            store.put(c, kv)
            for k, v in kv:                                      # the caller overwrites at once
                k.fill_(float("nan"))
                v.fill_(float("nan"))
        store.stage([0, 9])
        staged = store.take_staged(timeout=30)
        assert staged.hits == (0, 9)
        for c in (0, 9):
            for (k, v), (k_ref, v_ref) in zip(staged.kv[c], chunk_kv(c)):
                k_ref, v_ref = k_ref.to(torch.bfloat16).float(), v_ref.to(torch.bfloat16).float()
                if fmt.quantized:
                    assert ((k.float().cpu() - k_ref).abs() <= int4_bound(k_ref, 0) * 1.05).all()
                    assert ((v.float().cpu() - v_ref).abs() <= int4_bound(v_ref, 1) * 1.05).all()
                else:
                    assert torch.equal(k.float().cpu(), k_ref) and torch.equal(v.float().cpu(), v_ref)


@pytest.mark.parametrize("through", [False, True])
def test_write_through_writes_every_chunk_at_once_write_back_only_under_pressure(spill, through):
    with KVStore(LAYOUT, RAW, n_slots=16, spill_dir=spill, write_through=through) as store:
        put_all(store, range(4))                           # 12 slots free: no pressure on the pool
        if through:
            wait_until(lambda: store.manager.disk_chunks() == {0, 1, 2, 3})
            assert store.counters()["pool_clean_slots"] == 4   # evicting them costs nothing
        else:
            assert store.manager.disk_chunks() == set() and store.counters()["disk_write_bytes"] == 0
        assert store.persist_through(4, timeout=300)
        assert store.manager.disk_chunks() == {0, 1, 2, 3}
