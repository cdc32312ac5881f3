"""The experiments of ``worldpager bench quality``, each a set of real sessions on held-out arenas.

Owns what is run and how it is summarised:

* ``revisit``: for every seed and gap, every arm on the same leave-and-return path; the returning
  frames scored against the rendered truth and against the frame generated at the end of the first
  visit of the same pose (PSNR, SSIM). Gaps in ``long_gaps`` run only ``long_arms`` (their sessions
  are the longest).
* ``positions``: the same leave-and-return path once from chunk 0 (below the horizon) and once after a
  still prefix of ``prefix_chunks`` at the same pose, so that leaving and returning happen past the
  model's native horizon, with each position arm.
* ``drift``: one long session per drift arm on a closed leave-and-return path repeated; PSNR of every
  generated latent frame and SSIM of a sample of them, per block of ``block`` chunks.

``summarise`` turns the per-episode scores into the tables: means per arm and gap, retention of each
memory arm with its bootstrap interval (``engine.quality.retention``), the stale-set fallback's cost
(prefetch minus on-demand: the same slots, every desired chunk loaded in time), prefetch minus sync
(sync empties the slots each chunk and attends only the exact set) and the position arms against below the horizon.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from engine.metrics import psnr, ssim
from engine.quality.arms import BELOW, DRIFT_ARMS, POSITION_ARMS, Arm
from engine.quality.episodes import LeaveReturn, leave_and_return
from engine.quality.retention import paired_difference, retention
from engine.quality.session_run import Trace, run_arm

METRICS = ("psnr_truth", "ssim_truth", "psnr_first", "ssim_first", "psnr_first_truth")


@dataclass
class Plan:
    """What one benchmark run does (the CLI's options; ``--quick`` is a small one)."""

    seeds: int = 3
    first_seed: int = 0                      # seeds first_seed .. first_seed + seeds - 1 (runs can be split)
    gaps: tuple[int, ...] = (10, 50, 200)
    arms: tuple[Arm, ...] = ()
    long_gaps: tuple[int, ...] = (200,)
    long_arms: tuple[str, ...] = ("window", "bf16", "int4")
    position_gap: int = 50
    prefix_chunks: int = 100
    position_seeds: int = 3
    drift_chunks: int = 3000
    drift_gap: int = 10
    block: int = 100
    ssim_every: int = 5
    weights: Path | None = None
    position_weights: Path | None = None     # another file for the positions experiment (quick: its horizon moved)
    workdir: Path | None = None

    def arms_for(self, gap: int) -> tuple[Arm, ...]:
        return tuple(a for a in self.arms if gap not in self.long_gaps or a.name in self.long_arms)


@dataclass
class Kept:
    """Frames of one episode kept for the videos and the still: truth and each arm's output."""

    episode: LeaveReturn
    truth: torch.Tensor | None = None
    frames: dict = field(default_factory=dict)


def episode_scores(trace: Trace, ep: LeaveReturn) -> dict:
    """Returning frames against the truth and against the last generated frame of the first visit."""
    back = torch.from_numpy(ep.returning)
    frames, truth = trace.frames[back], trace.truth[back]
    first = trace.frames[int(ep.first_visit[-1])].expand_as(frames)
    return {"psnr_truth": float(psnr(frames, truth).mean()), "ssim_truth": float(ssim(frames, truth).mean()),
            "psnr_first": float(psnr(frames, first).mean()), "ssim_first": float(ssim(frames, first).mean()),
            "psnr_first_truth": float(trace.psnr[ep.first_visit].mean()),   # how good the first visit itself was
            "psnr_all": float(trace.psnr[trace.frames_per_chunk:].mean()), "returning_frames": int(len(back)), **trace.totals}


def revisit(plan: Plan, on_row: Callable[[dict], None] = lambda row: None, keep_gap: int | None = None) -> tuple[list[dict], Kept | None]:
    rows, kept = [], None
    for seed in range(plan.first_seed, plan.first_seed + plan.seeds):
        for gap in plan.gaps:
            ep = leave_and_return(seed, gap)
            keep_this = seed == 0 and gap == keep_gap
            if keep_this:
                kept = Kept(ep)
            for arm in plan.arms_for(gap):
                trace = run_arm(arm, ep.episode, ep.chunks, plan.workdir, weights=plan.weights)
                row = {"experiment": "revisit", "arm": arm.name, "seed": seed, "gap": gap,
                       "arena_seed": ep.arena_seed, "chunks": ep.chunks, **episode_scores(trace, ep)}
                rows.append(row)
                on_row(row)
                if keep_this:
                    kept.truth, kept.frames[arm.name] = trace.truth, trace.frames
    return rows, kept


def positions(plan: Plan, on_row: Callable[[dict], None] = lambda row: None) -> list[dict]:
    rows = []
    for seed in range(plan.first_seed, plan.first_seed + plan.position_seeds):
        runs = [(BELOW, leave_and_return(seed, plan.position_gap))]
        past = leave_and_return(seed, plan.position_gap, plan.prefix_chunks)
        runs += [(arm, past) for arm in POSITION_ARMS]
        for arm, ep in runs:
            weights = plan.weights if arm is BELOW else plan.position_weights or plan.weights
            trace = run_arm(arm, ep.episode, ep.chunks, plan.workdir, weights=weights)
            row = {"experiment": "positions", "arm": arm.name, "seed": seed, "gap": plan.position_gap,
                   "prefix_chunks": ep.prefix_chunks, "arena_seed": ep.arena_seed, "chunks": ep.chunks,
                   "return_chunk": int(ep.returning[0]) // trace.frames_per_chunk, **episode_scores(trace, ep)}
            rows.append(row)
            on_row(row)
    return rows


def drift(plan: Plan, on_row: Callable[[dict], None] = lambda row: None) -> list[dict]:
    ep = leave_and_return(0, plan.drift_gap)
    rows = []
    for arm in DRIFT_ARMS:
        trace = run_arm(arm, ep.episode, plan.drift_chunks, plan.workdir, keep=plan.ssim_every, weights=plan.weights)
        fpc = trace.frames_per_chunk
        for start in range(0, plan.drift_chunks, plan.block):
            lo, hi = max(start, 1) * fpc, min(start + plan.block, plan.drift_chunks) * fpc
            sampled = (trace.ssim_frames >= lo) & (trace.ssim_frames < hi)
            row = {"experiment": "drift", "arm": arm.name, "block_start": start, "chunks": hi // fpc - max(start, 1),
                   "psnr_truth": float(trace.psnr[lo:hi].mean()),
                   "ssim_truth": float(trace.ssim[sampled].mean()) if sampled.any() else float("nan"),
                   "ssim_frames": int(sampled.sum()), **(trace.totals if start == 0 else {})}
            rows.append(row)
            on_row(row)
    return rows


# ---- summaries ------------------------------------------------------------------------------------

def _mean(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if key in r and r[key] == r[key]]
    return float(np.mean(vals)) if vals else float("nan")


def _paired(rows: list[dict], arm: str, ref: str, key: str) -> tuple[list[float], list[float]]:
    by = {(r["seed"], r["gap"], r["arm"]): r[key] for r in rows}
    pairs = [(v, by[(s, g, ref)]) for (s, g, a), v in by.items() if a == arm and (s, g, ref) in by]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def summarise_revisit(rows: list[dict]) -> dict:
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    gaps = sorted({r["gap"] for r in rows})
    table = {arm: {str(g): {m: _mean([r for r in rows if r["arm"] == arm and r["gap"] == g], m) for m in METRICS}
                   for g in gaps if any(r["arm"] == arm and r["gap"] == g for r in rows)} for arm in arms}
    by = {(r["seed"], r["gap"], r["arm"]): r for r in rows}
    keeps = {}
    for arm in arms:
        if arm in ("window",):
            continue
        keys = [(s, g) for (s, g, a) in by if a == arm and (s, g, "bf16") in by and (s, g, "window") in by]
        for metric in ("psnr_truth", "ssim_truth"):
            keeps.setdefault(arm, {})[metric] = retention(
                [by[(s, g, arm)][metric] for s, g in keys], [by[(s, g, "bf16")][metric] for s, g in keys],
                [by[(s, g, "window")][metric] for s, g in keys])
    stale = paired_difference(*_paired(rows, "int4", "on-demand", "psnr_truth"))
    exact = paired_difference(*_paired(rows, "int4", "sync", "psnr_truth"))
    int2 = paired_difference(*_paired(rows, "int2", "bf16", "psnr_truth"))
    int2_ssim = paired_difference(*_paired(rows, "int2", "bf16", "ssim_truth"))
    return {"table": table, "retention": keeps, "stale_fallback_cost_db": stale, "prefetch_minus_sync_db": exact,
            "int2_minus_bf16_db": int2, "int2_minus_bf16_ssim": int2_ssim,
            "stale_slots": int(sum(r["stale"] for r in rows if r["arm"] == "int4")),
            "misses": int(sum(r["misses"] for r in rows if r["arm"] == "int4")),
            "hits": int(sum(r["hits"] for r in rows if r["arm"] == "int4")),
            "disk_bytes_read": int(sum(r["disk_bytes_read"] for r in rows if r["arm"] == "int4"))}


def summarise_positions(rows: list[dict]) -> dict:
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    out = {arm: {m: _mean([r for r in rows if r["arm"] == arm], m) for m in METRICS} for arm in arms}
    by = {(r["seed"], r["arm"]): r["psnr_truth"] for r in rows}
    for arm in arms:
        if arm != BELOW.name:
            seeds = [s for (s, a) in by if a == arm and (s, BELOW.name) in by]
            out[arm]["vs_below_db"] = paired_difference([by[(s, arm)] for s in seeds],
                                                        [by[(s, BELOW.name)] for s in seeds])
    if rows:
        out["return_chunk_past"] = max(r["return_chunk"] for r in rows)
    return out


def summarise_drift(rows: list[dict]) -> dict:
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in rows if "block_start" in r):
        blocks = [r for r in rows if r["arm"] == arm and "block_start" in r]
        out[arm] = {"block_start": [r["block_start"] for r in blocks], "psnr": [r["psnr_truth"] for r in blocks],
                    "ssim": [r["ssim_truth"] for r in blocks]}
    return out
