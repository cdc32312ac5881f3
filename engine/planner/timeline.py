"""A chunk-by-chunk timeline of the store's drive traffic: when the loop waits on write-back and reads.

Contract. ``timeline(inputs)`` replays, in arithmetic only (no threads, no clocks, no torch), what the
store does with one drive over a session of ``chunks`` chunks, and returns each chunk's stall. It
models the code, not an ideal drive:

  pool       ``slots`` slots; write-back starts at chunk ``slots − low_water`` (reclaimable space below
             ``low_water`` chunks) and from then on every put queues one block. A put waits while
             ``low_water`` writes are outstanding (queued or running): the pool has no clean slot then
             (``engine.memory.manager``: reclaimable = free + clean + writes in flight >= low_water).
  reads      ``reads_per_chunk`` chunks (an accumulator spreads a fraction over chunks) are read for
             each chunk from ``reads_from`` on, submitted when the chunk starts; the readers share one
             token bucket, so they move bytes one after the other. A read needs a clean slot: with none
             (``low_water`` writes outstanding) it starts when the next write completes.
  writer     one thread, blocks in pieces (8 MiB, ``engine.memory.disk``); before each piece it steps
             aside while any read is queued or running (at most ``max_yield_s`` per piece) — unless
             write-back is urgent (``urgent_writeback``: a put waits, or the pool has no clean slot;
             ``ReadGate.set_urgent``). A piece already started runs on beside a read (the two buckets
             are separate).
  buckets    ``rate`` B/s with ``burst`` bytes of credit gathered while idle (``TokenBucket``); a
             direction without a rate moves its bytes at once (latency is not modelled).
  loop       a chunk lasts ``chunk_s`` (its wall time without stalls; ``chunk_times`` replays measured
             ones chunk by chunk); on-demand (``sync_reads``) first
             waits for its reads and ``stage_s`` of dequantisation per read chunk; the put comes at the
             chunk's end and waits as above. Stall = read wait + dequantisation + put wait.

The pieces of a write and of a read are paced exactly as ``TokenBucket.reserve`` paces them (callers go
into debt and wait it off in order).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

PIECE_BYTES = 8 << 20        # mirrors engine.memory.disk.DiskTier's piece_bytes (a unit test keeps them equal)
LOW_WATER = 3                # mirrors KVStore's low_water (the manager's write-back threshold)
MAX_YIELD_S = 1.0            # mirrors DriveIO's max_yield_s


class Bucket:
    """``TokenBucket`` in arithmetic: ``reserve(now, n)`` returns when the n bytes may move."""

    def __init__(self, rate: float | None, burst: int):
        self.rate, self.burst = rate, float(burst)
        self.tokens, self.last = float(burst), 0.0

    def reserve(self, now: float, nbytes: int) -> float:
        if self.rate is None:
            return now
        now = max(now, self.last)
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= nbytes
        return now + max(0.0, -self.tokens / self.rate)


def pieces(nbytes: int, piece: int = PIECE_BYTES) -> list[int]:
    return [min(piece, nbytes - i) for i in range(0, nbytes, piece)]


@dataclass(frozen=True)
class TimelineInputs:
    chunks: int
    slots: int
    block_bytes: int
    chunk_s: float
    read_rate: float | None
    write_rate: float | None
    burst: int
    reads_per_chunk: float = 1.0
    reads_from: int | None = None            # None: the first chunk after the pool spills
    sync_reads: bool = False                 # on-demand: the loop waits for its reads
    stage_s: float = 0.0                     # on-demand: dequantising one read chunk
    urgent_writeback: bool = True            # the writer does not step aside while write-back is urgent
    chunk_times: tuple[float, ...] = ()      # per-chunk wall times without stalls (a replay); else chunk_s
    low_water: int = LOW_WATER
    max_yield_s: float = MAX_YIELD_S


@dataclass
class _Drive:
    """The writer's queue and the reads' intervals, advanced in time order."""

    inp: TimelineInputs
    reads: Bucket
    writes: Bucket
    read_busy: list[tuple[float, float]] = field(default_factory=list)   # (submitted, landed)
    pins: list[tuple[float, float]] = field(default_factory=list)        # a read's slot: (from, until)
    queue: list[int] = field(default_factory=list)                        # pieces left per queued write
    done_at: list[float] = field(default_factory=list)                    # completion of each write (sorted)
    writer_t: float = 0.0                                                 # when the writer is free
    urgent: object = None                                                 # (time) -> write-back is urgent

    def __post_init__(self) -> None:
        self.sizes = pieces(self.inp.block_bytes)                         # one block's pieces, in order

    def completed(self, now: float) -> int:
        return bisect.bisect_right(self.done_at, now)

    def pinned(self, now: float) -> int:
        return sum(1 for start, until in self.pins if start <= now < until)

    def reads_idle(self, now: float) -> float:
        """When the reads queued or running at ``now`` are all done (``now`` if none)."""
        return max((done for start, done in self.read_busy if start <= now < done), default=now)

    def read(self, now: float, nbytes: int) -> float:
        """A chunk's read submitted at ``now``; returns when it has landed."""
        horizon = min(now, self.writer_t)      # nothing asks about reads before this any more
        self.read_busy = [(start, done) for start, done in self.read_busy if done > horizon]
        self.pins = [(start, until) for start, until in self.pins if until > horizon]
        t = max([now] + [done for _, done in self.read_busy])   # the readers share one bucket
        for piece in (self.sizes if nbytes == self.inp.block_bytes else pieces(nbytes)):
            t = self.reads.reserve(t, piece)
        self.read_busy.append((now, t))
        self.pins.append((now, t + self.inp.stage_s))           # pinned until dequantised
        return t

    def run_writer(self, until: float, put_waiting: bool = False) -> None:
        """Start every piece the writer would start before ``until``."""
        while self.queue and self.writer_t < until:
            t = self.writer_t
            if not (self.inp.urgent_writeback and (put_waiting or self.urgent(t))):
                t = min(self.reads_idle(t), t + self.inp.max_yield_s)
            self.writer_t = self.writes.reserve(t, self.sizes[len(self.sizes) - self.queue[0]])
            self.queue[0] -= 1
            if self.queue[0] == 0:
                self.queue.pop(0)
                self.done_at.append(self.writer_t)

    def enqueue(self, now: float) -> None:
        if not self.queue:
            self.writer_t = max(self.writer_t, now)
        self.queue.append(len(self.sizes))

    def next_event(self, now: float, put_waiting: bool) -> float | None:
        """The next time after ``now`` a slot may come clean: a write completes or a read's pin ends."""
        while self.queue and not any(t > now for t in self.done_at[-1:]):
            self.run_writer(self.writer_t + 1e-9, put_waiting)
        later = [t for t in self.done_at[self.completed(now):self.completed(now) + 1]]
        later += [until for start, until in self.pins if start <= now < until]
        return min(later, default=None)


