"""The planner against our own measured runs (docs/memory.md, "The planner against measured runs").

Two sets, neither used to tune the model:

* ``RUNS_2CPU_XEON``: 14 ``worldpager bench store`` runs (synthetic model, yaw trajectory, 8-chunk pool,
  28 chunks, drive about 1.1 GB/s unthrottled) recorded before write-back became urgent (the writer then
  always stepped aside for reads): the timeline replays them with ``urgent_writeback=False``. The runs
  read from the drive from chunk 14 on, in 9 of the 28 chunks.
* ``HELD_OUT``: 8 ``worldpager generate --model synthetic --kv-scale 0.034 --kv-bits 16`` runs (30 chunks,
  yaw trajectory) with the current store (urgent write-back), each a different pool, drive cap, chunk
  time and store mode, recorded on the shared 2-vCPU AMD EPYC machine (commands in docs/memory.md; 16-bit KV
  keeps the CPU's quantiser out of the chunk time). Each row holds what the planner is given — the run's chunk time without stalls (P50 of
  ``wall_ms − stall_ms``), the process baseline of its log header, the first chunk that read from the
  drive and the chunks read per chunk from there on (the trajectory's doing) — and what it must predict:
  the first eviction, whether any chunk stalled, and the stall P50 / P99 from the first read on.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from engine.planner import model as planner
from engine.config import synthetic_model_config

MEASURED_DRIVE_GBPS = 1.1   # `worldpager bench disk` on the same directory
GiB = planner.GiB

# (store, kv_scale, emulated GB/s or None, measured chunk s, measured stall P99 ms)
RUNS_2CPU_XEON = [
    ("prefetch", 1.0, None, 2.515, 0.0), ("prefetch", 1.0, 0.25, 2.551, 0.0),
    ("on-demand", 1.0, None, 3.269, 863.6), ("on-demand", 1.0, 0.25, 3.050, 1078.3),
    ("prefetch", 0.2, None, 1.478, 0.0), ("prefetch", 0.2, 0.2, 1.504, 0.0),
    ("prefetch", 0.2, 0.1, 1.524, 0.0), ("prefetch", 0.2, 0.05, 1.515, 0.0),
    pytest.param("prefetch", 0.2, 0.02, 1.489, 0.0, marks=pytest.mark.xfail(strict=True, reason=(
        "the one miss: the timeline's write-back falls 2 writes behind by chunk 23 of 28 (steady-state "
        "excess 218 ms a chunk), the run never waited"))),
    ("on-demand", 0.2, None, 1.546, 161.0), ("on-demand", 0.2, 0.2, 1.552, 214.3),
    ("on-demand", 0.2, 0.1, 1.545, 329.2), ("on-demand", 0.2, 0.05, 1.613, 556.3),
    ("on-demand", 0.2, 0.02, 1.568, 1184.2),
]


def predicted_xeon(store, kv_scale, gbps, chunk_s):
    rate = (gbps or MEASURED_DRIVE_GBPS) * planner.GB
    return planner.plan(synthetic_model_config(kv_scale).shape(), 28, planner.Budgets(host=0, pool_slots=8), store=store,
                        drive=planner.DriveRates(rate, rate), chunk_s=chunk_s, reads_from=14,
                        disk_reads_per_chunk=9 / 14, urgent_writeback=False)


@pytest.mark.parametrize("store, kv_scale, gbps, chunk_s, stall_p99", RUNS_2CPU_XEON)
def test_earlier_runs_zero_vs_nonzero_stall(store, kv_scale, gbps, chunk_s, stall_p99):
    assert predicted_xeon(store, kv_scale, gbps, chunk_s).stall_predicted == (stall_p99 > 0.5)


def test_earlier_runs_first_eviction():
    # Measured in every run above: the pool (8 slots) was full after chunk 7, so chunk 8 was the first
    # to evict a block.
    for kv_scale in (1.0, 0.2):
        assert predicted_xeon("prefetch", kv_scale, None, 1.5).session_spill_chunk == 8


@dataclass(frozen=True)
class Run:
    """One held-out ``generate --model synthetic --kv-bits 16`` run: the flags, what the planner is given,
    what was measured (stalls over the chunks from the first eviction on)."""

    name: str
    store: str
    kv_scale: float
    chunk_ms: float
    drive_bw: str | None
    pool: tuple[str, float]           # ("slots", N) = --pool-slots N, ("host_gib", G) = --host-mem G
    baseline: int                     # host_baseline_bytes of the log header
    chunks: int
    chunk_s: float                    # P50 of wall_ms - stall_ms
    first_read: int | None            # first chunk that read from the drive
    reads_per_chunk: float            # chunks read from the drive per chunk from first_read on
    first_eviction: int               # first chunk stored into a full pool
    stalled_chunks: int
    stall_p50_ms: float
    stall_p99_ms: float

    def plan(self) -> planner.Plan:
        model = synthetic_model_config(self.kv_scale).shape()
        kind, value = self.pool
        budgets = planner.Budgets(host=int(value * GiB) if kind == "host_gib" else 0, host_baseline=self.baseline,
                                  pool_slots=int(value) if kind == "slots" else None,
                                  host_staging=planner.cpu_staging_bytes(model, self.store, 3))
        drive = planner.cap_rates(AMD_DRIVE, planner.parse_drive_rates(self.drive_bw))
        return planner.plan(model, self.chunks, budgets, bits=16, store=self.store, drive=drive,
                            chunk_s=self.chunk_s, raw_dtype="float32",
                            reads_from=self.chunks if self.first_read is None else self.first_read,
                            disk_reads_per_chunk=self.reads_per_chunk)


HELD_OUT = [
Run("g1", "prefetch", 0.034, 2500, "0.03", ("slots", 6), 452374528, 30, 3.501, 14, 0.688, 6, 0, 0.0, 0.0),
    Run("g2", "prefetch", 0.034, 1000, "0.015", ("slots", 6), 452554752, 30, 2.299, 14, 0.688, 6, 5, 0.0, 1328.0),
    Run("g3", "prefetch", 0.034, 1500, "0.025", ("slots", 8), 452251648, 30, 1.812, 14, 0.75, 8, 0, 0.0, 0.0),
    Run("g4", "prefetch", 0.034, 800, "r=0.2,w=0.02", ("host_gib", 3.2), 452362240, 30, 1.083, None, 0.0, 22, 4,
        0.0, 600.5),
    Run("g5", "on-demand", 0.034, 1000, "0.02", ("slots", 4), 452349952, 30, 1.224, 15, 0.733, 4, 27, 383.7, 2873.7),
    Run("g6", "on-demand", 0.034, 1500, "r=0.05,w=0.012", ("slots", 6), 452464640, 30, 1.743, 15, 0.733, 6, 28,
        1004.7, 3187.7),
    Run("g7", "on-demand", 0.034, 1000, None, ("slots", 8), 452374528, 30, 1.241, 15, 0.667, 8, 27, 49.9, 270.3),
    Run("g8", "prefetch", 0.034, 300, "0.1", ("slots", 16), 452231168, 30, 0.531, 21, 1.0, 16, 0, 0.0, 0.0),
]
MISSES = {"g2": "the one miss: write-back (2.16 s a block at 0.015 GB/s) just fits the median 2.30 s chunk, "
                  "but the run's chunks took 1.6 to 3.6 s and the writer fell three blocks behind by chunk 11"}
# The drive without a cap (a probe of the same directory: read 0.34-0.62, write 0.17-0.31 GB/s, shared).
AMD_DRIVE = planner.DriveRates(0.5 * planner.GB, 0.25 * planner.GB)


@pytest.mark.parametrize("run", HELD_OUT, ids=lambda r: r.name)
def test_held_out_first_eviction_exactly(run):
    assert run.plan().session_spill_chunk == run.first_eviction


@pytest.mark.parametrize("run", [pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=MISSES[r.name]))
                                 if r.name in MISSES else r for r in HELD_OUT], ids=lambda r: r.name)
def test_held_out_zero_vs_nonzero_stall(run):
    assert run.plan().stall_predicted == (run.stalled_chunks > 0)


@pytest.mark.parametrize("run", [r for r in HELD_OUT if r.stalled_chunks and r.name not in MISSES and r.drive_bw],
                         ids=lambda r: r.name)
def test_held_out_stall_durations_where_a_cap_sets_the_drive(run):
    """P50 and P99 within 20 % (+ 100 ms) of the measured ones. Not for the uncapped drive (g7): the
    model has no per-read latency and no cost for copying host-pool hits into the context (50 ms P50)."""
    p = run.plan()
    for predicted, measured in ((p.stall_p50_ms, run.stall_p50_ms), (p.stall_p99_ms, run.stall_p99_ms)):
        assert abs(predicted - measured) <= 0.2 * measured + 100, (predicted, measured)


def test_held_out_the_earlier_model_underestimated_on_demand_waits():
    """What the issue measured: the larger of the read and write overruns misses the write-back that
    on-demand reads wait for (g5, g6: P99 2.9 and 3.2 s)."""
    for run in (r for r in HELD_OUT if r.name in ("g5", "g6")):
        p = run.plan()
        earlier = run.reads_per_chunk * p.slot_bytes / p.drive.read * 1e3   # the synchronous read alone
        assert earlier < 0.5 * run.stall_p99_ms and abs(p.stall_p99_ms - run.stall_p99_ms) < 0.1 * run.stall_p99_ms
