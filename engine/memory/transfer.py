"""Transfer workers: move bytes between tiers; decide nothing.

Contract. A job is a function that moves bytes and returns how many; a ``Worker`` thread runs jobs in
submission order, times them, and hands a ``TransferResult`` to the job's ``on_done`` — an exception
in the job becomes ``ok=False`` with the exception attached, and an exception in ``on_done`` goes to the
worker's ``on_error`` sink; nothing is swallowed, nothing escapes a thread silently.

Primitives:
  ``DriveIO``        the drive: ``readers`` threads on a read queue, one writer thread on a write queue;
                     reads have priority — the writer yields before every piece while any read is
                     queued or running (bounded by ``max_yield_s`` so a hung read cannot stop
                     write-back forever), except while write-back is urgent (``gate.set_urgent``:
                     a put waits for the slot it frees), so reads never starve write-back.
  ``TokenBucket``    a byte-rate cap; ``reserve(n)`` is pure arithmetic on an injectable clock (it
                     returns the seconds to wait), ``acquire(n)`` sleeps that long.
  ``DriveThrottle``  separate read and write buckets from ``--drive-bw`` (``parse_drive_bw``).
  ``HostCopier``     CPU: quantise straight into a pool slot; dequantise a slot into staging views.
  ``CudaCopier``     GPU: quantise on the device into a scratch block, copy it to the pinned slot on a
                     D2H stream ordered by events (returns the completion event to poll); stage = H2D
                     copy of a slot on its own stream, dequantise there (into pinned host views: one
                     layer at a time through a one-layer device scratch, copied back on that stream),
                     synchronise the event on the worker thread (never on the caller's).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch

from engine.memory import quant
from engine.memory.budget import DriveBandwidth, parse_drive_bw  # noqa: F401 (re-exported)
from engine.memory.types import ChunkId, TransferResult

log = logging.getLogger("worldpager.memory")
MiB = 1 << 20
_STOP = object()
STOP_STARTED_S = 0.2   # a worker whose set-up failed gives its idle threads this long to end


# ---- bandwidth ------------------------------------------------------------------------------------

# DriveBandwidth and parse_drive_bw live in engine.memory.budget (shared with the planner).


class TokenBucket:
    """Rate ``rate`` B/s with ``burst`` B of credit; callers go into debt and wait it off in order."""

    def __init__(self, rate: float, burst: int = 4 * MiB, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        assert rate > 0 and burst > 0
        self.rate, self.burst = float(rate), float(burst)
        self._clock, self._sleep = clock, sleep
        self._tokens = self.burst
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` of credit now; return how long the caller must wait before moving them."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= nbytes
            return max(0.0, -self._tokens / self.rate)

    def acquire(self, nbytes: int) -> float:
        wait = self.reserve(nbytes)
        if wait > 0:
            self._sleep(wait)
        return wait


class DriveThrottle:
    """Separate read and write caps (either may be absent)."""

    def __init__(self, bw: DriveBandwidth, **bucket_kw):
        self.bw = bw
        self.read_bucket = TokenBucket(bw.read, **bucket_kw) if bw.read else None
        self.write_bucket = TokenBucket(bw.write, **bucket_kw) if bw.write else None

    def read(self, nbytes: int) -> None:
        if self.read_bucket is not None:
            self.read_bucket.acquire(nbytes)

    def write(self, nbytes: int) -> None:
        if self.write_bucket is not None:
            self.write_bucket.acquire(nbytes)


# ---- workers --------------------------------------------------------------------------------------

@dataclass
class Job:
    op: str
    chunk: ChunkId
    run: Callable[[], int]                          # moves the bytes, returns how many
    on_done: Callable[[TransferResult], None]


def run_job(job: Job, on_error: Callable[[TransferResult], None]) -> TransferResult:
    """Run one job; its failure becomes a result; a failing ``on_done`` is reported to ``on_error``."""
    t0 = time.perf_counter()
    try:
        result = TransferResult(job.op, job.chunk, True, job.run(), time.perf_counter() - t0)
    except Exception as exc:   # captured: the result carries it to the store
        result = TransferResult(job.op, job.chunk, False, 0, time.perf_counter() - t0, exc)
    try:
        job.on_done(result)
    except Exception as exc:   # a bug in the completion path: report it, keep the worker alive
        log.error("completion of %s raised %r", result.describe(), exc)
        on_error(TransferResult(job.op, job.chunk, False, result.nbytes, result.seconds, exc))
    return result


class Worker:
    """Daemon threads draining one FIFO queue of jobs."""

    def __init__(self, name: str, on_error: Callable[[TransferResult], None], threads: int = 1,
                 q: queue.Queue | None = None, before: Callable[[], None] | None = None):
        self.queue: queue.Queue = q if q is not None else queue.Queue()
        self._on_error = on_error
        self._before = before
        threads_ = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True) for i in range(threads)]
        self._threads: list[threading.Thread] = []
        try:
            for t in threads_:
                t.start()   # "can't start new thread" under a memory limit
                self._threads.append(t)
        except BaseException:   # the ones started stop again: no half-made worker left running
            self.stop(STOP_STARTED_S)
            raise

    def submit(self, job: Job) -> None:
        self.queue.put(job)

    def _loop(self) -> None:
        # One intra-op thread per worker (torch's thread count is per calling thread): a worker's
        # copies and dequantisation running on the model's OpenMP team would make every parallel
        # region of the model's forward wait at its barrier for a preempted thread (measured on
        # 2 cores: the arena model's forwards 55.6 -> 44.5 ms a chunk).
        torch.set_num_threads(1)
        if self._before is not None:
            self._before()
        while (job := self.queue.get()) is not _STOP:
            run_job(job, self._on_error)

    def stop(self, timeout: float = 30.0) -> bool:
        """Finish queued jobs, then stop; False if a thread is still stuck after ``timeout``."""
        for _ in self._threads:
            self.queue.put(_STOP)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)


class ReadGate:
    """Counts reads queued or running so the writer can step aside for them, unless write-back is
    urgent. ``yield_timeouts`` counts pieces for which the writer waited the whole ``max_yield_s``."""

    def __init__(self, max_yield_s: float = 1.0):
        self.max_yield_s = max_yield_s
        self._reads = 0
        self._urgent = False
        self.yield_timeouts = 0
        self._cond = threading.Condition()

    def set_urgent(self, urgent: bool) -> None:
        """Urgent write-back does not step aside (a waiting writer goes on at once)."""
        with self._cond:
            if urgent and not self._urgent:
                self._cond.notify_all()
            self._urgent = urgent

    def read_queued(self) -> None:
        with self._cond:
            self._reads += 1

    def read_done(self) -> None:
        with self._cond:
            self._reads -= 1
            if self._reads == 0:
                self._cond.notify_all()

    def wait_reads_idle(self) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._reads == 0 or self._urgent, self.max_yield_s):
                self.yield_timeouts += 1

    @property
    def reads(self) -> int:
        return self._reads


class DriveIO:
    """The drive's threads: reads (priority) and one write-back writer."""

    def __init__(self, on_error: Callable[[TransferResult], None], readers: int = 2,
                 max_yield_s: float = 1.0):
        self.gate = ReadGate(max_yield_s)
        self.reader = Worker("wp-read", on_error, threads=readers)
        try:
            self.writer = Worker("wp-write", on_error)
        except BaseException:
            self.reader.stop(STOP_STARTED_S)
            raise

    def submit_read(self, job: Job) -> None:
        self.gate.read_queued()
        inner = job.on_done

        def on_done(result: TransferResult) -> None:
            self.gate.read_done()
            inner(result)
        self.reader.submit(Job(job.op, job.chunk, job.run, on_done))

    def submit_write(self, job: Job) -> None:
        self.writer.submit(job)

    def write_pace(self, bucket_pace: Callable[[int], None]) -> Callable[[int], None]:
        """Pace for each written piece: step aside for reads, then pay the write bucket."""
        def pace(nbytes: int) -> None:
            self.gate.wait_reads_idle()
            bucket_pace(nbytes)
        return pace

    def stop(self, timeout: float = 30.0) -> bool:
        ok_w = self.writer.stop(timeout)
        return self.reader.stop(timeout) and ok_w


