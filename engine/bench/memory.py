"""Host memory over a long session: per-chunk RSS as medians of blocks of chunks (``bench memory``).

Owns the measure of DESIGN §3's "host memory is constant": after ``warmup`` chunks, the per-chunk
``rss_bytes`` of the session log are cut into consecutive blocks of ``block`` chunks (a last, shorter
block is dropped, unless it is the only one) and each block is reduced to its median, which ignores the
odd chunk caught mid-allocation. ``drift`` is the largest relative distance of a block's median from
the first block's (what a growth shows up as), ``spread`` (max − min) / min over the blocks.

``bench_memory`` runs one synthetic session (real KV bytes, real store, disk tier and threads; no model
math) in a fresh process, as every ``bench store`` run does, so that the allocator starts clean, and
returns the blocks with what the log header says about the allocator and the baseline the host pool was
sized from. Nothing here asserts a size (``tests/memory/test_rss_flat.py`` does, at a small KV size).
"""
from __future__ import annotations

import statistics
from pathlib import Path

from engine.bench.experiments import run_synthetic
from engine.runtime.telemetry import percentile


def rss_blocks(records: list[dict], warmup: int = 20, block: int = 100) -> dict:
    """Block medians of the chunk records' ``rss_bytes`` after ``warmup`` chunks (see the module docstring)."""
    assert warmup >= 0 and block >= 1
    header = next((r for r in records if r.get("type") == "header"), {})
    summary = next((r for r in records if r.get("type") == "summary"), {})
    chunks = [r for r in records if r.get("type") == "chunk"]
    steady = chunks[warmup:]
    rss = [r["rss_bytes"] for r in steady]
    cuts = [rss[i:i + block] for i in range(0, len(rss), block)]
    if len(cuts) > 1 and len(cuts[-1]) < block:
        cuts.pop()
    medians = [statistics.median(c) for c in cuts]
    first = medians[0] if medians else 0
    return {
        "status": summary.get("status"), "chunks": len(chunks), "warmup": warmup, "block": block,
        "blocks": [{"first_chunk": warmup + i * block, "chunks": len(c), "rss_median_bytes": int(m)}
                   for i, (c, m) in enumerate(zip(cuts, medians))],
        "drift": max((abs(m / first - 1) for m in medians), default=0.0) if first else 0.0,
        "spread": (max(medians) - min(medians)) / min(medians) if medians else 0.0,
        "rss_max_bytes": max(rss, default=0), "rss_min_bytes": min(rss, default=0),
        "chunk_ms_p50": percentile([r["wall_ms"] for r in steady], 50),
        "pool_bytes": summary.get("pool_bytes", 0),
        "host_baseline_bytes": header.get("host_baseline_bytes"),
        "allocator": header.get("allocator"),
        "error": summary.get("error"),
    }


def bench_memory(chunks: int, kv_scale: float, spill_root: Path | None, *, pool_slots: int | None = None,
                 host_mem_gib: float | None = None, chunk_ms: float = 0.0, warmup: int = 20, block: int = 100,
                 trajectory: Path | None = None, save_every: int | None = None) -> dict:
    """One synthetic session of ``chunks`` chunks in a fresh process; its RSS blocks (``rss_blocks``).

    The host pool holds ``pool_slots`` chunks, or is sized from ``host_mem_gib`` (the session's rule:
    budget − process − 2 GiB); the disk tier goes under ``spill_root`` (removed afterwards).
    ``save_every``: the session's save points (None: the default, about every 30 s of wall time, so
    how many there are depends on the machine; a number makes the run the same on any machine)."""
    memory = {"store": "prefetch", "pool_slots": pool_slots, "host_mem_gib": host_mem_gib}
    overlay = {"chunks": chunks, "kv_scale": kv_scale, "chunk_ms": chunk_ms, "memory": memory}
    if save_every is not None:
        overlay["save_every"] = save_every
    if trajectory is not None:
        overlay["trajectory"] = str(trajectory)
    return run_synthetic(overlay, spill_root, warmup=warmup, name="memory",
                         reduce=lambda records, w: rss_blocks(records, w, block))
