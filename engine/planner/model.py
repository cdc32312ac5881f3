"""The analytical model of the tiered KV memory (DESIGN §7): will a session fit, where does it spill,
will it stall?

Contract. Small pure functions of the model shape, the storage format, the memory budgets, the drive
and the chunk time, and ``plan(...)`` / ``plan_session(cfg, ...)`` that combine them into one frozen
``Plan``. The model shape is an ``engine.facts.layout.ModelShape`` (``planned_model``: MG2's or LingBot's
configuration gives it from torch-free shared ground; the planner imports no model family). No I/O, no clocks, and no torch — neither here nor through any import (a test checks
``sys.modules`` in a fresh interpreter) — so ``worldpager plan`` answers at once on any machine.
Units: bytes are exact integers; GB = 1e9 B (bandwidths, as ``--drive-bw``), GiB = 2**30 B (budgets).

The formulas (t = chunk compute time, default 1.2 s; k = retrieved chunks, 3):

  b, s       bytes of one stored chunk in format f (``ChunkFormat.nbytes``) and the same rounded up to
             4 KiB (``slot_bytes``: what a pool slot and a disk block hold). MG2: bf16 486,604,800 ·
             int8 251,089,920 · int4 129,438,720 · int2 68,613,120 (slot 68,616,192).
  P          host pool = host budget − process baseline (− the CPU staging slots, which a CPU session
             allocates after the pool and counts with the process) − 2 GiB margin
             (``engine.memory.host_pool``); or exactly ``pool_slots`` slots (``--pool-slots``, any
             number ≥ 1, as the session takes it). Without a host budget (what the machine has) a pool
             under the minimum of 8 slots runs with 8, as the session does.
  N_host(f)  = floor(P / s_f)                      chunks the pool holds.
  N_dev      = floor((D − device baseline − B) / b_bf16), B = (w + 1 + k + sink) · b_bf16: the bf16
             buffers every mode keeps on the device (local window of w chunks, current chunk, k
             staging/context slots, sink). Device-tier chunks are bf16 tensors (no slot rounding).
  spill      chunk ids 0, 1, 2, … enter the memory in order and every chunk's KV is kept, so a tier
             holding N chunks first fails to store chunk id N: spill chunk = N. (The session stores
             chunk c at c's own store step, so loop chunk N is the one that fails; under DESIGN §2's
             "store when it leaves the window" the same id N is noticed w chunks later. Either way the
             session generated chunks 0 … N−1 first: video before the wall = frames of N chunks.)
  write      W = s / t                   once the pool is full each new chunk displaces one block.
  read       R = r · s / t               r = ``disk_reads_per_chunk`` (default 1): chunks per chunk the
             prefetcher must bring from the drive (see "prefetch threshold" below).
  shared     one drive: the writer steps aside for reads before every 8 MiB piece (``DriveIO``), so
  drive      reads and write-back take turns; a chunk lasts its compute time t or the drive's busy time
             read_s + write_s, whichever is longer. Each ``--drive-bw`` direction is a token bucket
             that starts a transfer with up to 4 MiB of credit gathered while that direction idled
             (``after_credit_s``; a fixed point, ``drive_load``). Strict turns give the steady-state
             bound ``prefetch_stall_ms`` = read_s + write_s − t; write-back that is *urgent* (a put
             waits, or no clean slot is left) no longer steps aside, so reads and writes then overlap.
  timeline   ``engine.planner.timeline`` replays the session chunk by chunk as the store runs it:
             write-back from chunk N − 3 on (reclaimable space below 3 slots), a put that waits while
             the pool has no clean slot (dirty + pinned by reads), reads that pin a slot until they
             land, the writer's yielding (and its urgency), the buckets' credit. It gives the stall of
             every chunk: ``stall_predicted`` (prefetch, on-demand), ``first_stall_chunk`` and the
             P50 / P99 / max over the chunks from the first eviction (chunk N) on. Reads come from
             ``reads_from`` on (a trajectory's first return to an evicted chunk; default N + 1, the
             earliest; ``chunks`` or more: none), ``disk_reads_per_chunk`` of them per chunk.
  stall      prefetch: reads never stall the loop (a late chunk is a miss); puts wait for write-back.
             on-demand: the synchronous read of the missed bytes plus its dequantisation (``stage_s``;
             ~0 on a GPU) and any write-back it waits for, as soon as the session reads from the drive.
             sync: always (the set is copied synchronously every chunk). Fixed per-read latency is
             not modelled (the paper's uncapped on-demand 60 ms).
  storage    chunks · s (every chunk's KV, all tiers);  disk = max(0, chunks − N_host) · s.
  longest    zero-stall session: unbounded with a disk tier whose bandwidth suffices (or bounded by its
             free space: N_host + free / s); without a disk tier the spill chunk N (the session stops
             there); with a too-slow drive, or on-demand, N + 1 — the first block is evicted at chunk
             N's store step, so chunk N + 1 is the first whose reads may come from the drive
             (conservative: the write-back slack of a few chunks is ignored); sync: w + 1, the first
             chunk with a past chunk to retrieve.

Calibration against the paper (MG2 universal, 32 GiB host, RTX 4090 24 GiB, int4, k = 3, t = 1.2 s):

  host baseline 2.66 GiB. The paper's pool "holds 226 int4 chunks versus 60 bf16 chunks" and stops at
    chunks 226 / 60 — and 492 is the registered prediction for 64 GiB int4 DRAM-only. With spill = N
    and P = budget − baseline − 2 GiB these need  226·s4 ≤ P32 < 227·s4,  60·b16 ≤ P32 < 61·b16,
    492·s4 ≤ P32 + 32 GiB < 493·s4, i.e. P32 ∈ [29,325,623,296, 29,383,286,784) B, i.e.
    baseline ∈ (2.6347, 2.6884] GiB; 2.66 GiB is the middle (P32 = 27.34 GiB → 226.79 int4 slots,
    60.33 bf16 chunks; P64 = 59.34 GiB → 492.24 int4 slots). It stands for the MG2 process's resident
    memory before the pool (CUDA context, libraries, host-side model copies). The 64 GiB run measured
    496, i.e. a baseline about 4 × 129.4 MB smaller in that run. Cross-checks: video before the wall
    = 9 + 59·12 frames = 44.8 s for bf16 (paper: 45 s) and 9 + 225·12 = 2.8 min for int4 (2.8 min).
    (Counting a chunk as stored only w = 1 chunk after it left the window — spill = N + 1 — would
    leave a 106 KB wide feasible baseline interval: not a credible calibration.)
  the whole device (``engine.planner.device``): weights per block and precision, KV per chunk or per layer,
    activations, CUDA context and a reserve that makes MG2's runtime beside its weights the 7.6 GiB below;
    ``check_device_fits`` returns that plan (the plan chooses the weight format and KV paging a session
    leaves unset) or refuses a budget no choice fits in one line.
  device baseline 12.0 GiB. N_dev = 21 with D = 24 GiB and B = (1 + 1 + 3) · b16 = 2.27 GiB needs a
    baseline ∈ (11.764, 12.217] GiB; 12.0 is the middle (21.48 chunks). It stands for the bf16 weights
    (DiT 1.62 B + VAE 0.13 B + CLIP 0.61 B parameters = 4.39 GiB, from ``worldpager inspect``) plus
    ≈ 7.6 GiB of activations, VAE-decode workspace, CUDA context and allocator reserve — a fitted
    figure, not a derived one.
  write-back need s4 / 1.2 s = 0.108 GB/s (paper: ≈ 0.11).
  prefetch threshold (the paper's cap slowed reads: ``--drive-bw r=…``; a cap on both directions of
    one drive needs read + write, 0.216 GB/s). With k = 3 and every retrieved chunk missing the host, 3·s4 / 1.2 s = 0.32 GB/s
    — which would predict stalls at 0.25 GB/s, where the paper measured 0 ms median stall. The paper's
    "prefetch failure near 0.1 GB/s" is one chunk per chunk: s4 / 1.2 s = 0.108 GB/s (consecutive
    retrieval sets along a trajectory share all but about one chunk, and the staging slots keep the
    shared ones), so ``disk_reads_per_chunk`` defaults to 1. The predicted stall at 0.1 GB/s is then
    1.294 − 1.2 = 94 ms (paper P50: 75.9 ms). On-demand: 125 / 501 / 1305 ms at 1.0 / 0.25 / 0.1 GB/s
    (the read's bucket credit; at 0.1 GB/s write-back no longer fits in the chunk) against the paper's
    P50 116 / 454 / 1130 ms.
  storage. The 37.5-min session (3000 chunks at 32 GiB) wrote 334 GiB = (3000 − 226) · s4: the disk
    holds the chunks beyond the pool. "One hour at 64 GiB needs roughly 300–600 GiB" (4801 chunks of
    video at 16 fps) is reproduced as the KV of the whole hour, chunks · s, from int2 (306.8 GiB) to
    int4 (578.8 GiB); the int4 disk share beyond a 64 GiB pool, (4801 − 492) · s4 = 519.5 GiB, also
    falls inside. Read + write at t = 1.2 s is 0.216 GB/s; the paper's "below 0.21 GB/s" holds at the
    long session's measured 1.264 s per chunk (63.2 min / 3000 chunks): 0.205 GB/s.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from engine.config import LINGBOT_MODELS, SessionConfig, session_model_config
from engine.errors import ConfigError
from engine.facts.kv_format import ChunkFormat
from engine.memory.budget import DEFAULT_MARGIN, MIN_SLOTS, DriveBandwidth, parse_drive_bw, staging_of
from engine.facts.layout import ModelShape
from engine.facts.lingbot_models import lingbot_config
from engine.planner.block_shapes import model_weights
from engine.planner.device import DEVICE_RUNTIME_GIB, DeviceInputs, DevicePlan, device_buffer_bytes, device_plan
from engine.planner.timeline import TimelineInputs, percentile, timeline

GB = 1e9
GiB = 1 << 30
# Mirrors engine.memory.host_pool.DEFAULT_MARGIN / MIN_SLOTS (that module imports torch; a unit test
# keeps the two equal).
MARGIN_BYTES = DEFAULT_MARGIN
MIN_POOL_SLOTS = MIN_SLOTS
HOST_BASELINE_GIB = 2.66        # MG2 on CUDA; derivation in the module docstring
DEVICE_BASELINE_GIB = 12.0      # MG2 on a 24 GiB RTX 4090; derivation in the module docstring
WEIGHT_BYTES = 2                # bf16 weights on the device
CHUNK_S = 1.2                   # MG2 chunk compute time on an RTX 4090 (paper §II-B)
DISK_READS_PER_CHUNK = 1.0      # chunks per chunk read from the drive; see "prefetch threshold"
# Mirrors engine.memory.transfer.TokenBucket's default burst (that module imports torch; a unit test keeps
# the two equal): the credit a --drive-bw bucket gathers while its direction is idle.
BUCKET_BURST_BYTES = 4 << 20
STAGE_S = 0.0                   # dequantising one staged chunk on the loop's path (on-demand; a GPU: ~0)
TIERED_STORES = ("prefetch", "on-demand", "sync", "dram-only")   # stores with a host pool
TIMELINE_STORES = ("prefetch", "on-demand")   # the stores whose drive traffic the timeline replays
STALL_EPS_S = 0.5e-3            # a chunk "stalled" above this (as engine.bench.experiments counts them)
FORMAT_BITS = {"bf16": 16, "int8": 8, "int4": 4, "int2": 2}
DISK_STORES = ("prefetch", "on-demand", "sync")   # store modes that have a disk tier


# ---- bytes --------------------------------------------------------------------------------------

def format_name(bits: int) -> str:
    names = {v: k for k, v in FORMAT_BITS.items()}
    if bits not in names:
        raise ConfigError(f"kv_bits must be 2, 4, 8 or 16, got {bits}")
    return names[bits]


def chunk_format(model: ModelShape, fmt: str, raw_dtype: str = "bfloat16") -> ChunkFormat:
    """``raw_dtype``: what ``bf16`` (16 bits, unquantised) stores — the model's dtype (a CPU: float32)."""
    return ChunkFormat.from_layout(model.layout, bits=FORMAT_BITS[fmt], raw_dtype=raw_dtype)


