"""The planner against our own measured runs (README, Performance): configurations it was not tuned on.

Each row is a ``worldpager bench store`` run recorded on the 2-vCPU development machine (synthetic model,
yaw trajectory, 8-chunk pool, drive about 1.1 GB/s unthrottled). The planner is given the run's model
size, pool, store mode, emulated drive and the run's measured chunk time; it must classify zero vs
non-zero stall correctly and place the pool's spill point within one chunk of the measured one.
"""
from __future__ import annotations

import pytest

from engine import planner
from engine.config import synthetic_model_config
from engine.kv_format import ChunkFormat

MEASURED_DRIVE_GBPS = 1.1   # `worldpager bench disk` on the same directory
POOL_SLOTS = 8

# (store, kv_scale, emulated GB/s or None, measured chunk s, measured stall P99 ms)
RUNS = [
    ("prefetch", 1.0, None, 2.515, 0.0), ("prefetch", 1.0, 0.25, 2.551, 0.0),
    ("on-demand", 1.0, None, 3.269, 863.6), ("on-demand", 1.0, 0.25, 3.050, 1078.3),
    ("prefetch", 0.2, None, 1.478, 0.0), ("prefetch", 0.2, 0.2, 1.504, 0.0),
    ("prefetch", 0.2, 0.1, 1.524, 0.0), ("prefetch", 0.2, 0.05, 1.515, 0.0),
    ("prefetch", 0.2, 0.02, 1.489, 0.0),
    ("on-demand", 0.2, None, 1.546, 161.0), ("on-demand", 0.2, 0.2, 1.552, 214.3),
    ("on-demand", 0.2, 0.1, 1.545, 329.2), ("on-demand", 0.2, 0.05, 1.613, 556.3),
    ("on-demand", 0.2, 0.02, 1.568, 1184.2),
]


def predicted(store, kv_scale, gbps, chunk_s, chunks=28):
    model = synthetic_model_config(kv_scale)
    slot = ChunkFormat.from_layout(model.kv_layout(), bits=4).slot_bytes
    baseline = int(planner.HOST_BASELINE_GIB * planner.GiB)
    budgets = planner.Budgets(host=baseline + planner.MARGIN_BYTES + POOL_SLOTS * slot, host_baseline=baseline)
    rate = (gbps or MEASURED_DRIVE_GBPS) * planner.GB
    return planner.plan(model, chunks, budgets, bits=4, store=store, drive=planner.DriveRates(rate, rate),
                        chunk_s=chunk_s)


@pytest.mark.parametrize("store, kv_scale, gbps, chunk_s, stall_p99", RUNS)
def test_zero_vs_nonzero_stall_is_classified_correctly(store, kv_scale, gbps, chunk_s, stall_p99):
    p = predicted(store, kv_scale, gbps, chunk_s)
    assert p.stall_predicted == (stall_p99 > 0.5)


def test_spill_point_within_one_chunk_of_the_measured_one():
    # Measured in every run above: the pool (8 slots) was full after chunk 7, so chunk 8 was the first
    # to evict a block (write-back had started at chunk 6, when fewer than 3 slots were reclaimable).
    measured_first_eviction = 8
    for kv_scale in (1.0, 0.2):
        p = predicted("prefetch", kv_scale, None, 1.5)
        assert abs(p.spill_chunk["host-int4"] - measured_first_eviction) <= 1