class _Pool:
    """The manager's arithmetic: clean slots = slots − dirty − pinned; write-back keeps the projection
    (clean + writes in flight) at ``low_water`` while dirty blocks remain."""

    def __init__(self, inp: TimelineInputs, drive: _Drive):
        self.inp, self.drive = inp, drive
        self.puts = 0          # blocks stored
        self.queued = 0        # blocks given to the writer

    def clean(self, now: float) -> int:
        d = self.drive
        return self.inp.slots - (self.puts - d.completed(now)) - d.pinned(now)

    def kick(self, now: float) -> None:
        while (self.inp.slots - self.puts + self.queued - self.drive.pinned(now) < self.inp.low_water
               and self.puts > self.queued):
            self.drive.enqueue(now)
            self.queued += 1

    def wait_clean(self, now: float, put_waiting: bool) -> float:
        """When a clean slot is there (``now`` if it is)."""
        self.drive.run_writer(now, put_waiting)
        while self.clean(now) < 1:
            nxt = self.drive.next_event(now, put_waiting)
            assert nxt is not None, "no slot will come clean"
            now = nxt
            self.drive.run_writer(now, put_waiting)
        return now


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, as ``engine.runtime.telemetry.percentile`` (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(1, math.ceil(q / 100.0 * len(ordered))) - 1])


def timeline(inp: TimelineInputs) -> list[float]:
    """Each chunk's stall in seconds (see the module docstring)."""
    drive = _Drive(inp, Bucket(inp.read_rate, inp.burst), Bucket(inp.write_rate, inp.burst))
    pool = _Pool(inp, drive)
    drive.urgent = lambda t: pool.clean(t) < 1
    reads_from = inp.slots + 1 if inp.reads_from is None else inp.reads_from
    now, owed, stalls = 0.0, 0.0, []
    for chunk in range(inp.chunks):
        start = now
        owed += inp.reads_per_chunk if chunk >= reads_from else 0.0
        n_reads = math.floor(owed + 1e-9)
        owed -= n_reads
        landed = now
        for _ in range(n_reads):
            at = pool.wait_clean(now, put_waiting=False) if not inp.sync_reads else now
            if inp.sync_reads:
                at = now = pool.wait_clean(now, put_waiting=False)
            landed = max(landed, drive.read(at, inp.block_bytes))
        pool.kick(now)
        if inp.sync_reads and n_reads:
            now = landed + n_reads * inp.stage_s
        compute = inp.chunk_times[chunk] if chunk < len(inp.chunk_times) else inp.chunk_s
        now = pool.wait_clean(now + compute, put_waiting=True)
        pool.puts += 1
        pool.kick(now)
        stalls.append(now - start - compute)
    return stalls