def bytes_per_chunk(model: ModelShape, raw_dtype: str = "bfloat16") -> dict[str, int]:
    """b per format: bytes of one stored chunk (no slot rounding)."""
    return {f: chunk_format(model, f, raw_dtype).nbytes for f in FORMAT_BITS}


def slot_bytes(model: ModelShape, raw_dtype: str = "bfloat16") -> dict[str, int]:
    """s per format: b rounded up to 4 KiB, the size of a pool slot and of a disk block."""
    return {f: chunk_format(model, f, raw_dtype).slot_bytes for f in FORMAT_BITS}


# ---- capacity -----------------------------------------------------------------------------------

def pool_bytes(host_bytes: int, baseline_bytes: int, margin_bytes: int = MARGIN_BYTES) -> int:
    """P = host budget − process baseline − margin (never negative)."""
    return max(0, host_bytes - baseline_bytes - margin_bytes)


def window_chunks(model: ModelShape) -> int:
    """w: chunks (partly) in the local window — as engine.session.memory counts them."""
    return model.layout.window_chunks


def capacity_chunks(space_bytes: int, per_chunk: int) -> int:
    """Chunks of ``per_chunk`` bytes that fit in ``space_bytes`` (= the spill chunk id, see docstring)."""
    return max(0, space_bytes) // per_chunk


