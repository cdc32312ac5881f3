"""The experiments of ``worldpager bench quality``, each a set of real sessions on held-out arenas.

Owns what is run and how it is summarised:

* ``revisit``: for every seed and kind of episode (``engine.quality.revisit_paths``: an observed tour,
  then a generated exploration that comes back to observed and to generated views), every arm on the
  same path; each generated latent frame classified by the cameras the model used
  (``engine.quality.revisits``) and the classes scored (``engine.quality.revisit_scores``), summarised
  pooled over frames (``engine.quality.pooled``).
* ``positions``: the same leave-and-return path once from chunk 0 (below the horizon) and once after a
  still prefix of ``prefix_chunks`` at the same pose, so that leaving and returning happen past the
  model's native horizon, with each position arm.
* ``drift``: one long session per drift arm on a closed leave-and-return path repeated; PSNR of every
  generated latent frame and SSIM of a sample of them, per block of ``block`` chunks.

``summarise_positions`` and ``summarise_drift`` turn their rows into the tables: means per arm, the
position arms against below the horizon with a bootstrap interval over arenas
(``engine.quality.retention``), PSNR and SSIM per block.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from engine.quality.metrics import psnr, ssim
from engine.quality.arms import BELOW, DRIFT_ARMS, POSITION_ARMS, Arm
from engine.quality.episodes import LeaveReturn, leave_and_return
from engine.quality.retention import paired_difference
from engine.quality.revisit_paths import FULL, KINDS, RevisitEpisode, Shape, revisit_episode
from engine.quality.revisit_scores import class_sums
from engine.quality.revisits import classify
from engine.quality.session_run import Trace, run_arm

METRICS = ("psnr_truth", "ssim_truth", "psnr_first", "ssim_first", "psnr_first_truth")


@dataclass
class Plan:
    """What one benchmark run does (the CLI's options; ``--quick`` is a small one)."""

    seeds: int = 8
    first_seed: int = 0                      # seeds first_seed .. first_seed + seeds - 1 (runs can be split)
    kinds: tuple[str, ...] = KINDS
    shape: Shape = FULL                      # episode length, observed chunks, pacing
    arms: tuple[Arm, ...] = ()
    smoke_test: bool = False                 # --quick: a short CI run, not the benchmark's figures
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


@dataclass
class Kept:
    """Frames of one episode kept for the videos and the still: truth and each arm's output."""

    episode: RevisitEpisode
    still_frame: int = 0                     # a generated return (else the last frame)
    truth: torch.Tensor | None = None
    frames: dict = field(default_factory=dict)


def episode_scores(trace: Trace, ep: LeaveReturn) -> dict:
    """Returning frames of a leave-and-return path against the truth and against the last generated
    frame of the first visit (the positions experiment)."""
    back = torch.from_numpy(ep.returning)
    frames, truth = trace.frames[back], trace.truth[back]
    first = trace.frames[int(ep.first_visit[-1])].expand_as(frames)
    return {"psnr_truth": float(psnr(frames, truth).mean()), "ssim_truth": float(ssim(frames, truth).mean()),
            "psnr_first": float(psnr(frames, first).mean()), "ssim_first": float(ssim(frames, first).mean()),
            "psnr_first_truth": float(trace.psnr[ep.first_visit].mean()),   # how good the first visit itself was
            "psnr_all": float(trace.psnr[trace.frames_per_chunk:].mean()), "returning_frames": int(len(back)), **trace.totals}


def revisit_row(plan: Plan, arm: Arm, ep: RevisitEpisode) -> tuple[dict, Trace, np.ndarray]:
    """One arm's session on ``ep``: its row, trace and the generated returns' frame indices."""
    trace = run_arm(arm, ep.episode, ep.chunks, plan.workdir, weights=plan.weights,
                    observe_frames=ep.tour_frames)
    assert trace.observed_chunks == ep.observed_chunks, (trace.observed_chunks, ep.observed_chunks)
    rv = classify(trace.cam, trace.frames_per_chunk, trace.observed_chunks)
    row = {"experiment": "revisit", "arm": arm.name, "seed": ep.seed, "kind": ep.kind, "arena_seed": ep.arena_seed,
           "chunks": ep.chunks, "observed_chunks": ep.observed_chunks, "smoke_test": plan.smoke_test,
           "classes": class_sums(trace, rv), **trace.totals}
    return row, trace, np.flatnonzero(rv.generated)


def revisit(plan: Plan, on_row: Callable[[dict], None] = lambda row: None,
            keep_kind: str | None = None) -> tuple[list[dict], Kept | None]:
    """Every arm on every seed's episode of every kind; the first seed's ``keep_kind`` episode kept."""
    rows, kept = [], None
    for seed in range(plan.first_seed, plan.first_seed + plan.seeds):
        for kind in plan.kinds:
            ep = revisit_episode(seed, kind, plan.shape)
            keep_this = seed == plan.first_seed and kind == keep_kind
            if keep_this:
                kept = Kept(ep)
            for arm in plan.arms:
                row, trace, generated = revisit_row(plan, arm, ep)
                rows.append(row)
                on_row(row)
                if keep_this:
                    kept.truth, kept.frames[arm.name] = trace.truth, trace.frames
                    kept.still_frame = int(generated[len(generated) // 2]) if len(generated) else len(trace.psnr) - 1
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