# ---- host <-> device ------------------------------------------------------------------------------

class HostCopier:
    """No GPU: the pool slot is written and read directly on the calling thread."""

    def store(self, kv, fmt, slot: torch.Tensor):
        quant.quantize_chunk_into(kv, fmt, slot)
        return None   # complete now

    def stage(self, slot: torch.Tensor, fmt, out, after=None) -> None:
        quant.dequantize_chunk_into(slot, fmt, out)

    def bank_free_marker(self):
        return None   # CPU: the caller's copies are done when it returns


class CudaCopier:
    """Streams, events and device scratch blocks for pinned-pool <-> device moves."""

    def __init__(self, device: torch.device, slot_bytes: int):
        self.device = device
        self.d2h = torch.cuda.Stream(device)
        self.h2d = torch.cuda.Stream(device)
        self._put_scratch = torch.empty(slot_bytes, dtype=torch.uint8, device=device)   # [slot]
        self._stage_scratch = torch.empty(slot_bytes, dtype=torch.uint8, device=device)  # [slot]
        self._put_free: torch.cuda.Event | None = None   # the last D2H copy out of _put_scratch
        self._layer_scratch: torch.Tensor | None = None  # one layer's K and V, staged for host banks

    def store(self, kv, fmt, slot: torch.Tensor) -> torch.cuda.Event:
        """Quantise on the caller's stream, copy to the pinned slot on the D2H stream; poll the event."""
        compute = torch.cuda.current_stream(self.device)
        if self._put_free is not None:
            compute.wait_event(self._put_free)       # the scratch block is still being copied out
        quant.quantize_chunk_into(kv, fmt, self._put_scratch)
        quantised = torch.cuda.Event()
        quantised.record(compute)
        self.d2h.wait_event(quantised)
        with torch.cuda.stream(self.d2h):
            slot.copy_(self._put_scratch, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.d2h)
        self._put_free = done
        return done

    def bank_free_marker(self) -> torch.cuda.Event:
        """Recorded on the caller's stream when a staging bank is re-used: its reads are queued before."""
        marker = torch.cuda.Event()
        marker.record(torch.cuda.current_stream(self.device))
        return marker

    def stage(self, slot: torch.Tensor, fmt, out, after: torch.cuda.Event | None = None) -> None:
        """On a worker thread: H2D + dequantise on the H2D stream; wait for it here, not in the loop.

        Views ``out`` in (pinned) host memory (``--kv-paging layer``'s staging banks): each layer is
        dequantised by the same device kernel into a one-layer device scratch and copied back on the same
        stream (so the next layer overwrites the scratch only after), the same values as on the device."""
        with torch.cuda.device(self.device), torch.cuda.stream(self.h2d):
            if after is not None:
                self.h2d.wait_event(after)   # the caller's copies out of this bank come first
            self._stage_scratch.copy_(slot, non_blocking=True)
            if out[0][0].device.type == "cuda":
                quant.dequantize_chunk_into(self._stage_scratch, fmt, out)
            else:
                self._stage_to_host(fmt, out)
            done = torch.cuda.Event()
            done.record(self.h2d)
        done.synchronize()

    def _stage_to_host(self, fmt, out) -> None:
        k0 = out[0][0]
        if self._layer_scratch is None or self._layer_scratch.dtype != k0.dtype:
            self._layer_scratch = torch.empty((2, *k0.shape), dtype=k0.dtype, device=self.device)
        dequantize_through(self._stage_scratch, fmt, out, self._layer_scratch)


def dequantize_through(block: torch.Tensor, fmt, out, scratch: torch.Tensor) -> None:
    """Dequantise ``block`` into the per-layer views ``out`` (elsewhere, e.g. pinned host memory) one
    layer at a time through ``scratch`` ``[k|v, 1, T, H, D]`` on the block's device: each layer computed
    there by the same kernel as a whole-chunk dequantisation, then copied out (asynchronously on a
    GPU; the next layer's kernel is ordered after the copy on the same stream)."""
    k_dev, v_dev = scratch[0], scratch[1]
    for layer, (k, v) in enumerate(out):
        quant.dequantize_layer_into(block, fmt, layer, k_dev, v_dev)
        k.copy_(k_dev, non_blocking=True)
        v.copy_(v_dev, non_blocking=True)
