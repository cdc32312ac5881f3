"""SessionMemory, the chunk loop's retrieval memory (DESIGN §2 steps 2–4 and 6, the store modes of §5).

Drives a real ``SessionMemory`` over a real ``AttentionContext`` and a real ``KVStore`` (kv_bits 16, so
values round-trip exactly) with a scripted retriever, writing each chunk's "clean KV" by hand (every
element of chunk c's keys/values is a known function of c and the layer) and committing per chunk the
way the session loop does. It checks:

* prefetch: EXACT hit / miss / stale counts, staged ids and slot contents on a script whose predicted
  set is sometimes right and sometimes wrong (including the first chunks, where nothing is
  retrievable), and that the memory tokens attention reads hold exactly the bytes of those chunks;
* on-demand and sync: every desired chunk is a hit; stall is reported only when something was loaded;
* device-only: the same memory contents as on-demand for the same script;
* window: nothing is retrieved, the memory region stays empty;
* a disk read that hangs: ``prepare`` still returns, counts a miss and a stale fallback, and the loop
  goes on while the read is still blocked; the store closes cleanly once it is released.
"""
from __future__ import annotations

import threading
import time

import pytest
import torch

from engine.config import model_config
from engine.memory.types import Tier
from engine.model.kv_context import AttentionContext
from engine.settings.overlay import resolve_session_config
from engine.session.memory import SessionMemory, context_slot_views

MICRO = model_config("micro")
LAYOUT = MICRO.kv_layout()
T = LAYOUT.tokens_per_chunk
KV_SHAPE = (1, T, LAYOUT.heads, LAYOUT.head_dim)   # [B, T, H, D], one chunk of one layer
K = 2
# micro: a 6-latent-frame window of 3-frame chunks, so the window holds chunk c-1 and chunk c may
# retrieve chunks 0 .. c-2 only; every script below respects that (the stub asserts it).
assert LAYOUT.window_chunks == 1

# Generous "does not hang" bound for calls that must never wait on a read (the machine may be loaded).
NO_HANG_S = 120.0   # a hung read blocks forever; a loaded machine still finishes far below this


def key_value(chunk: int, layer: int) -> float:
    return float(100 * layer + chunk)


def value_value(chunk: int, layer: int) -> float:
    return -float(100 * layer + chunk) - 0.5   # differs from the key so k/v swaps are caught


class ScriptedRetriever:
    """Returns scripted sets; asserts each one is legal (at most k ids, all among the candidates)."""

    def __init__(self, real: dict[int, list[int]], predicted: dict[int, list[int]] | None = None):
        self.real, self.predicted = real, predicted or {}
        self.calls: list[tuple[str, int]] = []

    def _scripted(self, kind: str, script: dict, chunk: int, candidates: list[int], k: int) -> list[int]:
        self.calls.append((kind, chunk))
        ids = list(script.get(chunk, []))
        assert len(ids) <= k and set(ids) <= set(candidates), (
            f"script error: {kind} for chunk {chunk} = {ids}, candidates {candidates}, k {k}")
        return ids

    def select(self, chunk: int, candidates: list[int], k: int, preferred=()) -> list[int]:
        return self._scripted("select", self.real, chunk, candidates, k)

    def predict_select(self, chunk: int, candidates: list[int], k: int, preferred=()) -> list[int]:
        return self._scripted("predict", self.predicted, chunk, candidates, k)

    def predict_staging(self, chunk: int, candidates: list[int], k: int, slots: int, preferred=(),
                        carried=()) -> list[int]:
        return list(dict.fromkeys([*self.predict_select(chunk, candidates, k), *carried]))[:slots]


def make_memory(store: str, retriever, tmp_path=None, *, pool_slots: int = 16, spill: bool = False,
                device_cache: int = 0) -> tuple[SessionMemory, AttentionContext]:
    """(The scripted counts below are of the k slots alone: no hedge slots, no device cache unless asked.)"""
    memory = {"store": store, "kv_bits": 16, "retrieve_k": K, "pool_slots": pool_slots, "hedge_slots": 0,
              "device_cache": device_cache}
    if spill:
        memory["spill"] = str(tmp_path / "spill")
    cfg = resolve_session_config(None, {"model": "micro", "device": "cpu", "memory": memory})
    # A memory region of k slots even in window mode, so that "stays empty" is an observation.
    ctx = AttentionContext(LAYOUT, memory_chunks=K)
    return SessionMemory(cfg, LAYOUT, ctx, retriever, torch.device("cpu"), torch.float32), ctx


def settle(mem: SessionMemory) -> None:
    """Wait until what was staged during the previous chunk has landed.

    ``prepare`` never waits (timeout 0), so on a loaded machine a slow worker thread would turn a
    scripted hit into a miss; waiting here keeps the counts deterministic. ``take_staged`` hands the
    same set to ``prepare``'s own call (a set is taken once), so this changes no outcome but timing.
    """
    mem.store.take_staged(timeout=30)