def video_seconds(model: ModelShape, chunks: int) -> float:
    """Seconds of video in the first ``chunks`` chunks (9 frames for the first, 12 after)."""
    return model.video_frames_total(chunks) / model.fps if chunks > 0 else 0.0


# ---- bandwidth ----------------------------------------------------------------------------------

# The --drive-bw grammar is the store's own (engine.memory.budget), under the planner's names.
DriveRates = DriveBandwidth
parse_drive_rates = parse_drive_bw


def cap_rates(measured: DriveRates, cap: DriveRates) -> DriveRates:
    """A token-bucket cap on a measured drive: the slower of the two, per direction."""
    def lower(a, b):
        return b if a is None else a if b is None else min(a, b)
    return DriveRates(lower(measured.read, cap.read), lower(measured.write, cap.write))


def writeback_rate(slot: int, chunk_s: float) -> float:
    """W = s / t: B/s the drive must absorb once every new chunk displaces a pool block."""
    return slot / chunk_s


def read_rate(slot: int, chunk_s: float, reads_per_chunk: float) -> float:
    """R = r · s / t: B/s the prefetcher must read when r chunks per chunk miss the host."""
    return reads_per_chunk * slot / chunk_s


def transfer_s(nbytes: float, rate: float | None) -> float:
    """Seconds to move ``nbytes`` at ``rate`` B/s (0 when uncapped: latency is not modelled)."""
    return 0.0 if rate is None or nbytes <= 0 else nbytes / rate


