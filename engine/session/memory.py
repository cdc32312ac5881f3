"""The retrieval memory as the chunk loop sees it: select, take staged, prefetch, store.

Owns the per-chunk memory steps of DESIGN §2 and the store modes of §5; the session calls
``prepare(c)`` before chunk c's denoise (steps 2–4) and ``store_chunk(c)`` after its clean pass (step 6).
It is the glue between the components — the tiered store (``engine.memory``), the retriever
(``engine.retrieval``), the attention context and the model's re-rotation (``engine.session.positions``) — so
it sits on the session's side: the components know nothing of one another. Shapes come from the model's
``KVLayout``; no model is named here.

* ``prefetch`` (WorldPager): select c's set from c's real pose; take what was staged during c−1 (from
  the extrapolated pose, and the hedges: stop, turn, walk ahead) or is still in the device cache, without
  waiting; a miss keeps the slot's previous chunk (stale-set fallback); then stage, in the background,
  what c missed and is still a candidate (a late prefetch is taken next chunk, not lost; a read that
  failed — a corrupt block — is not carried: it would fail again), then c+1's
  predicted and hedged sets (``Retriever.predict_staging``), up to the staging slots.
  The device cache (``memory.device_cache`` chunks, ``engine.memory.budget.staging_of``) keeps the chunks
  loaded most recently, as the store handed them (dequantised; keys as stored), so that a view retrieved
  a minute ago is at hand when the walk comes back to it; its chunk ids go into save points and a resume
  reloads them, so a resumed run selects as the uninterrupted one. Selection favours what is at hand
  (slots, staged, cache: ``memory.stick``). With ``late_prefetch: wait`` a set still loading is
  waited for instead (a stall), so the frames do not depend on the machine's speed (reproducible runs).
* ``on-demand``: select from the real pose; chunks not already in a slot are loaded synchronously.
* ``sync``: every chunk of the set is loaded synchronously every chunk (no reuse of slots).
* ``dram-only``: ``prefetch`` without a disk tier; stops with a capacity error when the pool is full.
* ``device-only``: every retrievable chunk stays in device memory (bf16 / model dtype), no quantisation.
* ``window``: no retrieval memory at all.

With ``--spill-max`` (a tiered store with a spill directory) ``engine.session.quota`` decides drops after
each store; dropped chunks are holes: never candidates, so never selected, never loaded.

Stall = the time this object made the loop wait on memory: for bytes that were not there yet (a
synchronous load) or for a pool slot that write-back had not freed yet (``put_wait_ms``, when the drive
writes slower than chunks are produced). The cost of copying available chunks into the context is
reported separately (``memory_copy_ms``).

Keys (``memory.keys``): ``post-rope`` stores a chunk's keys as the model attended them (rotated at the
chunk's own positions) and copies them into a slot as they are; ``pre-rope`` stores them before the
rotation (``AttentionContext.stored_kv``) and rotates them as they are copied into a slot, at the
position the position mode chooses then (the chunk's own; past the horizon with ``rerotate`` the
re-placed one, ``Rerotation.entry_position``), with the model's ``place_keys``. The sink and the local
window hold rotated keys either way: both stay resident at full precision and are never re-placed on
entry (a sink that must move is rotated by the difference, like any resident slot). The convention is
part of the spill's format: a save point records it and a resume whose setting differs is refused.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Callable

import psutil
import torch

from engine.config import SessionConfig
from engine.errors import ConfigError, InputError
from engine.facts.kv_format import ChunkFormat
from engine.facts.layout import KVLayout
from engine.memory.quota import QuotaPlan, format_tag, parse_spill_max
from engine.memory.slots import MemorySlots, SlotPlan
from engine.memory.store import KVStore
from engine.memory.types import KV, CapacityError
from engine.model.kv_context import AttentionContext
from engine.model.state_tensors import cpu_copy
from engine.session.positions import Rerotation
from engine.planner.session_kv import all_staging_chunks, host_staging_chunks, session_staging
from engine.session.quota import SessionQuota

PlaceKeys = Callable[[int, torch.Tensor, float], torch.Tensor]   # (layer, keys before rotation, position)
GIB = 2 ** 30
log = logging.getLogger("worldpager.memory")


def context_slot_views(ctx: AttentionContext, slot: int) -> KV:
    """Per-layer (k, v) views of memory slot ``slot`` of an attention context (one chunk each)."""
    tokens = ctx.layout.tokens_per_chunk
    return [state.self_kv.memory_slot(slot * tokens, tokens) for state in ctx.layers]


class LayersOnDevice(Sequence):
    """Per-layer (k, v) on the host, each layer copied to ``device`` as it is read: the device holds
    one layer's copy at a time (the one read last), not the whole chunk's."""

    def __init__(self, kv: KV, device: torch.device):
        self.kv, self.device = kv, device
        self._last: tuple[int, tuple[torch.Tensor, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return len(self.kv)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._last is None or self._last[0] != index:
            k, v = self.kv[index]                      # IndexError past the last layer ends iteration
            self._last = None                          # the previous layer's copy goes first
            self._last = (index, (k.to(self.device), v.to(self.device)))
        return self._last[1]


def staging_home(device: torch.device, kv_paging: str) -> torch.device:
    """Where a tiered store's staging banks and the device cache keep retrieved chunks (dequantised, the
    model dtype): on ``device`` with chunk paging; with ``--kv-paging layer`` in host memory (pinned banks
    on CUDA), beside the host context their slot fill copies them into, so that the device holds no
    retrieved chunk outside its two layer pages."""
    return torch.device("cpu") if kv_paging == "layer" else torch.device(device)


class ResidentStore:
    """``device-only``: chunks kept as device tensors in the model dtype, within a byte budget."""

    def __init__(self, budget_bytes: int | None, device: torch.device | None = None):
        self.budget = budget_bytes
        self.device = device   # where the chunks stay (the context may be on the host: --kv-paging layer)
        self.kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        self.bytes = 0

    def put(self, chunk: int, kv) -> None:
        size = sum(k.numel() * k.element_size() * 2 for k, _ in kv)
        if self.budget is not None and self.bytes + size > self.budget:
            raise CapacityError(f"device memory budget of {self.budget / GIB:.1f} GiB is full at chunk "
                                f"{chunk} ({len(self.kv)} chunks resident; device-only mode has no other tier)")
        self.kv[chunk] = [(k.to(self.device or k.device, copy=True), v.to(self.device or v.device, copy=True))
                          for k, v in kv]
        self.bytes += size

    def counters(self) -> dict:
        return {"device_chunks": len(self.kv), "device_kv_bytes": self.bytes}

    def close(self) -> None:
        self.kv.clear()


class SessionMemory:
    """Retrieval memory of one session (see the module docstring)."""

    def __init__(self, cfg: SessionConfig, layout: KVLayout, ctx: AttentionContext, retriever,
                 device: torch.device, dtype: torch.dtype, *, rerotation: Rerotation | None = None,
                 clock: Callable[[], float] = time.perf_counter, resume_before: int | None = None,
                 base_layers: list[tuple[str, int]] = (), place_keys: PlaceKeys | None = None):
        """``base_layers``: a forked run's read-only spill directories and the chunk each serves below
        (``engine.session.fork``); they go into every save point, so that a resumed branch finds them.
        ``place_keys``: the model's rotation of keys stored before it (``memory.keys`` pre-rope; the
        context must keep them, ``AttentionContext(keys_before_rotation=True)``)."""
        self.mode = cfg.memory.store
        self.keys = cfg.memory.keys
        assert (place_keys is not None) == (self.keys == "pre-rope"), "pre-rope keys need the model's place_keys"
        self.place_keys = place_keys
        self.quota: SessionQuota | None = None   # --spill-max
        self._staged: list[int] = []       # the set staged for the next chunk (a save point keeps it)
        self.io_deadline_s = cfg.memory.io_deadline_s
        self._stuck = False
        self._wait_staged = False
        self._late_wait = cfg.memory.late_prefetch == "wait"
        self.resume_misses: list[int] = []   # slot chunks a resume could not read back (misses)
        self.layout, self.ctx, self.retriever, self.clock = layout, ctx, retriever, clock
        self.k = cfg.memory.retrieve_k if self.mode != "window" else 0
        self.slots = MemorySlots(self.k, cfg.memory.sink and self.mode != "window")
        self._sink_copied = False          # chunk 0's copy is in the sink slot (attended once placed)
        self.window_chunks = layout.window_chunks
        self.staging = session_staging(cfg, layout)
        self._cache: OrderedDict[int, KV] = OrderedDict()   # device cache: chunk -> its KV, oldest use first
        self._cache_on = staging_home(device, cfg.memory.kv_paging)
        self._rotate_on = torch.device(device)   # pre-rope keys are rotated on the model's device
        self.store: KVStore | ResidentStore | None = None
        self._last_counters: dict = {}
        self.rerotation = rerotation
        self.host_baseline_bytes: int | None = None   # process RSS the host pool was sized from
        self.base_layers = [(str(d), int(before)) for d, before in base_layers]
        if self.mode == "window":
            return
        if self.mode == "device-only":
            self.store = ResidentStore(self._device_budget(cfg, device), torch.device(device))
            return
        fmt = ChunkFormat.from_layout(layout, bits=cfg.memory.kv_bits,
                                      raw_dtype=str(dtype).removeprefix("torch."))
        spill = None if self.mode == "dram-only" else cfg.memory.spill
        self.quota = self._quota(cfg, spill, fmt, retriever)
        self._hold_drops = cfg.save_every != 0   # dropped blocks wait for a newer save point
        self._save_every = cfg.save_every
        self.store = KVStore(layout, fmt, n_slots=self._pool_slots(cfg, fmt.slot_bytes, device, dtype),
                             spill_dir=spill, device=device, drive_bw=cfg.memory.drive_bw,
                             k_slots=self.staging.stage_slots, dtype=dtype,
                             sync_writeback=cfg.memory.writeback == "sync",
                             write_through=cfg.memory.writeback == "through", resume_before=resume_before,
                             base_layers=self.base_layers, stage_on=self._cache_on,
                             disk_options=None if self.quota is None else
                             {"max_bytes": self.quota.plan.block_file_bytes})

    def _quota(self, cfg: SessionConfig, spill, fmt, retriever) -> SessionQuota | None:
        if cfg.memory.spill_max is None or spill is None:
            return None
        plan = QuotaPlan.of(parse_spill_max(cfg.memory.spill_max, spill), fmt.slot_bytes, format_tag(fmt), cfg.save_every)
        return SessionQuota(plan, retriever, sink=self.slots.sink)

    # ---- save points (engine.session.save) ----------------------------------------------------------

    @property
    def savepoints_possible(self) -> str | None:
        """None when a save point can hold this memory; else why not (one line)."""
        if self.store is None:
            return None
        if isinstance(self.store, ResidentStore) or self.store.disk is None:
            return (f"--store {self.mode} without --spill keeps the memory's chunks only in memory: "
                    "a save point needs them on a drive")
        return None

    def drive_failure(self) -> BaseException | None:
        """Why the memory's drive stopped taking chunks (a full drive, an I/O error, a write that has
        not finished within the I/O deadline), or None."""
        store = self.store
        if store is None or isinstance(store, ResidentStore):
            return None
        if store.disk_error is None and store.disk is not None and store.oldest_write_s() > self.io_deadline_s:
            self._stuck = True
            return TimeoutError(f"a write to {store.disk.dir} has not finished in {self.io_deadline_s:g} s "
                                "(--io-deadline): the drive is stuck or far too slow")
        return store.disk_error

    def chunk_bytes(self) -> int:
        """Bytes one stored chunk takes on the drive."""
        return 0 if self.store is None or isinstance(self.store, ResidentStore) else self.store.fmt.slot_bytes

    def savepoint_captured(self, chunk: int) -> None:
        """A save point at ``chunk`` was captured: chunks it needs stay writable until it is durable."""
        if isinstance(self.store, KVStore):
            self.store.hold_for_savepoint(chunk)

    def durable(self, chunk: int, timeout: float) -> bool:
        """Every chunk a run resumed at ``chunk`` may retrieve is on the drive (blocks the caller)."""
        return self.store is None or self.store.persist_through(chunk, timeout)

    def state_facts(self) -> dict:
        facts = {"mode": self.mode, "slots": list(self.slots.chunk_in), "staged": list(self._staged),
                 "keys": self.keys, "cache": list(self._cache)}
        if self.rerotation is not None:
            facts["rerotation"] = self.rerotation.state_facts()
        if self.base_layers:
            facts["base"] = [{"spill": d, "before": before} for d, before in self.base_layers]
        if self.quota is not None:
            facts["quota"] = self.quota.state_facts()
        return facts

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The sink's copy (kept at full precision, never in the store, as it is now: re-rotated, if it
        was); nothing else is needed: the other slots are refilled from the drive."""
        sink = self.slots.sink_slot
        # The copy exists from chunk 0's store on, before it is attended (placed) once chunk 0 has left
        # the window: a save point in between must keep it too.
        if self.store is None or sink is None or not self._sink_copied:
            return {}
        out = {}
        for layer, (k, v) in enumerate(context_slot_views(self.ctx, sink)):
            out[f"sink.{layer}.k"], out[f"sink.{layer}.v"] = cpu_copy(k), cpu_copy(v)
        return out

    def load_state(self, facts: dict, tensors: dict[str, torch.Tensor]) -> None:
        """Refill the memory slots as they were at the save point (stored keys, then the same
        rotations), and stage the set that was being staged for the next chunk."""
        if self.store is None:
            return
        if facts["mode"] != self.mode or len(facts["slots"]) != self.slots.total:
            raise ValueError(f"save point of a {facts['mode']} memory with {len(facts['slots'])} slots; "
                             f"this session has {self.mode} with {self.slots.total}")
        saved_keys = facts.get("keys", "post-rope")   # save points from before the setting stored post-rope
        if saved_keys != self.keys:
            raise InputError(f"the save point's memory stores keys {saved_keys}, this session has --kv-keys "
                             f"{self.keys}: its spill cannot be read this way")
        if self.quota is not None and "quota" in facts:
            self._load_quota(facts["quota"])
        chunk_in = [None if c is None else int(c) for c in facts["slots"]]
        sink = self.slots.sink_slot
        wanted = [c for j, c in enumerate(chunk_in) if c is not None and j != sink]
        loaded = self.store.load_now(wanted, timeout=self.io_deadline_s).kv if wanted else {}
        self.resume_misses = [c for c in wanted if c not in loaded]
        rerotation = facts.get("rerotation")
        if self.resume_misses:   # a block missing or failing its check: a miss, the run goes on
            log.warning("chunks %s of the memory could not be read back from the drive (missing or failing "
                        "their check): misses, the run goes on", self.resume_misses)
            chunk_in, rerotation = self._without(chunk_in, set(self.resume_misses), rerotation)
        if sink is not None and "sink.0.k" in tensors:
            # the sink's keys as they were, rotations included (placed or not yet)
            views = context_slot_views(self.ctx, sink)
            sources = [(tensors[f"sink.{layer}.k"], tensors[f"sink.{layer}.v"]) for layer in range(len(views))]
            for (k_dst, v_dst), (k, v) in zip(views, sources, strict=True):
                k_dst.copy_(k)
                v_dst.copy_(v)
            self._sink_copied = True
        for j, c in enumerate(chunk_in):
            if c is None or j == sink:
                continue
            entry = None if rerotation is None else rerotation.get("entry", {}).get(str(j))
            self._fill(j, loaded[c], c * self.layout.frames_per_chunk if entry is None else entry)
            if self.rerotation is not None:       # stored keys: the same rotations again
                self.rerotation.replay(self.ctx, j, rerotation)
        self.slots.chunk_in = chunk_in
        if self.rerotation is not None:
            self.rerotation.load_facts(rerotation)
        self._reload_cache([int(c) for c in facts.get("cache", [])])
        self._staged = [int(c) for c in facts["staged"]]
        if self.mode in ("prefetch", "dram-only") and self._staged:
            self.store.stage(self._staged)
            self._wait_staged = True
        self.ctx_valid()

    def _reload_cache(self, chunks: list[int]) -> None:
        """The device cache as the save point had it (oldest use first), read back from the drive a
        staging bank at a time; a chunk that cannot be read is left out (a miss later, if wanted)."""
        if self.staging.cache_chunks <= 0:
            return
        chunks = chunks[-self.staging.cache_chunks:]
        step = self.staging.stage_slots
        for start in range(0, len(chunks), step):
            part = chunks[start:start + step]
            got = self.store.load_now(part, timeout=self.io_deadline_s).kv
            for c in part:
                if c in got:
                    self._cache[c] = [(k.clone(), v.clone()) for k, v in got[c]]

    def _load_quota(self, facts: dict) -> None:
        """The holes and the quota as the save point had them; blocks dropped before it are given back."""
        fmt = self.store.fmt
        self.quota.plan = QuotaPlan.of(int(facts["quota_bytes"]), fmt.slot_bytes, format_tag(fmt), self._save_every)
        if self.store.disk is not None:
            self.store.disk.max_bytes = self.quota.plan.block_file_bytes
        self.quota.load_facts(facts)
        by_at: dict[int, list[int]] = {}
        for c, at in self.quota.dropped.items():
            by_at.setdefault(at, []).append(c)
        for at, chunks in sorted(by_at.items()):
            self.store.drop(chunks, at)
        self.store.release(self.quota.stored_through + 1)

    def take_drop_records(self) -> list[dict]:
        """The ``drop`` log records of the batches dropped since the last call."""
        return self.quota.take_records() if self.quota is not None else []

    def savepoint_written(self, chunk: int) -> None:
        """The save point at ``chunk`` is on the drive: blocks dropped before it are no longer needed."""
        if self.quota is not None and isinstance(self.store, KVStore):
            self.store.release(chunk)

    def _without(self, chunk_in: list, lost: set[int], rerotation: dict | None) -> tuple[list, dict | None]:
        """The slots with the ``lost`` chunks taken out, the rest moved towards the end of the region
        (valid memory stays one contiguous range), and the rotation facts following their slots."""
        sink = self.slots.sink_slot
        kept = [j for j, c in enumerate(chunk_in) if c is not None and j != sink and c not in lost]
        free = [j for j in reversed(range(len(chunk_in))) if j != sink]
        moved = dict(zip(reversed(kept), free))   # old slot -> new slot, order kept
        if sink is not None:
            moved[sink] = sink
        out = [None] * len(chunk_in)
        for old, new in moved.items():
            out[new] = chunk_in[old]
        if rerotation is not None:
            rerotation = {part: {str(moved[int(s)]): v for s, v in rerotation[part].items() if int(s) in moved}
                          for part in ("position", "pending", "moves", "entry") if part in rerotation} | \
                         {k: v for k, v in rerotation.items() if k not in ("position", "pending", "moves", "entry")}
        return out, rerotation

    @staticmethod
    def _device_budget(cfg: SessionConfig, device: torch.device) -> int | None:
        """Bytes left for resident chunks: the device's memory (``device_mem_gib``) minus what the
        model, the attention context and the runtime already hold (measured on CUDA; 0 on the CPU)."""
        total = cfg.memory.device_mem_gib
        if total is None:
            return None
        in_use = torch.cuda.memory_reserved(device) if device.type == "cuda" else 0
        return max(0, int(total * GIB) - in_use)

    def _pool_slots(self, cfg: SessionConfig, slot_bytes: int, device: torch.device, dtype: torch.dtype) -> int:
        """Slots for the host budget (budget − process RSS − 2 GiB), never more than the session can use.

        On a CPU, and on CUDA with ``--kv-paging layer`` (``staging_home``), the store's staging slots and
        the device cache, allocated after the pool, are host memory too: they count with the process, so
        that the session stays inside ``--host-mem``."""
        from engine.memory.host_pool import pool_slots, process_baseline_bytes

        baseline = self.host_baseline_bytes = process_baseline_bytes()   # recorded in the log header
        if cfg.memory.pool_slots is not None:
            return cfg.memory.pool_slots
        needed = max(cfg.chunks, 8)
        host = cfg.memory.host_mem_gib
        if host is None:
            host_bytes = psutil.virtual_memory().available
        else:
            host_bytes = int(host * GIB)
        host_chunks = host_staging_chunks if device.type == "cuda" else all_staging_chunks   # banks and cache
        staging = host_chunks(cfg, self.layout) * self.layout.bytes_per_chunk(dtype.itemsize)
        try:
            budget = pool_slots(host_bytes, baseline + staging, slot_bytes)
        except ConfigError:
            if host is None:   # no explicit budget: run with the minimum instead of refusing
                return 8
            raise
        return min(budget, needed)

    # ---- steps 2–4 --------------------------------------------------------------------------------

    def candidates(self, chunk: int) -> list[int]:
        """Chunks chunk may retrieve: stored, out of the local window, not the sink."""
        newest = chunk - 1 - self.window_chunks
        holes = self.quota.dropped if self.quota is not None else ()
        return [c for c in range(0, newest + 1) if not (self.slots.sink and c == 0) and c not in holes]

    def _all_candidates(self, chunk: int) -> list[int]:
        """``candidates`` had nothing been dropped (for the first-choice rate)."""
        newest = chunk - 1 - self.window_chunks
        return [c for c in range(0, newest + 1) if not (self.slots.sink and c == 0)]

    def prepare(self, chunk: int) -> dict:
        """Fill the context's memory region for ``chunk`` (and start staging chunk+1 when prefetching)."""
        record = {"hits": 0, "misses": 0, "stale": 0, "staged": [], "memory": [], "stall_ms": 0.0,
                  "memory_copy_ms": 0.0}
        if self.store is None:
            return record
        self._place_sink(chunk, record)
        desired = self.retriever.select(chunk, self.candidates(chunk), self.k, preferred=self._at_hand())
        if self.quota is not None and self.quota.dropped and self.k:
            first = self.retriever.select(chunk, self._all_candidates(chunk), 1)
            self.quota.note_retrieval(first[0] if first else None)
            record["first_choice"] = bool(first) and first[0] not in self.quota.dropped
        elif self.quota is not None and desired:
            self.quota.note_retrieval(desired[0])
            record["first_choice"] = True
        prepare = {"prefetch": self._prepare_prefetch, "dram-only": self._prepare_prefetch,
                   "on-demand": self._prepare_on_demand, "sync": self._prepare_sync,
                   "device-only": self._prepare_device_only}[self.mode]
        prepare(chunk, desired, record)
        record["memory"] = self.slots.resident()
        if self.rerotation is not None:
            record["rerotated"] = self.rerotation.update(chunk, self.ctx, self.slots.chunk_in)
        self.ctx_valid()
        return record

    def _place_sink(self, chunk: int, record: dict) -> None:
        """Once chunk 0 has left the window, its copy (made when it was stored) becomes attended.

        The sink never comes from the store, so placing it never waits on a drive."""
        left_window = chunk - 1 - self.window_chunks >= 0
        if self.slots.sink and left_window and self.slots.chunk_in[self.slots.sink_slot] is None:
            slot = self.slots.place_sink(0)
            if self.rerotation is not None:
                self.rerotation.entered(slot, 0)

    def _prepare_prefetch(self, chunk: int, desired: list[int], record: dict) -> None:
        # Right after a resume the set staged before the save point is waited for once: the run
        # that made the save point had it in time (a miss would have been logged there).
        # With late_prefetch "wait", a set still loading is waited for (up to the I/O deadline, as any
        # read) and the wait is a stall, so the frames do not depend on the machine's speed.
        t0 = self.clock()
        timeout = None if self._wait_staged else self.io_deadline_s if self._late_wait else 0
        staged = self.store.take_staged(timeout=timeout)
        if self._late_wait:
            record["stall_ms"] += (self.clock() - t0) * 1e3
        self._wait_staged = False
        sources = {**self._cache, **staged.kv}
        plan = self.slots.plan(desired, set(sources))
        self._apply(plan, sources, record, chunk)
        record["cache_hits"] = sum(1 for _, c in plan.fills if c in self._cache and c not in staged.kv)
        self._remember(staged.kv, [c for _, c in plan.fills] + plan.resident)
        later = self.candidates(chunk + 1)
        still = set(later)
        failed = set(staged.failed)                           # a failed read (a corrupt block) is not retried
        late = [c for c in plan.missing if c in still and c not in failed]   # a late prefetch: taken next chunk
        at_hand = set(self.slots.resident()) | set(self._cache)
        nxt = self.retriever.predict_staging(chunk + 1, later, self.k, self.staging.stage_slots + len(at_hand),
                                             preferred=at_hand, carried=late)
        to_stage = [c for c in nxt if c not in at_hand][:self.staging.stage_slots]
        self.store.stage(to_stage)
        record["staged"] = to_stage
        self._staged = to_stage

    def _at_hand(self) -> set[int]:
        """Chunks selection may favour: in a slot, staged for this chunk, or in the device cache."""
        return set(self.slots.resident()) | set(self._staged) | set(self._cache)

    def _remember(self, loaded: dict, used: list[int]) -> None:
        """Keep the chunks just taken from the store in the device cache (copies: the staging bank is
        overwritten by the next stage) and mark those used now as the newest; the oldest go first."""
        if self.staging.cache_chunks <= 0:
            return
        for c, kv in loaded.items():
            if c not in self._cache:   # with --kv-paging layer the copies wait on the host (``staging_home``)
                self._cache[c] = [(k.to(self._cache_on, copy=True), v.to(self._cache_on, copy=True)) for k, v in kv]
            self._cache.move_to_end(c)
        for c in used:
            if c in self._cache:
                self._cache.move_to_end(c)
        while len(self._cache) > self.staging.cache_chunks:
            self._cache.popitem(last=False)

    def _prepare_on_demand(self, chunk: int, desired: list[int], record: dict) -> None:
        missing = [c for c in desired if c not in self.slots.resident()]
        loaded = self._load_now(missing, record)
        self._apply(self.slots.plan(desired, set(loaded)), loaded, record, chunk)

    def _prepare_sync(self, chunk: int, desired: list[int], record: dict) -> None:
        loaded = self._load_now(desired, record)
        self.slots.clear_retrieval()   # no reuse: every desired chunk is copied again
        self._apply(self.slots.plan(desired, set(loaded)), loaded, record, chunk)

    def _prepare_device_only(self, chunk: int, desired: list[int], record: dict) -> None:
        self._apply(self.slots.plan(desired, set(self.store.kv)), self.store.kv, record, chunk)

    def _load_now(self, ids: list[int], record: dict) -> dict:
        if not ids:
            return {}
        if isinstance(self.store, ResidentStore):
            return {c: self.store.kv[c] for c in ids if c in self.store.kv}
        t0 = self.clock()
        got = self.store.load_now(ids, timeout=self.io_deadline_s)
        record["stall_ms"] += (self.clock() - t0) * 1e3
        return got.kv

    def _apply(self, plan: SlotPlan, sources: dict, record: dict, now: int) -> None:
        self._copy_into(sources, {c: slot for slot, c in plan.fills}, record, now)
        self.slots.apply(plan)
        record["hits"] += plan.hits
        record["misses"] += len(plan.missing)
        record["stale"] += min(len(plan.missing), len(plan.stale))   # slots kept for lack of a hit

    def _copy_into(self, sources: dict, slot_of: dict[int, int], record: dict, now: int) -> None:
        """Copy stored chunks into their slots for chunk ``now`` (keys stored pre-rope are rotated on the
        way, at the position chosen for ``now``)."""
        t0 = self.clock()
        for chunk, slot in slot_of.items():
            at = self._entry_position(chunk, now)
            self._fill(slot, sources[chunk], at)
            if self.rerotation is not None:
                self.rerotation.entered(slot, chunk, at if self.place_keys is not None else None)
        record["memory_copy_ms"] += (self.clock() - t0) * 1e3

    def _entry_position(self, chunk: int, now: int) -> float:
        """The latent-frame position of ``chunk``'s first frame as it enters a slot for chunk ``now``."""
        if self.rerotation is not None:
            return self.rerotation.entry_position(chunk, now)
        return float(chunk * self.layout.frames_per_chunk)

    def _fill(self, slot: int, kv, at: float) -> None:
        """One stored chunk's K/V into ``slot``: keys as stored, or (pre-rope) rotated to position ``at``."""
        for layer, ((k_dst, v_dst), (k, v)) in enumerate(zip(context_slot_views(self.ctx, slot), kv, strict=True)):
            k_dst.copy_(k if self.place_keys is None else self.place_keys(layer, k.to(self._rotate_on), at))
            v_dst.copy_(v)

    def ctx_valid(self) -> None:
        tokens = self.slots.valid_tokens(self.layout.tokens_per_chunk)
        for state in self.ctx.layers:
            state.self_kv.set_memory_valid(tokens)
        slots = self.slots
        self.ctx.memory_chunks = [int(c) for c in slots.chunk_in[slots.total - slots.filled:]]

    # ---- step 6 -----------------------------------------------------------------------------------

    def store_chunk(self, chunk: int) -> dict:
        """Keep chunk's clean KV (the context's current region) as retrievable memory."""
        if self.store is None:
            return {}
        if self.slots.sink and chunk == 0:
            # The sink stays resident in bf16 (model dtype): copy it now, attend it once it leaves the window.
            for (k_dst, v_dst), (k, v) in zip(context_slot_views(self.ctx, self.slots.sink_slot),
                                              self.ctx.current_kv(), strict=True):
                k_dst.copy_(k)
                v_dst.copy_(v)
            self._sink_copied = True
        self.store.put(chunk, self._on_store_device(self.ctx.stored_kv()))   # keys before the rotation with pre-rope
        if self.quota is not None:
            self._enforce_quota(chunk)
        return self.tier_record()

    def _on_store_device(self, kv: KV) -> KV:
        """The chunk's K/V where the store quantises them: with --kv-paging layer they are on the host,
        the store (on CUDA) quantises on the device, as with chunk paging (the same bytes stored), one
        layer at a time (``LayersOnDevice``)."""
        store_device = getattr(self.store, "device", None)
        if store_device is None or not kv or kv[0][0].device == store_device:
            return kv
        return LayersOnDevice(kv, store_device)

    def _enforce_quota(self, chunk: int) -> None:
        newest_candidate = chunk - self.window_chunks   # the next chunk's newest candidate
        pinned = set(self.slots.resident()) | set(self._staged) | set(range(max(newest_candidate, 0), chunk + 1))
        drops = self.quota.enforce(chunk, pinned)
        if drops:
            for c in drops:               # a hole is never a candidate: its cached copy is of no use
                self._cache.pop(c, None)
            self.store.drop(drops, chunk)
            if not self._hold_drops:
                self.store.release()

    def tier_record(self) -> dict:
        """Per-chunk tier figures for the log (byte counters as deltas since the last call)."""
        c = self.store.counters() if self.store is not None else {}
        delta = {k: c.get(k, 0) - self._last_counters.get(k, 0)
                 for k in ("disk_read_bytes", "disk_write_bytes", "put_wait_s", "corrupt_blocks")}
        self._last_counters = c
        return {"put_wait_ms": delta["put_wait_s"] * 1e3,
                "disk_bytes_read": delta["disk_read_bytes"], "disk_bytes_written": delta["disk_write_bytes"],
                "corrupt_blocks": delta["corrupt_blocks"],
                "pool_used_bytes": c.get("pool_used_bytes", c.get("device_kv_bytes", 0)),
                "pool_free_bytes": c.get("pool_free_bytes", 0),
                "writeback_queue": c.get("writeback_queue_depth", 0),
                **({"disk_alloc_bytes": c.get("disk_alloc_bytes", 0), "spill_max_bytes": self.quota.plan.quota_bytes,
                    "dropped_chunks": len(self.quota.dropped)} if self.quota is not None else {})}

    def summary(self) -> dict:
        c = self.store.counters() if self.store is not None else {}
        return {"disk": {"bytes_read": c.get("disk_read_bytes", 0), "bytes_written": c.get("disk_write_bytes", 0),
                         "io_mode": c.get("disk_io_mode", "none")},
                "corrupt_blocks": c.get("corrupt_blocks", 0),   # disk reads that failed their crc32 (misses)
                "pool_bytes": c.get("pool_bytes", 0),
                **({"quota": {**self.quota.summary(), "disk_alloc_bytes": c.get("disk_alloc_bytes", 0),
                              "early_releases": c.get("disk_early_releases", 0)}} if self.quota is not None else {})}

    def discard(self) -> None:
        """Remove the spill files this memory created, once closed (its session generated nothing)."""
        if isinstance(self.store, KVStore):
            self.store.discard()

    def close(self, abort: bool = False) -> None:
        """``abort`` (a second signal): wait for nothing the drive holds."""
        if self.store is None:
            return
        if abort and isinstance(self.store, KVStore):
            self.store.close(abort=True)
        elif self._stuck:   # a stuck drive would hold the close for as long as its write hangs
            self.store.close(timeout=1.0)
        else:
            self.store.close()