def denoise_and_store(mem: SessionMemory, ctx: AttentionContext, chunk: int) -> dict:
    """Steps 5–6 of the loop: the chunk's clean KV lands in the current region, is stored, commits."""
    for layer, state in enumerate(ctx.layers):
        state.self_kv.write_current(torch.full(KV_SHAPE, key_value(chunk, layer)),
                                    torch.full(KV_SHAPE, value_value(chunk, layer)))
    tiers = mem.store_chunk(chunk)
    ctx.commit()
    return tiers


def assert_attends(ctx: AttentionContext, memory: list[int]) -> None:
    """The memory tokens attention reads are exactly ``memory``'s chunks, in slot order, bit for bit."""
    for layer, state in enumerate(ctx.layers):
        kv = state.self_kv
        assert kv.memory_valid == len(memory) * T
        k, v = kv.context()                                  # what the DiT attends over
        k_mem, v_mem = k[:, :kv.memory_valid], v[:, :kv.memory_valid]
        want_k = torch.cat([torch.full(KV_SHAPE, key_value(c, layer)) for c in memory] or
                           [torch.empty(1, 0, *KV_SHAPE[2:])], dim=1)
        want_v = torch.cat([torch.full(KV_SHAPE, value_value(c, layer)) for c in memory] or
                           [torch.empty(1, 0, *KV_SHAPE[2:])], dim=1)
        assert torch.equal(k_mem, want_k), f"layer {layer}: memory keys are not chunks {memory}"
        assert torch.equal(v_mem, want_v), f"layer {layer}: memory values are not chunks {memory}"


def assert_slot_holds(ctx: AttentionContext, slot: int, chunk: int) -> None:
    for layer, (k, v) in enumerate(context_slot_views(ctx, slot)):
        assert torch.equal(k, torch.full(KV_SHAPE, key_value(chunk, layer)))
        assert torch.equal(v, torch.full(KV_SHAPE, value_value(chunk, layer)))