def overrun_s(nbytes: float, rate: float | None, window_s: float) -> float:
    """How far a background transfer overruns the compute window it must hide behind."""
    return max(0.0, transfer_s(nbytes, rate) - window_s)


def after_credit_s(nbytes: float, rate: float | None, idle_s: float, burst: int = BUCKET_BURST_BYTES) -> float:
    """Seconds to move ``nbytes`` through a token bucket that gathered credit (at most ``burst``)
    while its direction was idle for ``idle_s``."""
    if rate is None or nbytes <= 0:
        return 0.0
    return max(0.0, nbytes - min(burst, max(0.0, idle_s) * rate)) / rate


@dataclass(frozen=True)
class DriveLoad:
    """One chunk in the steady state of a session that reads from the drive ("shared drive")."""

    read_s: float       # the chunk's reads from the drive
    write_s: float      # the one block of write-back the chunk causes
    period_s: float     # the chunk's wall time, stalls included

    @property
    def busy_s(self) -> float:
        return self.read_s + self.write_s


def drive_load(read_bytes: float, write_bytes: float, rates: DriveRates, chunk_s: float, *,
               sync_reads: bool, stage_s: float = STAGE_S) -> DriveLoad:
    """Reads and write-back take turns on the one drive (the writer steps aside for reads), so the
    drive is busy read + write per chunk; a chunk lasts its compute time (plus the reads and their
    dequantisation when the loop waits for them: ``sync_reads``, on-demand) or the drive's busy time,
    whichever is longer. Each direction's bucket starts a transfer with the credit it gathered while
    idle — a fixed point, found by iterating from no credit."""
    def period(read_s: float, write_s: float) -> float:
        return max(chunk_s + (read_s + stage_s if sync_reads else 0.0), read_s + write_s)

    read_s, write_s = transfer_s(read_bytes, rates.read), transfer_s(write_bytes, rates.write)
    for _ in range(32):
        t = period(read_s, write_s)
        read_s = after_credit_s(read_bytes, rates.read, t - read_s)
        write_s = after_credit_s(write_bytes, rates.write, t - write_s)
    return DriveLoad(read_s, write_s, period(read_s, write_s))


# ---- the plan -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budgets:
    """Memory budgets in bytes. ``device`` None = unknown (no device-tier figure).

    ``pool_slots``: the exact pool of ``--pool-slots`` (the session's format; ``host`` is then unused).
    ``host_staging``: the staging slots a CPU session allocates after the pool, which the session counts
    with the process baseline when it sizes the pool. ``host_given`` False: the budget is what the
    machine has, and a session whose pool would be under the minimum runs with the minimum instead.
    """

    host: int
    device: int | None = None
    host_baseline: int = int(HOST_BASELINE_GIB * GiB)
    device_baseline: int = int(DEVICE_BASELINE_GIB * GiB)
    margin: int = MARGIN_BYTES
    pool_slots: int | None = None
    host_staging: int = 0
    host_given: bool = True

    @classmethod
    def from_gib(cls, host: float, device: float | None = None, host_baseline: float = HOST_BASELINE_GIB,
                 device_baseline: float = DEVICE_BASELINE_GIB) -> "Budgets":
        """From GiB figures as the flags give them; ConfigError naming the flag for a bad value."""
        for flag, value in (("--host-mem", host), ("--device-mem", device)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag} must be a positive number of GiB, got {value}")
        for flag, value in (("--baseline-gib", host_baseline), ("--device-baseline-gib", device_baseline)):
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{flag} must be a non-negative number of GiB, got {value}")
        return cls(int(host * GiB), None if device is None else int(device * GiB),
                   int(host_baseline * GiB), int(device_baseline * GiB))


def host_pool_bytes(model: ModelShape, budgets: Budgets, fmt: str = "int4", raw_dtype: str = "bfloat16") -> int:
    """The pool: ``pool_slots`` slots of ``fmt``, else budget − (baseline + CPU staging) − margin."""
    if budgets.pool_slots is not None:
        return budgets.pool_slots * slot_bytes(model, raw_dtype)[fmt]
    return pool_bytes(budgets.host, budgets.host_baseline + budgets.host_staging, budgets.margin)


