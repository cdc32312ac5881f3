"""``worldpager bench quota``: what a disk quota (``--spill-max``) costs on the arena model's revisits.

Owns the experiment: for each quality episode (``engine.quality.revisit_paths``: observed tour, then a
path that leaves and returns, run long so that the memory outgrows its quota), the unbounded session
first, then the same session under quotas of given shares of the unbounded session's disk (the bytes it
wrote to its spill directory). Each row: disk bytes (written; the spill directory's largest allocated
size for a quota), the share of retrievals whose first choice (the policy's best pick had nothing been
dropped) was still kept, the revisit PSNR pooled over frames split into observed and generated revisits
(``engine.quality.revisit_scores``), stalls. A quota below what the session pins at once is refused
by the product (a one-line error): such a row says so instead of scoring.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.errors import ConfigError
from engine.quality.arms import INT4, Arm
from engine.quality.revisit_paths import Shape, revisit_episode
from engine.quality.revisit_scores import class_sums
from engine.quality.revisits import classify
from engine.quality.session_run import run_arm


def quota_arm(share: float, unbounded_bytes: int) -> Arm:
    size = int(unbounded_bytes * share)
    return Arm(f"quota{share:.0%}", f"--spill-max {size}", {"memory": {"spill_max": str(size)}})


def _row(arm: Arm, share: float, ep, trace) -> dict:
    rv = classify(trace.cam, trace.frames_per_chunk, trace.observed_chunks)
    t = trace.totals
    return {"arm": arm.name, "share": share, "seed": ep.seed, "kind": ep.kind, "chunks": ep.chunks,
            "classes": class_sums(trace, rv), "disk_bytes_written": t["disk_bytes_written"],
            "disk_alloc_max": t.get("disk_alloc_max"), "first_choice": t.get("first_choice"),
            "retrievals": t.get("retrievals"), "stall_ms": t.get("stall_ms", 0.0), "hits": t["hits"],
            "misses": t["misses"]}


def run_quota(seeds: list[int], kinds: tuple[str, ...], shape: Shape, shares: tuple[float, ...],
              on_row: Callable[[dict], None] = lambda row: None, workdir=None) -> list[dict]:
    rows = []
    for seed in seeds:
        for kind in kinds:
            ep = revisit_episode(seed, kind, shape)
            trace = run_arm(INT4, ep.episode, ep.chunks, workdir, observe_frames=ep.tour_frames)
            base = _row(Arm("unbounded", "(no --spill-max)"), 0.0, ep, trace)
            rows.append(base)
            on_row(base)
            for share in shares:
                arm = quota_arm(share, base["disk_bytes_written"])
                try:
                    trace = run_arm(arm, ep.episode, ep.chunks, workdir, observe_frames=ep.tour_frames)
                except ConfigError as exc:
                    row = {"arm": arm.name, "share": share, "seed": seed, "kind": kind, "refused": str(exc)}
                else:
                    row = _row(arm, share, ep, trace)
                rows.append(row)
                on_row(row)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """One line per arm: pooled over episodes (frames pooled for PSNR, retrievals for the rate)."""
    out = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm and "refused" not in r]
        refused = sum(1 for r in rows if r["arm"] == arm and "refused" in r)
        line = {"arm": arm, "episodes": len(mine), "refused": refused}
        if mine:
            line["disk_bytes_written"] = int(np.mean([r["disk_bytes_written"] for r in mine]))
            allocs = [r["disk_alloc_max"] for r in mine if r["disk_alloc_max"] is not None]
            line["disk_alloc_max"] = int(max(allocs)) if allocs else None
            tries = sum(r["retrievals"] or 0 for r in mine)
            line["first_choice_rate"] = sum(r["first_choice"] or 0 for r in mine) / tries if tries else 1.0
            for cls in ("observed", "generated"):
                frames = sum(r["classes"][cls]["frames"] for r in mine)
                line[f"psnr_{cls}"] = sum(r["classes"][cls]["psnr"] for r in mine) / frames if frames else None
                line[f"frames_{cls}"] = frames
            line["stall_ms"] = float(sum(r["stall_ms"] for r in mine))
        out.append(line)
    return out