def call_within(seconds: float, fn, *args):
    """``fn(*args)`` on a helper thread; fails (instead of hanging the suite) if it takes longer."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn(*args)
        except BaseException as exc:   # handed back to the test thread below, never lost
            out["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)}{args} still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


# ---- prefetch: exact counts on a scripted sequence ----------------------------------------------

# chunk -> the set from the real pose, and the set predicted for that chunk during the chunk before.
REAL = {2: [0], 3: [1, 0], 4: [2, 0], 5: [3], 6: [3, 4], 7: [5, 3], 8: [6, 1], 9: [6, 7], 10: [8]}
PREDICTED = {2: [0], 3: [1], 4: [2], 5: [2, 1], 6: [3, 4], 7: [5, 0], 8: [2], 9: [6, 1], 10: [8]}

# chunk: (hits, misses, stale, staged during this chunk for the next, slot contents after prepare)
# Slots fill from the end of the region (contiguous valid range); a replaced slot is the one whose
# chunk id is smallest among those no longer desired (MemorySlots.plan).
PREFETCH_EXPECTED = {
    0: (0, 0, 0, [], [None, None]),    # nothing stored yet: nothing retrievable or predictable
    1: (0, 0, 0, [0], [None, None]),   # chunk 0 is in the window; staged for chunk 2
    2: (1, 0, 0, [1], [None, 0]),      # predicted right
    3: (2, 0, 0, [2], [1, 0]),         # 0 stays resident, 1 was staged
    4: (2, 0, 0, [1], [2, 0]),         # 2 staged replaces 1; of {2, 1} predicted, 2 is in a slot
    5: (0, 1, 1, [3, 4], [2, 0]),      # staged 1, wanted 3: miss; 0 and 2 stay (one counted stale)
    6: (2, 0, 0, [5, 0], [4, 3]),      # both staged right
    7: (2, 0, 0, [2], [5, 3]),         # 3 resident, 5 staged; staged 0 not wanted: no effect
    8: (0, 2, 2, [6, 1], [5, 3]),      # staged 2, wanted 6 and 1: two misses, both slots stale
    9: (1, 1, 1, [8, 7], [5, 6]),      # staged 6 and 1, wanted 6 and 7: half right; 7 is carried to 10
    10: (1, 0, 0, [], [8, 6]),         # 8 replaces 5; 6 is kept but nothing missed: not stale
}


def test_prefetch_counts_slots_and_attended_bytes_are_exact():
    retriever = ScriptedRetriever(REAL, PREDICTED)
    mem, ctx = make_memory("prefetch", retriever)
    try:
        totals = [0, 0, 0]
        for chunk, (hits, misses, stale, staged, slots) in PREFETCH_EXPECTED.items():
            settle(mem)
            record = mem.prepare(chunk)
            got = (record["hits"], record["misses"], record["stale"], record["staged"],
                   mem.slots.chunk_in)
            assert got == (hits, misses, stale, staged, slots), f"chunk {chunk}"
            assert record["memory"] == [c for c in slots if c is not None]
            for slot, c in enumerate(slots):
                if c is not None:
                    assert_slot_holds(ctx, slot, c)
            assert_attends(ctx, record["memory"])
            assert record["stall_ms"] == 0.0          # prefetch never waits for bytes
            totals = [t + n for t, n in zip(totals, (hits, misses, stale))]
            denoise_and_store(mem, ctx, chunk)
        assert totals == [11, 4, 4]
        # Every chunk selected once and predicted once for the next, in loop order.
        assert retriever.calls == [(kind, c + (kind == "predict"))
                                   for c in PREFETCH_EXPECTED for kind in ("select", "predict")]
        assert mem.store.errors() == []
    finally:
        mem.close()


def run_scripted(mem: SessionMemory, ctx: AttentionContext, chunks: int) -> list[dict]:
    records = []
    for chunk in range(chunks):
        settle(mem)
        records.append(mem.prepare(chunk))
        denoise_and_store(mem, ctx, chunk)
    return records


def test_a_missed_chunk_is_staged_for_the_next_chunk_and_taken_there():
    """A late (or mispredicted) chunk still wanted is carried into the next staged set, not lost."""
    real, predicted = {2: [0], 3: [1], 4: [1]}, {2: [0], 3: [0], 4: [0]}
    mem, ctx = make_memory("prefetch", ScriptedRetriever(real, predicted))
    try:
        records = run_scripted(mem, ctx, 5)
        assert (records[3]["misses"], records[3]["staged"]) == (1, [1])   # 1 missed at 3, staged for 4
        assert (records[4]["hits"], records[4]["misses"]) == (1, 0) and 1 in mem.slots.resident()
        assert_attends(ctx, [c for c in mem.slots.chunk_in if c is not None])
    finally:
        mem.close()


def test_the_device_cache_serves_a_view_that_left_the_slots():
    """Chunk 0 left the slots at chunk 5; at 6 it is wanted again and nobody predicted it: the device
    cache has it (a hit, counted as a cache hit), the same bytes as the store's."""
    real = {2: [0], 3: [1, 0], 4: [2, 1], 5: [3, 2], 6: [0]}
    predicted = {**real, 6: []}
    outcomes = {}
    for cache in (0, 4):
        mem, ctx = make_memory("prefetch", ScriptedRetriever(real, predicted), device_cache=cache)
        try:
            records = run_scripted(mem, ctx, 7)
            outcomes[cache] = (records[6]["hits"], records[6]["misses"], records[6].get("cache_hits", 0))
            if cache:
                slot = mem.slots.chunk_in.index(0)
                assert_slot_holds(ctx, slot, 0)
                assert mem.state_facts()["cache"][-1] == 0          # the newest use last
        finally:
            mem.close()
    assert outcomes == {0: (0, 1, 0), 4: (1, 0, 1)}


# ---- on-demand, sync, device-only ---------------------------------------------------------------

# The prefetch script's real sets plus a chunk whose whole set is already resident (no load at all).
ON_DEMAND_REAL = {**REAL, 11: [8, 7]}


def run_synchronous(mode: str) -> list[tuple[dict, list[int | None], list[torch.Tensor]]]:
    """Run ON_DEMAND_REAL through ``mode``; per chunk (record, slots, attended memory K/V)."""
    mem, ctx = make_memory(mode, ScriptedRetriever(ON_DEMAND_REAL))
    out = []
    try:
        for chunk in range(12):
            record = mem.prepare(chunk)
            assert_attends(ctx, record["memory"])
            attended = [t[:, :s.self_kv.memory_valid].clone()
                        for s in ctx.layers for t in s.self_kv.context()]
            out.append((record, list(mem.slots.chunk_in), attended))
            denoise_and_store(mem, ctx, chunk)
    finally:
        mem.close()
    return out


@pytest.mark.parametrize("mode", ["on-demand", "sync"])
def test_synchronous_modes_hit_every_desired_chunk(mode):
    resident: list[int] = []
    nothing_to_load = 0
    for chunk, (record, _, _) in enumerate(run_synchronous(mode)):
        desired = ON_DEMAND_REAL.get(chunk, [])
        assert (record["hits"], record["misses"], record["stale"]) == (len(desired), 0, 0), chunk
        assert set(desired) <= set(record["memory"]), chunk
        # sync copies the whole set every chunk; on-demand only what is not in a slot yet.
        loaded = desired if mode == "sync" else [c for c in desired if c not in resident]
        assert (record["stall_ms"] > 0) == bool(loaded), (chunk, loaded, record["stall_ms"])
        assert record["staged"] == []          # nothing is staged ahead in the synchronous modes
        nothing_to_load += bool(desired) and not loaded
        resident = record["memory"]
    # The script must exercise "a set, all in slots already" (chunk 11) for on-demand to mean much.
    assert nothing_to_load == (1 if mode == "on-demand" else 0)