def spill_chunks(model: ModelShape, budgets: Budgets, retrieve_k: int = 3,
                 sink: bool = False, fmt: str = "int4", raw_dtype: str = "bfloat16") -> dict[str, int]:
    """Spill chunk per tier/format: ``device-bf16`` (when the device budget is known), ``host-<f>``
    (``fmt``: the session's format, the one ``pool_slots`` counts in)."""
    out: dict[str, int] = {}
    if budgets.device is not None:
        space = budgets.device - budgets.device_baseline - device_buffer_bytes(model, retrieve_k, sink)
        out["device-bf16"] = capacity_chunks(space, model.kv_bytes_per_chunk(2.0))
    pool = host_pool_bytes(model, budgets, fmt, raw_dtype)
    for f, slot in slot_bytes(model, raw_dtype).items():
        out[f"host-{f}"] = capacity_chunks(pool, slot)
    return out


def device_weight_bytes(model: ModelShape) -> int:
    """The bf16 weights the device holds through the session (``ModelShape.device_params``)."""
    return model.device_params * WEIGHT_BYTES


def device_baseline_bytes(model: ModelShape, runtime_gib: float = DEVICE_RUNTIME_GIB) -> int:
    """The device baseline of ``model``: its bf16 weights plus ``runtime_gib`` (activations, decode
    workspace, CUDA context, allocator reserve: MG2's figure, assumed for every model)."""
    return device_weight_bytes(model) + int(runtime_gib * GiB)


def check_device_fits(model: ModelShape, budgets: Budgets, retrieve_k: int, sink: bool,
                      inputs: DeviceInputs | None = None) -> DevicePlan | None:
    """The whole-device plan (``engine.planner.device``) under ``budgets.device``, with the weight format and
    KV paging ``inputs`` gives (None: chosen); one ``ConfigError`` line naming the least device memory the
    model needs when no choice fits. None when the device budget is unknown and no inputs are given."""
    if budgets.device is None and inputs is None:
        return None
    inputs = dataclasses.replace(inputs or DeviceInputs(), retrieve_k=retrieve_k, sink=sink, budget=budgets.device)
    return device_plan(model, model_weights(model.name), inputs)


def cpu_staging_bytes(model: ModelShape, store: str, retrieve_k: int, hedge_slots: int | None = None,
                      device_cache: int | None = None) -> int:
    """The float32 staging slots (the set's and the hedges') and the device cache a tiered store keeps on
    a CPU (``engine.session.preflight.staging_chunks``, the rule of ``engine.memory.budget.staging_of``)."""
    if store not in TIERED_STORES:
        return 0
    staging = staging_of(retrieve_k, hedge_slots, device_cache, model.kv_bytes_per_chunk(2.0),
                         prefetching=store in ("prefetch", "dram-only"))
    return staging.chunks * model.kv_bytes_per_chunk(4.0)


