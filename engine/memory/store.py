"""KVStore: the tiered KV memory the session uses (device staging ← host pool ← disk).

Contract.
  ``put(c, kv)``        kv = per layer (k, v), each [1, T, H, D] on the device (the model's ``KVLayout``).
                        Quantised into a host-pool slot before returning (CPU: synchronously; CUDA: on
                        the device, then an event-ordered copy to the pinned slot), so the caller may
                        overwrite kv at once.
                        With ``sync_writeback`` (a baseline for measurement) it also waits for the
                        write-back it triggers. With ``write_through`` every stored chunk is written
                        to the drive in the background at once (a clean block's eviction is free and
                        ``persist_through`` finds little left to write); else dirty blocks are written
                        when reclaimable slots run low (write-back).
                        Blocks only when every slot is dirty or pinned (write-back is behind; loads
                        never hold every slot, see ``PlacementManager``), never on a read; raises
                        ``CapacityError`` when the pool is full with no disk tier or a failed one.
  ``stage(ids)``        starts bringing up to ``k_slots`` chunks into the device staging slots (disk →
                        host → dequantised) on worker threads and returns at once; a new ``stage`` makes
                        the previous set stale (late arrivals still land in the host pool).
  ``take_staged(t)``    waits at most ``t`` seconds (0: not at all), then reports per id hit or miss and
                        hands out the hits' per-layer (k, v) views. The views stay valid until the
                        ``n_banks``-th following ``stage``/``load_now``: copy them out (``copy_into``).
                        Disk reads of a superseded set that no reader has started yet are dropped and
                        give their pool slot back (``reads_dropped``).
  ``load_now(ids)``     the same, synchronously (on-demand and sync baseline modes).
  ``stage_on``          where the staging banks live: the store's device (default), or on a CUDA store
                        "cpu" (``--kv-paging layer``): pinned host banks, each chunk dequantised on the
                        device a layer at a time and copied back by the stage thread (``CudaCopier``), so
                        the device holds no staged chunk; ``counters()`` says where (``staging_device_bytes``).
  ``counters()``        bytes and seconds per tier, pool slots/bytes, write-back depth, hits/misses,
                        failed reads and, among them, ``corrupt_blocks`` (disk blocks failing their crc32).
  ``lost``              chunks before a resume point that its spill index no longer holds (a damaged
                        entry): misses when retrieved, not waited for by ``persist_through``.
  ``drop(ids, at)``     (``--spill-max``) forgets chunks for good, decided at chunk ``at``: never loaded
                        again, a pool copy freed (a dirty one never written), a disk block retired —
                        kept until ``release(before)`` says a save point newer than the drop is on the
                        drive (``DiskTier.retire``). ``persist_through`` does not wait for them.
  ``close()``           drains write-back (all dirty blocks with ``persist_all``), writes the index,
                        releases the spill lock. Also a context manager.

Bases (a forked run). ``base_layers`` = [(spill directory, before), ...], oldest first: chunks below
``before`` of each are read from it read-only (``BaseTier``: no lock, no write) and count as on disk;
a chunk is read from the own spill directory if there, else from the newest base that holds it. New
chunks are only ever written to the own spill directory.

Threads. One lock guards the manager and the staging state; the caller's thread only takes it for
bookkeeping. Disk reads run on reader threads, write-back on one writer thread that yields to reads
unless urgent, dequantisation on one stage thread (the only writer of staging banks, so banks need no locks). Every
background failure is a ``TransferResult`` kept in ``errors()``, counted and logged.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial

import torch

from engine.facts.layout import KVLayout
from engine.memory.disk import DiskTier
from engine.memory.disk_base import BaseTier
from engine.memory.host_pool import HostPool, pool_slots, process_baseline_bytes
from engine.memory.manager import PlacementManager
from engine.memory.transfer import (CudaCopier, DriveIO, DriveThrottle, HostCopier, Job, Worker,
                                    parse_drive_bw)
from engine.memory.types import (KV, CapacityError, ChunkId, CorruptBlockError, DiskFullError, LoadSpec,
                                 StagedSet, Tier, TransferResult)

log = logging.getLogger("worldpager.memory")
__all__ = ["KVStore", "StagedSet"]
ABORT_JOIN_S = 0.2   # an aborted close gives each transfer thread this long to finish its job


@dataclass
class _Staging:
    gen: int
    bank: int
    ids: tuple[ChunkId, ...]
    marker: object                                    # CUDA: the caller's stream when staged
    ready: dict[ChunkId, int] = field(default_factory=dict)
    failed: set = field(default_factory=set)
    pending: int = 0                                  # loads started or deferred, not yet done
    deferred: list = field(default_factory=list)      # (j, chunk) on disk, waiting for a free slot
    reads: list = field(default_factory=list)         # _Read of this set's disk reads
    taken: StagedSet | None = None


@dataclass
class _Read:
    """One disk read for a staged set; dropped (its slot given back) if the set is superseded before
    a reader starts it."""
    st: _Staging
    j: int
    spec: LoadSpec
    tier: object
    started: bool = False
    dropped: bool = False


def _format_tag(fmt) -> str:
    return getattr(fmt, "tag", None) or repr(fmt)


class KVStore:
    """The session's tiered KV memory (see the module docstring)."""

    def __init__(self, layout: KVLayout, fmt, host_bytes: int | None = None,
                 n_slots: int | None = None, spill_dir=None, device="cpu", drive_bw=None, *,
                 k_slots: int = 3, n_banks: int = 1, dtype: torch.dtype | None = None,
                 readers: int = 2, resume: bool = False, low_water: int = 3,
                 put_timeout_s: float = 120.0, disk_options: dict | None = None,
                 sync_writeback: bool = False, write_through: bool = False,
                 resume_before: ChunkId | None = None,
                 base_layers: list[tuple[object, ChunkId]] = (), stage_on=None):
        assert (host_bytes is None) != (n_slots is None), "give exactly one of host_bytes, n_slots"
        self.layout, self.fmt, self.k_slots, self.n_banks = layout, fmt, k_slots, n_banks
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.stage_on = self.device if stage_on is None else torch.device(stage_on)   # where the banks live
        if self.stage_on.type == "cuda":
            self.stage_on = self.device
        assert self.stage_on.type in ("cpu", self.device.type), f"staging banks on {self.stage_on}"
        self.put_timeout_s = put_timeout_s
        self.sync_writeback = sync_writeback   # baseline: put waits for the write-back it triggers
        self.write_through = write_through     # every stored chunk goes to the drive at once
        self._resume_before = resume_before    # resumed at this chunk: later chunks are made again
        resume = resume or resume_before is not None
        if n_slots is None:
            n_slots = pool_slots(host_bytes, process_baseline_bytes(), fmt.slot_bytes)
        self.pool = HostPool(n_slots, fmt.slot_bytes)
        self.disk = None if spill_dir is None else DiskTier(
            spill_dir, fmt.slot_bytes, format_tag=_format_tag(fmt), resume=resume,
            **(disk_options or {}))
        self.bases: list[BaseTier] = []
        try:
            assert self.disk is not None or not base_layers, "base layers need a spill directory of our own"
            for directory, before in base_layers:
                self.bases.append(BaseTier(directory, fmt.slot_bytes, before=before, format_tag=_format_tag(fmt)))
            self._start(n_slots, low_water, resume, drive_bw, readers)
        except BaseException:   # e.g. a thread that cannot start: nothing left running, open or behind
            for workers in (getattr(self, "stager", None), getattr(self, "io", None)):
                if workers is not None:
                    workers.stop(ABORT_JOIN_S)
            for base in self.bases:
                base.close()
            if self.disk is not None:
                self.disk.close(write_index=False)   # release the spill lock
                self.disk.discard()
            raise

    def _start(self, n_slots: int, low_water: int, resume: bool, drive_bw, readers: int) -> None:
        self.manager = PlacementManager(n_slots, has_disk=self.disk is not None,
                                        low_water=low_water, slot_bytes=self.fmt.slot_bytes)
        self.lost: set[ChunkId] = set()   # chunks a resumed run's index no longer holds: never retrievable
        self.dropped: dict[ChunkId, ChunkId] = {}   # chunk -> the chunk it was dropped at (--spill-max)
        self._drops_waiting: list[ChunkId] = []     # dropped while a save point waits for them to be written
        self._persist_need: dict[ChunkId, set] = {}   # save point chunk -> the chunks it waits for
        if self.disk is not None and resume:
            if self._resume_before is not None:
                self.disk.forget_from(self._resume_before)
                self.lost = set(range(self._resume_before)) - set(self.disk.chunks()) \
                    - {c for b in self.bases for c in b.chunks()}
            self.manager.register_on_disk(self.disk.chunks())
        if self.bases:
            own = set(self.disk.chunks()) if resume else set()
            self.manager.register_on_disk(sorted({c for b in self.bases for c in b.chunks()} - own))
        self._cond = threading.Condition()
        self._errors: deque[TransferResult] = deque(maxlen=256)
        self._c = dict.fromkeys(("puts", "put_s", "put_wait_s", "host_write_bytes",
                                 "host_read_bytes", "disk_read_bytes", "disk_read_s",
                                 "disk_write_bytes", "disk_write_s", "device_stage_bytes", "host_stage_bytes",
                                 "stage_s", "hits", "misses", "failed_reads", "corrupt_blocks", "late",
                                 "reads_dropped", "errors"), 0)
        self._disk_error: BaseException | None = None
        self._pending_stores: list[tuple[ChunkId, object]] = []
        self._staging: _Staging | None = None
        self._gen = 0
        self._persist_all = False
        self._write_started: dict[ChunkId, float] = {}   # write-backs in flight: when submitted
        self._closed = False
        self._banks = self._alloc_banks()
        self._stage_bytes = self._banks[0, 0].numel() * self._banks.element_size()
        self.throttle = DriveThrottle(parse_drive_bw(drive_bw))
        cuda = self.device.type == "cuda"
        self.copier = CudaCopier(self.device, self.fmt.slot_bytes) if cuda else HostCopier()
        self.io = DriveIO(self._report_locked, readers=readers)
        self._write_pace = self.io.write_pace(self.throttle.write)
        before = (lambda: torch.cuda.set_device(self.device)) if cuda else None
        self.stager = Worker("wp-stage", self._report_locked, before=before)

    def _alloc_banks(self) -> torch.Tensor:
        lay = self.layout
        shape = (self.n_banks, self.k_slots, lay.layers, 2, 1, lay.tokens_per_chunk,
                 lay.heads, lay.head_dim)   # [bank, slot, layer, k|v, B, T, H, D]
        if self.stage_on.type == "cpu" and self.device.type == "cuda":   # host banks: pinned, copied to asynchronously
            return torch.zeros(shape, dtype=self.dtype, pin_memory=True)
        return torch.zeros(shape, dtype=self.dtype, device=self.stage_on)

    def _views(self, bank: int, j: int) -> KV:
        slot = self._banks[bank, j]
        return [(slot[layer, 0], slot[layer, 1]) for layer in range(slot.shape[0])]

    # ---- put ------------------------------------------------------------------------------------

    def put(self, chunk: ChunkId, kv: KV) -> None:
        """Quantise chunk's KV into a pool slot; returns once ``kv`` may be overwritten."""
        assert not self._closed
        self._check_kv(kv)
        t0 = time.perf_counter()
        with self._cond:
            self._reap_stores()
            spec = self._take_slot(chunk, time.perf_counter())
        try:
            event = self.copier.store(kv, self.fmt, self.pool.slot(spec.slot))
        except Exception:
            with self._cond:
                self.manager.complete_store(chunk, False)
            raise
        with self._cond:
            if event is None:
                self.manager.complete_store(chunk, True)
            else:
                self._pending_stores.append((chunk, event))
            self._c["puts"] += 1
            self._c["host_write_bytes"] += self.fmt.nbytes
            self._kick_writeback()
            self._retry_deferred()   # disk reads held back while this put waited for its slot
            if self.sync_writeback:
                self._cond.wait_for(lambda: self.manager.writeback_pending() == 0
                                    or self._disk_error is not None, self.put_timeout_s)
            self._c["put_s"] += time.perf_counter() - t0

    def _check_kv(self, kv: KV) -> None:
        lay = self.layout
        want = (1, lay.tokens_per_chunk, lay.heads, lay.head_dim)
        assert len(kv) == lay.layers, f"{len(kv)} layers of KV, model has {lay.layers}"
        assert all(tuple(k.shape) == want and tuple(v.shape) == want for k, v in kv), want

    def _take_slot(self, chunk: ChunkId, t0: float):
        """A pool slot for ``chunk``; waits (counted as put_wait_s) while write-back frees one."""
        waited = False
        while True:
            spec = self.manager.prepare_store(chunk)   # CapacityError when dram-only and full
            if spec is not None:
                if waited:   # only a real wait counts (it is reported as a stall)
                    self._c["put_wait_s"] += time.perf_counter() - t0
                return spec
            if self._disk_error is not None:
                raise CapacityError(f"host pool full ({self.manager.n_slots} chunks) and the disk "
                                    f"tier failed: {self._disk_error}")
            if time.perf_counter() - t0 > self.put_timeout_s:
                where = f"write-back to {self.disk.dir}" if self.disk else "no pinned block"
                raise CapacityError(f"host pool full: {where} freed no slot "
                                    f"in {self.put_timeout_s:.0f} s")
            self._kick_writeback()
            waited = True
            self._cond.wait(0.01 if self._pending_stores else 0.5)
            self._reap_stores()

    def _reap_stores(self) -> None:
        """CUDA puts whose copy to the pinned slot finished become loadable (called under the lock)."""
        still = []
        for chunk, event in self._pending_stores:
            try:
                done = event.query()
            except RuntimeError as exc:   # an asynchronous CUDA error surfaces here
                self.manager.complete_store(chunk, False)
                self._report(TransferResult("store", chunk, False, error=exc))
                continue
            if done:
                self.manager.complete_store(chunk, True)
            else:
                still.append((chunk, event))
        if len(still) != len(self._pending_stores):
            self._pending_stores = still
            self._retry_deferred()

    # ---- write-back -----------------------------------------------------------------------------

    def _kick_writeback(self) -> None:
        if self.disk is None or self._disk_error is not None:
            return
        self.io.gate.set_urgent(self.manager.writeback_urgent())
        for spec in self.manager.prepare_writeback(everything=self._persist_all or self.write_through):
            self._write_started[spec.chunk] = time.monotonic()
            run = partial(self.disk.write, spec.chunk, self.pool.slot(spec.slot), self._write_pace)
            self.io.submit_write(Job("writeback", spec.chunk, run,
                                     partial(self._writeback_done, spec.chunk)))

    def _writeback_done(self, chunk: ChunkId, result: TransferResult) -> None:
        with self._cond:
            self._write_started.pop(chunk, None)
            self.manager.complete_writeback(chunk, result.ok)
            if result.ok and chunk in self.dropped:   # dropped while its write was in flight
                self.disk.retire(chunk, self.dropped[chunk])
            if result.ok:
                self._c["disk_write_bytes"] += result.nbytes
                self._c["disk_write_s"] += result.seconds
                self._kick_writeback()
            else:
                self._report(result)
                self._disk_error = result.error   # stop writing; puts fail once the pool is full
            self._retry_deferred()
            self._cond.notify_all()

    @property
    def disk_error(self) -> BaseException | None:
        """The write-back failure that stopped writing to the drive (None while it writes)."""
        return self._disk_error

    def hold_for_savepoint(self, chunk: ChunkId) -> None:
        """A save point at ``chunk`` was just captured: until ``persist_through(chunk)`` has run, chunks
        before it that are dropped from now on are still written to the drive (it needs them)."""
        if self.disk is not None:
            with self._cond:
                self._hold_locked(chunk)

    def _hold_locked(self, chunk: ChunkId) -> set:
        need = set(range(chunk)) - self.lost - {c for c, at in self.dropped.items() if at < chunk}
        self._persist_need[chunk] = need
        return need

    def persist_through(self, chunk: ChunkId, timeout: float) -> bool:
        """Block (the caller's thread, e.g. a save point's) until every chunk before ``chunk`` is on
        the drive and the drive's index is durable; False on a timeout or no drive; an ``OSError`` naming
        the drive's own error when write-back failed (a full drive, a file-size limit).

        Chunks dropped before ``chunk`` are not waited for; chunks dropped meanwhile (at ``chunk`` or
        later) are still needed by the save point: their drops take effect when this returns."""
        if self.disk is None:
            return False
        with self._cond:
            need = self._persist_need[chunk] if chunk in self._persist_need else self._hold_locked(chunk)
            try:
                self._persist_all = True
                self._kick_writeback()
                done = self._cond.wait_for(
                    lambda: self._disk_error is not None or need <= self.manager.disk_chunks(), timeout)
                self._persist_all = False
            finally:
                self._persist_need.pop(chunk, None)
                if not self._persist_need:
                    self._apply_drops()
            if self._disk_error is not None:   # say why: the drive failed, not the wait
                raise OSError(f"the spill drive stopped taking chunks: {type(self._disk_error).__name__}: "
                              f"{self._disk_error}")
            if not done:
                return False
        self.disk.flush_index()
        return True

    # ---- drops (--spill-max) --------------------------------------------------------------------

    def drop(self, chunk_ids, at: ChunkId) -> None:
        """Forget ``chunk_ids`` for good (see the module docstring); decided at chunk ``at``."""
        with self._cond:
            for chunk in chunk_ids:
                if chunk in self.dropped:
                    continue
                self.dropped[chunk] = at
                self._drops_waiting.append(chunk)
                if self.manager.on_disk(chunk):   # already written: the save point has it
                    for need in self._persist_need.values():
                        need.discard(chunk)
            if not self._persist_need:
                self._apply_drops()
            else:   # a save point being made still needs the unwritten ones: those after it
                written = [c for c in self._drops_waiting if not any(c in n for n in self._persist_need.values())]
                self._drops_waiting = [c for c in self._drops_waiting if c not in set(written)]
                self._apply_drops(written)

    def _apply_drops(self, chunks: list[ChunkId] | None = None) -> None:
        """Drops decided (``chunks``, else all waiting) reach the manager and the drive (under the lock).
        A retired block stays in the index until released, so a save point being made still finds it."""
        if chunks is None:
            chunks, self._drops_waiting = self._drops_waiting, []
        for chunk in chunks:
            if self.manager.drop(chunk) and self.disk is not None:
                self.disk.retire(chunk, self.dropped[chunk])   # a base directory's block is not ours
        self._retry_deferred()
        self._cond.notify_all()

    def release(self, before: ChunkId | None = None) -> int:
        """Give back the disk blocks of chunks dropped before chunk ``before`` (None: all)."""
        return 0 if self.disk is None else self.disk.release(before)

    # ---- staging --------------------------------------------------------------------------------

    def stage(self, chunk_ids) -> None:
        """Start bringing ``chunk_ids`` into the staging slots for the next chunk; never blocks.

        With one bank (the default) the previous set's views are overwritten from now on: copy them
        out (``StagedSet.copy_into``) before calling this.
        """
        ids = tuple(dict.fromkeys(chunk_ids))
        assert len(ids) <= self.k_slots, f"{len(ids)} chunks staged, {self.k_slots} staging slots"
        assert not self._closed
        with self._cond:
            self._reap_stores()
            if self._staging is not None:
                self._drop_queued_reads(self._staging)
            self._gen += 1
            st = _Staging(self._gen, self._gen % self.n_banks, ids, self.copier.bank_free_marker())
            self._staging = st
            self.manager.touch(ids)
            for j, chunk in enumerate(ids):
                self._start_load(st, j, chunk)
            self._kick_writeback()

    def _start_load(self, st: _Staging, j: int, chunk: ChunkId) -> None:
        st.pending += 1
        spec = self.manager.prepare_load(chunk)
        if spec is None:
            if self.manager.may_load_later(chunk):
                st.deferred.append((j, chunk))   # a slot may come free, or a copy is in flight
            else:
                st.pending -= 1
                st.failed.add(chunk)             # unknown, not yet stored, or no slot will come
            return
        if spec.src is Tier.HOST:
            self.stager.submit(self._dequant_job(st, j, spec))
            return
        read = _Read(st, j, spec, self._tier_of(chunk))
        st.reads.append(read)
        self.io.submit_read(Job("load", chunk, partial(self._run_read, read),
                                partial(self._disk_read_done, read)))

    def _run_read(self, read: _Read) -> int:
        """On a reader thread: read the block unless its set was superseded while it was queued."""
        with self._cond:
            if read.dropped:
                return 0
            read.started = True
        return read.tier.read(read.spec.chunk, self.pool.slot(read.spec.slot), self.throttle.read)

    def _drop_queued_reads(self, st: _Staging) -> None:
        """``st`` is superseded: its reads no reader has started give their slots back now, so slow
        reads queued for sets nobody wants pin nothing (called under the lock)."""
        for read in st.reads:
            if not read.started and not read.dropped:
                read.dropped = True
                self.manager.cancel_load(read.spec.chunk)
                st.pending -= 1
                self._c["reads_dropped"] += 1
        st.reads = [r for r in st.reads if not r.dropped]
        st.pending -= len(st.deferred)
        st.deferred = []

    def _tier_of(self, chunk: ChunkId) -> DiskTier:
        """Where ``chunk``'s block is: the own spill directory, else the newest base holding it."""
        if chunk in self.disk:
            return self.disk
        return next((base for base in reversed(self.bases) if chunk in base), self.disk)

    def _live(self, st: _Staging) -> bool:
        return self._staging is st and st.taken is None

    def _retry_deferred(self) -> None:
        """A slot may have come free (write-back done, load unpinned): start deferred disk reads."""
        st = self._staging
        if st is None or not st.deferred:
            return
        waiting, st.deferred = st.deferred, []
        for j, chunk in waiting:
            st.pending -= 1
            if self._live(st):
                self._start_load(st, j, chunk)
        self._cond.notify_all()

    def _disk_read_done(self, read: _Read, result: TransferResult) -> None:
        st, j, spec = read.st, read.j, read.spec
        with self._cond:
            if read.dropped:
                return   # its slot went back when it was dropped
            st.reads.remove(read)
            self.manager.complete_load(spec.chunk, result.ok)
            host = None
            if not result.ok:
                self._read_failed(st, spec.chunk, result)
            else:
                self._c["disk_read_bytes"] += result.nbytes
                self._c["disk_read_s"] += result.seconds
                if self._live(st):   # keep it pinned as a host load for the dequantisation
                    host = self.manager.prepare_load(spec.chunk)
                else:
                    self._c["late"] += 1
            if host is None:
                st.pending -= 1
                self._retry_deferred()
                self._cond.notify_all()
                return
        self.stager.submit(self._dequant_job(st, j, host))

    def _read_failed(self, st: _Staging, chunk: ChunkId, result: TransferResult) -> None:
        """A disk read or dequantisation failed: counted, reported, and a miss (called under the lock)."""
        self._c["failed_reads"] += 1
        if isinstance(result.error, CorruptBlockError):
            self._c["corrupt_blocks"] += 1
        self._report(result)
        st.failed.add(chunk)

    def _dequant_job(self, st: _Staging, j: int, spec: LoadSpec) -> Job:
        def run() -> int:
            with self._cond:
                if not self._live(st):
                    return 0   # superseded before it started: nothing written
            self.copier.stage(self.pool.slot(spec.slot), self.fmt, self._views(st.bank, j), st.marker)
            return self.fmt.nbytes
        return Job("stage", spec.chunk, run, partial(self._dequant_done, st, j, spec))

    def _dequant_done(self, st: _Staging, j: int, spec: LoadSpec, result: TransferResult) -> None:
        with self._cond:
            st.pending -= 1
            if result.ok and result.nbytes == 0:
                self.manager.cancel_load(spec.chunk)
                self._c["late"] += 1
            else:
                self.manager.complete_load(spec.chunk, result.ok)
                if not result.ok:
                    self._read_failed(st, spec.chunk, result)
                else:
                    self._c["host_read_bytes"] += result.nbytes
                    self._c["stage_s"] += result.seconds
                    self._c["device_stage_bytes" if self.stage_on == self.device else "host_stage_bytes"] += \
                        self._stage_bytes
                    if self._live(st):
                        st.ready[spec.chunk] = j
                    else:
                        self._c["late"] += 1
            self._retry_deferred()
            self._cond.notify_all()

    def take_staged(self, timeout: float | None = 0) -> StagedSet:
        """The set staged by the last ``stage``: hits ready now (after at most ``timeout`` s)."""
        with self._cond:
            self._reap_stores()
            st = self._staging
            if st is None:
                return StagedSet(0, (), {}, (), ())
            if st.taken is not None:
                return st.taken
            if timeout is None or timeout > 0:
                self._cond.wait_for(lambda: st.pending == 0, timeout)
            kv = {c: self._views(st.bank, st.ready[c]) for c in st.ids if c in st.ready}
            misses = tuple(c for c in st.ids if c not in kv)
            st.taken = StagedSet(st.gen, st.ids, kv, misses,
                                 tuple(c for c in misses if c in st.failed))
            self._c["hits"] += len(kv)
            self._c["misses"] += len(misses)
            return st.taken

    def load_now(self, chunk_ids, timeout: float | None = None) -> StagedSet:
        """Synchronous load of ``chunk_ids`` (waits for the drive, at most ``timeout`` s: what has not
        arrived by then is a miss): the on-demand / sync modes."""
        self.stage(chunk_ids)
        return self.take_staged(timeout=timeout)

    def oldest_write_s(self) -> float:
        """Seconds the oldest write-back still in flight has been queued or running (0 when none)."""
        with self._cond:
            started = min(self._write_started.values(), default=None)
        return 0.0 if started is None else time.monotonic() - started

    # ---- reporting ------------------------------------------------------------------------------

    def _report(self, result: TransferResult) -> None:
        """Record a background failure (called under the lock)."""
        self._errors.append(result)
        self._c["errors"] += 1
        log.warning("KV store: %s", result.describe())

    def _report_locked(self, result: TransferResult) -> None:
        with self._cond:
            self._report(result)

    def take_events(self) -> list:
        """The manager's placement decisions since the last call (for the log)."""
        with self._cond:
            return self.manager.take_events()

    def errors(self) -> list[TransferResult]:
        with self._cond:
            return list(self._errors)

    def counters(self) -> dict:
        with self._cond:
            c = dict(self._c)
            c.update(self.manager.stats())
            c.update({k: v for k, v in vars(self.manager.counters).items() if k != "extra"})
            used = c["pool_used_slots"] * self.pool.slot_bytes
            c.update(pool_bytes=self.pool.nbytes, pool_used_bytes=used, staging_bank_bytes=self._banks.nbytes,
                     staging_device_bytes=self._banks.nbytes if self.stage_on == self.device else 0,
                     pool_free_bytes=self.pool.nbytes - used,
                     writeback_queue_depth=self.manager.writeback_pending(),
                     disk_blocks=self.disk.blocks if self.disk else 0,
                     disk_bytes=self.disk.used_bytes if self.disk else 0,
                     disk_alloc_bytes=self.disk.allocated_bytes if self.disk else 0,
                     disk_retired_blocks=self.disk.retired if self.disk else 0,
                     disk_early_releases=self.disk.early_releases if self.disk else 0,
                     dropped_chunks=len(self.dropped),
                     disk_io_mode=self.disk.io_mode if self.disk else "none",
                     disk_failed=self._disk_error is not None,
                     writer_yield_timeouts=self.io.gate.yield_timeouts)
            return c

    # ---- shutdown -------------------------------------------------------------------------------

    def close(self, persist_all: bool = False, timeout: float = 120.0, abort: bool = False) -> None:
        """Finish write-back (every dirty block with ``persist_all``), write the index, unlock.

        ``abort`` (a second Ctrl-C): wait for nothing the drive holds — no write-back drain, threads
        given ``ABORT_JOIN_S``, the drive's index left as the last save point made it durable. An
        interrupt (KeyboardInterrupt) during the drain turns the close into an abort."""
        if self._closed:
            return
        self._closed = True
        try:
            if not abort:
                self._drain(persist_all, timeout)
        except BaseException:
            self._shut(ABORT_JOIN_S, abort=True)
            raise
        self._shut(ABORT_JOIN_S if abort else timeout, abort)

    def _drain(self, persist_all: bool, timeout: float) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)   # every put's copy to its pinned slot is done
        with self._cond:
            self._reap_stores()
            if self._staging is not None:
                self._drop_queued_reads(self._staging)   # nobody will take them
            self._persist_all = persist_all
            self._kick_writeback()
            self._cond.wait_for(lambda: self.manager.writeback_pending() == 0, timeout)

    def _shut(self, join_s: float, abort: bool) -> None:
        """Stop the threads; close the drive and the pool unless a thread still uses them (a stuck
        drive: the process's exit closes them, and the spill lock goes with it)."""
        with self._cond:
            if self._staging is not None:
                self._drop_queued_reads(self._staging)
        stopped = [self.stager.stop(join_s), self.io.stop(join_s)]
        if not all(stopped):
            if abort:
                log.warning("KV store: aborted while the drive was busy; the spill directory keeps its "
                            "last durable index")
                return
            log.warning("KV store: a transfer thread was still busy at close; left it running")
            if self.disk is not None:
                try:
                    self.disk.flush_index()   # the blocks finished so far stay findable
                except (OSError, DiskFullError) as exc:
                    log.warning("%s: index not rewritten at close (%s)", self.disk.dir, exc)
            return
        try:
            if self.disk is not None:
                self.disk.close(write_index=not abort)
        finally:
            for base in self.bases:
                base.close()
            self.pool.close()

    def discard(self) -> None:
        """Remove the spill files this store created (its session generated nothing; after ``close``)."""
        if self.disk is not None:
            self.disk.discard()

    def __enter__(self) -> "KVStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