def test_device_only_has_the_same_memory_as_on_demand():
    on_demand, device_only = run_synchronous("on-demand"), run_synchronous("device-only")
    for chunk, ((rec_a, slots_a, kv_a), (rec_b, slots_b, kv_b)) in enumerate(zip(on_demand, device_only)):
        assert slots_a == slots_b and rec_a["memory"] == rec_b["memory"], chunk
        assert (rec_a["hits"], rec_a["misses"]) == (rec_b["hits"], rec_b["misses"]), chunk
        assert all(torch.equal(a, b) for a, b in zip(kv_a, kv_b, strict=True)), chunk
        assert rec_b["stall_ms"] == 0.0        # everything is resident: nothing to wait for


def test_window_mode_retrieves_nothing():
    retriever = ScriptedRetriever(REAL, PREDICTED)
    mem, ctx = make_memory("window", retriever)
    try:
        for chunk in range(8):
            record = mem.prepare(chunk)
            assert (record["hits"], record["misses"], record["stale"], record["memory"]) == (0, 0, 0, [])
            for state in ctx.layers:
                kv = state.self_kv
                assert kv.memory_valid == 0
                # The region exists (k slots) but nothing was ever copied into it.
                assert not kv.k[:, :kv.layout.memory_tokens].any()
                assert not kv.v[:, :kv.layout.memory_tokens].any()
            assert denoise_and_store(mem, ctx, chunk) == {}     # nothing is kept
        assert retriever.calls == []           # no retrieval policy runs at all
    finally:
        mem.close()


# ---- a hung disk read -----------------------------------------------------------------------------

def test_a_hung_disk_read_costs_a_miss_not_a_stall(tmp_path):
    # A tiny pool (4 slots) and a disk tier: chunk 0 is written back and evicted by the time
    # 7 chunks are stored, so staging it means a disk read, which is made to hang.
    real = {4: [2], 7: [0], 8: [6]}
    predicted = {4: [2], 7: [0], 8: [6]}
    retriever = ScriptedRetriever(real, predicted)
    mem, ctx = make_memory("prefetch", retriever, tmp_path, pool_slots=4, spill=True)
    release, entered = threading.Event(), threading.Event()
    real_read = mem.store.disk.read

    def hung_read(*args, **kw):
        entered.set()
        release.wait()           # blocked until the test lets go, however long the check takes
        return real_read(*args, **kw)

    try:
        for chunk in range(6):
            settle(mem)
            record = mem.prepare(chunk)
            denoise_and_store(mem, ctx, chunk)
        assert record["memory"] == [2]                 # chunk 2 sits in a slot since chunk 4
        deadline = time.monotonic() + NO_HANG_S
        while mem.store.manager.lookup(0) is not Tier.DISK:
            assert time.monotonic() < deadline, "chunk 0 never left the host pool"
            time.sleep(0.01)

        mem.store.disk.read = hung_read
        settle(mem)
        record = call_within(NO_HANG_S, mem.prepare, 6)          # stages chunk 0 for chunk 7
        assert record["staged"] == [0]
        assert entered.wait(NO_HANG_S), "the disk read of chunk 0 never started"
        denoise_and_store(mem, ctx, 6)

        # Chunk 7 wants chunk 0, whose read is still blocked: a miss, chunk 2 stays (stale fallback).
        record = call_within(NO_HANG_S, mem.prepare, 7)
        assert not release.is_set()
        assert (record["hits"], record["misses"], record["stale"]) == (0, 1, 1)
        assert record["memory"] == [2] and record["stall_ms"] == 0.0
        assert_attends(ctx, [2])
        call_within(4 * NO_HANG_S, denoise_and_store, mem, ctx, 7)   # put may wait on write-back

        # The loop goes on while the read is still stuck: chunk 8's set was staged from the host
        # (it takes the free slot; chunk 2 stays beside it, no longer desired but nothing missed).
        settle(mem)
        record = call_within(NO_HANG_S, mem.prepare, 8)
        assert (record["hits"], record["misses"], record["stale"]) == (1, 0, 0)
        assert record["memory"] == [6, 2]
        assert_attends(ctx, [6, 2])
        assert not release.is_set() and entered.is_set()
    finally:
        release.set()
        call_within(4 * NO_HANG_S, mem.close)
    assert mem.store.errors() == []                    # the late read landed without an error