@dataclass(frozen=True)
class Plan:
    """What the analytical model predicts for one session (see the module docstring for each term)."""

    model: str
    store: str
    format: str                     # the session's storage format (bf16 / int8 / int4 / int2)
    chunks: int
    video_s: float
    chunk_s: float
    retrieve_k: int
    disk_reads_per_chunk: float
    bytes_per_chunk: int            # b of the session's format
    slot_bytes: int                 # s of the session's format
    bytes_by_format: dict[str, int]
    pool_bytes: int
    pool_slots: int                 # slots of the session's format (= its host spill chunk)
    spill_chunk: dict[str, int]     # tier-format -> id of the first chunk that does not fit
    session_spill_chunk: int        # spill chunk of the tier this session fills (device for device-only)
    disk_tier: bool
    uses_disk: bool                 # the session outgrows the pool and has a disk tier
    drive: DriveRates
    disk_free_bytes: int | None
    storage_bytes: int              # chunks · s
    disk_bytes: int                 # (chunks − N_host) · s, when the disk tier is used
    writeback_Bps: float
    read_Bps: float
    read_stall: bool                # the drive's read rate alone is below the prefetch read need
    write_stall: bool               # the drive's write rate alone is below the write-back need
    read_s: float                   # per chunk on the shared drive, steady state (prefetch)
    write_s: float
    stage_s: float                  # dequantising a loaded chunk on the loop's path (on-demand)
    stall_predicted: bool           # some chunk of this session waits on memory (per store mode)
    prefetch_stall_ms: float        # predicted steady-state stall per chunk with prefetch
    on_demand_stall_ms: float       # on-demand: the synchronous read (+ any write-back it waits on)
    reads_from: int | None          # first chunk that reads from the drive (the timeline's assumption)
    stall_p50_ms: float             # the timeline's stalls over the chunks from the first eviction on
    stall_p99_ms: float
    stall_max_ms: float
    first_stall_chunk: int | None   # the timeline's first chunk that waits (None: none in this session)
    stop_chunk: int | None          # where the session stops (pool or drive full), None = it does not
    max_zero_stall_chunks: int | None   # None = unbounded
    device: DevicePlan | None = None    # the whole-device plan (None: no device budget given)

    @property
    def threshold_Bps(self) -> float:
        """The bandwidth of one drive (both directions) below which prefetch stalls: reads and
        write-back take turns on it, so it needs their sum (a drive capped for reads only: ``read_Bps``)."""
        return self.read_Bps + self.writeback_Bps

    def summary(self) -> dict:
        """The JSON form (bandwidths in GB/s, None for uncapped / unbounded)."""
        gbps = (lambda v: None if v is None else round(v / GB, 4))
        return {
            "model": self.model, "store": self.store, "format": self.format, "chunks": self.chunks,
            "video_s": round(self.video_s, 2), "chunk_ms": round(self.chunk_s * 1e3, 1),
            "retrieve_k": self.retrieve_k, "disk_reads_per_chunk": self.disk_reads_per_chunk,
            "bytes_per_chunk": self.bytes_per_chunk, "slot_bytes": self.slot_bytes,
            "bytes_by_format": dict(self.bytes_by_format), "pool_bytes": self.pool_bytes,
            "pool_slots": self.pool_slots,
            "spill_chunk": dict(self.spill_chunk), "session_spill_chunk": self.session_spill_chunk,
            "disk_tier": self.disk_tier, "uses_disk": self.uses_disk,
            "drive_read_gbps": gbps(self.drive.read), "drive_write_gbps": gbps(self.drive.write),
            "disk_free_bytes": self.disk_free_bytes,
            "storage_bytes": self.storage_bytes, "disk_bytes": self.disk_bytes,
            "writeback_gbps": gbps(self.writeback_Bps), "read_gbps": gbps(self.read_Bps),
            "prefetch_threshold_gbps": gbps(self.threshold_Bps),
            "read_ms": round(self.read_s * 1e3, 1), "write_ms": round(self.write_s * 1e3, 1),
            "stage_ms": round(self.stage_s * 1e3, 1),
            "stall_predicted": self.stall_predicted,
            "prefetch_stall_ms": round(self.prefetch_stall_ms, 1),
            "on_demand_stall_ms": round(self.on_demand_stall_ms, 1),
            "reads_from": self.reads_from, "stall_p50_ms": round(self.stall_p50_ms, 1),
            "stall_p99_ms": round(self.stall_p99_ms, 1), "stall_max_ms": round(self.stall_max_ms, 1),
            "first_stall_chunk": self.first_stall_chunk,
            "stop_chunk": self.stop_chunk, "max_zero_stall_chunks": self.max_zero_stall_chunks,
        }


def _stall_predicted(store: str, uses_disk: bool, overrun: bool, retrieve_k: int, chunks: int,
                     window: int) -> bool:
    # ``overrun``: the shared drive is busier than a chunk lasts
    """Whether some chunk of this session waits on memory, per store mode (DESIGN §5)."""
    if store == "sync":            # the whole set is copied synchronously every chunk, disk or not
        return retrieve_k > 0 and chunks > window + 1
    if store == "on-demand":       # every read from the drive is waited for
        return uses_disk
    return uses_disk and overrun   # prefetch: only a drive slower than the chunk's needs


def _longest_zero_stall(store: str, spill: int, disk_tier: bool, overrun: bool, slot: int,
                        disk_free: int | None, retrieve_k: int, window: int) -> int | None:
    """Chunks a session can run without a stall (see "longest" in the module docstring); None = unbounded."""
    if store == "window":
        return None
    if store == "sync" and retrieve_k > 0:
        return window + 1          # chunk w + 1 is the first with a past chunk to retrieve
    if not disk_tier:
        return spill
    if store == "on-demand" or overrun:
        return spill + 1           # the first block leaves the pool at chunk spill's store step
    return None if disk_free is None else spill + disk_free // slot


def _stop_chunk(chunks: int, spill: int, stores_kv: bool, disk_tier: bool, disk_free: int | None,
                slot: int) -> int | None:
    """Where the session stops for capacity: a full pool without a drive, or a full drive."""
    if not stores_kv:
        return None
    limit = spill if not disk_tier else None if disk_free is None else spill + disk_free // slot
    return limit if limit is not None and chunks > limit else None


def _session_tier(store: str, fmt: str, spills: dict[str, int], budgets: Budgets, slot: int) -> int:
    """The spill chunk of the tier the session fills; ConfigError where the session would not start."""
    tier = "device-bf16" if store == "device-only" else f"host-{fmt}"
    if tier not in spills:
        raise ConfigError("device-only planning needs the device budget (--device-mem)")
    short = tier.startswith("host") and store != "window" and spills[tier] < MIN_POOL_SLOTS
    if short and budgets.pool_slots is None:
        if budgets.host_given:
            raise ConfigError(_pool_too_small(budgets, slot, spills[tier]))
        return MIN_POOL_SLOTS      # what the machine has is too little: the session runs the minimum
    return spills[tier]


def plan(model: ModelShape, chunks: int, budgets: Budgets, *, bits: int = 4, retrieve_k: int = 3,
         sink: bool = False, store: str = "prefetch", drive: DriveRates | None = None,
         disk_free_bytes: int | None = None, chunk_s: float = CHUNK_S,
         disk_reads_per_chunk: float = DISK_READS_PER_CHUNK, stage_s: float = STAGE_S,
         reads_from: int | None = None, urgent_writeback: bool = True,
         chunk_times: tuple[float, ...] = (), raw_dtype: str = "bfloat16",
         device: DeviceInputs | None = None) -> Plan:
    """The prediction for ``chunks`` chunks of ``model`` under ``budgets``.

    ``drive`` None means no disk tier (as ``dram-only``); ``DriveRates()`` a disk tier of unknown,
    uncapped bandwidth. ``store`` picks which tier the session fills (``device-only``: the device).
    ``chunk_s`` is a chunk's wall time without stalls; ``stage_s`` the on-demand loop's dequantisation
    of a loaded chunk; ``reads_from`` the first chunk whose retrieval comes back to an evicted chunk (a
    trajectory's revisit; None: the first chunk after the spill, the earliest possible); ``chunk_times``
    replays a run's measured per-chunk times in the drive timeline (``engine.planner.timeline``);
    ``raw_dtype`` is what ``--kv-bits 16`` stores (the model's dtype: float32 on a CPU); ``device`` the
    whole-device plan's inputs (weight format, KV paging, GPU, PCIe; ``engine.planner.device``).
    """
    _check_inputs(chunks, chunk_s, disk_reads_per_chunk, retrieve_k, stage_s)
    whole_device = check_device_fits(model, budgets, retrieve_k, sink, device)
    if reads_from is not None and reads_from < 0:
        raise ConfigError(f"--reads-from must be a chunk >= 0, got {reads_from}")
    fmt = format_name(bits)
    spills = spill_chunks(model, budgets, retrieve_k, sink, fmt, raw_dtype)
    s, w = slot_bytes(model, raw_dtype)[fmt], window_chunks(model)
    spill = _session_tier(store, fmt, spills, budgets, s)
    disk_tier = drive is not None and store in DISK_STORES
    uses_disk, stores_kv = disk_tier and chunks > spill, store != "window"
    rates = drive if drive is not None else DriveRates()
    reads = disk_reads_per_chunk * s
    read_over, write_over = overrun_s(reads, rates.read, chunk_s), overrun_s(s, rates.write, chunk_s)
    ahead = drive_load(reads, s, rates, chunk_s, sync_reads=False)
    waited = drive_load(reads, s, rates, chunk_s, sync_reads=True, stage_s=stage_s)
    overrun = ahead.period_s > chunk_s
    stalls, first_read = _timeline_stalls(store, uses_disk, chunks, spill, s, chunk_s, rates, disk_reads_per_chunk,
                                          stage_s, reads_from, urgent_writeback, chunk_times)
    evicting = [max(0.0, x) for x in stalls[spill:]]   # stalls come only once the pool is full (no -0 from rounding)
    first_stall = next((c for c, x in enumerate(stalls) if x > STALL_EPS_S), None)
    return Plan(
        model=model.name, store=store, format=fmt, chunks=chunks, video_s=video_seconds(model, chunks),
        chunk_s=chunk_s, retrieve_k=retrieve_k, disk_reads_per_chunk=disk_reads_per_chunk,
        bytes_per_chunk=bytes_per_chunk(model, raw_dtype)[fmt], slot_bytes=s,
        bytes_by_format=bytes_per_chunk(model, raw_dtype),
        pool_bytes=spill * s if store in TIERED_STORES else 0, pool_slots=spill if store in TIERED_STORES else 0,
        spill_chunk=spills, session_spill_chunk=spill, disk_tier=disk_tier, uses_disk=uses_disk,
        drive=rates, disk_free_bytes=disk_free_bytes,
        storage_bytes=chunks * s if stores_kv else 0,
        disk_bytes=max(0, chunks - spill) * s if disk_tier else 0,
        writeback_Bps=writeback_rate(s, chunk_s), read_Bps=read_rate(s, chunk_s, disk_reads_per_chunk),
        read_stall=read_over > 0, write_stall=write_over > 0,
        read_s=ahead.read_s, write_s=ahead.write_s, stage_s=stage_s,
        stall_predicted=(first_stall is not None if store in TIMELINE_STORES and uses_disk else
                         _stall_predicted(store, uses_disk, overrun, retrieve_k, chunks, w)),
        reads_from=first_read if stalls else None, first_stall_chunk=first_stall,
        stall_p50_ms=percentile(evicting, 50) * 1e3, stall_p99_ms=percentile(evicting, 99) * 1e3,
        stall_max_ms=max(evicting, default=0.0) * 1e3,
        prefetch_stall_ms=(ahead.period_s - chunk_s) * 1e3 if uses_disk else 0.0,
        on_demand_stall_ms=(waited.period_s - chunk_s) * 1e3 if disk_tier else 0.0,
        stop_chunk=_stop_chunk(chunks, spill, stores_kv, disk_tier, disk_free_bytes, s),
        max_zero_stall_chunks=_longest_zero_stall(store, spill, disk_tier, overrun, s, disk_free_bytes,
                                                  retrieve_k, w),
        device=whole_device,
    )


def _timeline_stalls(store: str, uses_disk: bool, chunks: int, spill: int, slot: int, chunk_s: float,
                     rates: DriveRates, reads: float, stage_s: float, reads_from: int | None,
                     urgent_writeback: bool, chunk_times: tuple[float, ...]) -> tuple[list[float], int]:
    """Per-chunk stalls of the drive timeline (prefetch, on-demand; [] where it does not apply) and the
    first chunk that reads from the drive."""
    first_read = spill + 1 if reads_from is None else reads_from
    if store not in TIMELINE_STORES or not uses_disk:
        return [], first_read
    inputs = TimelineInputs(chunks=chunks, slots=spill, block_bytes=slot, chunk_s=chunk_s,
                            read_rate=rates.read, write_rate=rates.write, burst=BUCKET_BURST_BYTES,
                            reads_per_chunk=reads, reads_from=first_read, sync_reads=store == "on-demand",
                            stage_s=stage_s, urgent_writeback=urgent_writeback,
                            chunk_times=tuple(chunk_times))
    return timeline(inputs), first_read


def _check_inputs(chunks: int, chunk_s: float, reads: float, retrieve_k: int, stage_s: float) -> None:
    checks = [(chunks >= 1, f"chunks must be at least 1, got {chunks}"),
              (math.isfinite(chunk_s) and chunk_s > 0, f"--chunk-ms must be positive, got {chunk_s * 1e3:g}"),
              (math.isfinite(stage_s) and stage_s >= 0, f"--stage-ms must be >= 0, got {stage_s * 1e3:g}"),
              (math.isfinite(reads) and reads >= 0, f"--disk-reads-per-chunk must be >= 0, got {reads}"),
              (retrieve_k >= 0, f"retrieve_k must be >= 0, got {retrieve_k}")]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)


def _pool_too_small(budgets: Budgets, slot: int, n: int) -> str:
    """host_pool.pool_slots's refusal, worded the same: the session would not start."""
    baseline = budgets.host_baseline + budgets.host_staging
    need = baseline + budgets.margin + MIN_POOL_SLOTS * slot
    return (f"--host-mem {budgets.host / GiB:.2f} GiB leaves room for {n} chunk slots of "
            f"{slot / 2**20:.1f} MiB after the process baseline ({baseline / GiB:.2f} GiB) "
            f"and the {budgets.margin / GiB:.0f} GiB margin; need at least {MIN_POOL_SLOTS} "
            f"(--host-mem >= {need / GiB:.2f} GiB)")


def planned_model(cfg: SessionConfig) -> ModelShape:
    """The shape of the session's model as the planner reads it (KV layout, video grid): MG2's
    configurations and the synthetic model, or LingBot-World-Fast's (torch-free shared ground, so its
    full size needs no weights)."""
    if cfg.model in LINGBOT_MODELS:
        return lingbot_config(cfg.model).shape()
    return session_model_config(cfg).shape()


def plan_session(cfg: SessionConfig, budgets: Budgets, *, drive: DriveRates | None,
                 disk_free_bytes: int | None = None, chunk_s: float | None = None,
                 disk_reads_per_chunk: float = DISK_READS_PER_CHUNK, stage_s: float = STAGE_S,
                 reads_from: int | None = None, raw_dtype: str = "bfloat16",
                 device: DeviceInputs | None = None) -> Plan:
    """``plan`` for a resolved session config (model, chunks, kv_bits, k, sink, store mode, the pool's
    ``pool_slots``); ``chunk_s`` None: the config's ``chunk_ms``; ``device`` None: the config's weight
    format and KV paging, as set."""
    mem = cfg.memory
    if device is None:
        device = DeviceInputs(weights=cfg.weights, kv_paging=mem.kv_paging)
    return plan(planned_model(cfg), cfg.chunks, budgets, bits=mem.kv_bits, retrieve_k=mem.retrieve_k,
                sink=mem.sink, store=mem.store, drive=drive, disk_free_bytes=disk_free_bytes,
                chunk_s=cfg.chunk_ms / 1e3 if chunk_s is None else chunk_s,
                disk_reads_per_chunk=disk_reads_per_chunk, stage_s=stage_s, reads_from=reads_from,
                raw_dtype=raw_dtype, device=device)
