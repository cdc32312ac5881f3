"""``bench quality --long``: long sessions run as a user runs them, then scored from their files.

Owns the plan of a long run and its order of work. For every seed (a held-out arena, one long episode:
``engine.quality.long_paths``) and every arm (window-only, the default int4 memory, optionally the
position modes), a real ``engine.session.loop.Session`` writes its MP4 and its log exactly as
``worldpager generate`` does (the tour as ``--observe``, the rest as ``--trajectory``, the benchmark's
store: ``engine.quality.session_run.session_config``); then the session is scored from those files
alone (``engine.quality.long_score``: decoded frames against the rendered truth). The truth is
rendered once per episode (every arm walks the same path; checked). The first seed's sessions are kept
under ``out_dir/sessions/`` (MP4, log, config and paths: ``worldpager arena truth`` works on them);
the others are deleted once scored, spill directories always.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.errors import ConfigError
from engine.quality.arms import (DEPTH, INT4, NO_REPROJECT, POSITION_ARMS, WEIGHTS_INT8, WINDOW,
                                 WINDOW_WEIGHTS_INT8, Arm, _memory)
from engine.quality.long_paths import LONG, LongEpisode, LongShape, long_episode
from engine.quality.long_score import score_session
from engine.quality.session_run import session_config

LONG_ARMS = (WINDOW, INT4)
NEWEST = Arm("newest", "--retrieve-visit newest (int4; of near-duplicate views, the latest rendition)",
             _memory(retrieve_visit="newest"))
OPTIONAL_ARMS = {a.name: a for a in (*POSITION_ARMS, NEWEST, NO_REPROJECT, DEPTH, WEIGHTS_INT8, WINDOW_WEIGHTS_INT8)}
COUNTERS = ("hits", "misses", "stale", "disk_bytes_read")


@dataclass
class LongPlan:
    seeds: int = 8
    first_seed: int = 0
    shape: LongShape = LONG
    arms: tuple[Arm, ...] = LONG_ARMS
    bin_s: float = 60.0
    smoke_test: bool = False
    weights: Path | None = None


def long_arms(names: list[str], baselines: bool = True) -> tuple[Arm, ...]:
    """window and int4 (unless ``baselines`` is off: their rows then come from another run, merged
    with ``--from-rows``); ``names`` may add the position modes (extend, rerotate6/30/96), ``newest``
    (retrieval of the newest of near-duplicate views, the default before first visits) and
    ``noreproject`` (the arena model's x0 alone: ``--arena-reproject 0``)."""
    bad = [n for n in names if n not in OPTIONAL_ARMS and n not in ("window", "int4")]
    if bad:
        raise ConfigError(f"unknown arm {bad[0]!r} for --long (choose from window, int4, {', '.join(OPTIONAL_ARMS)})")
    added = tuple(OPTIONAL_ARMS[n] for n in OPTIONAL_ARMS if n in names)
    if baselines:
        return LONG_ARMS + added
    if not added:
        raise ConfigError("--no-baselines: name the arms to run with --arms (extend, rerotate6, ...)")
    return added


def run_session(arm: Arm, ep: LongEpisode, folder: Path, weights: Path | None):
    """Run ``arm`` on ``ep`` in ``folder``: returns the session's config (its MP4 and log are written)."""
    from engine.session.loop import Session

    folder.mkdir(parents=True, exist_ok=True)
    cfg = session_config(arm, ep.episode, ep.chunks, folder, weights, observe_frames=ep.tour_frames)
    Session(cfg).run()
    shutil.rmtree(folder / "spill", ignore_errors=True)
    return cfg


def _counters(log: Path) -> dict:
    from engine.report.read import read_session

    records = read_session(log)
    totals = {k: sum(int(r.get(k, 0)) for r in records.chunks) for k in COUNTERS}
    observed = [int(r["chunk"]) for r in records.chunks if r.get("observed")]
    return {**totals, "observed_chunks": max(1, len(observed))}


def long_rows(plan: LongPlan, out_dir: Path, on_row: Callable[[dict], None] = lambda row: None) -> list[dict]:
    rows = []
    for seed in range(plan.first_seed, plan.first_seed + plan.seeds):
        ep = long_episode(seed, plan.shape)
        truth = None
        for arm in plan.arms:
            folder = out_dir / "sessions" / f"seed{seed}-{arm.name}"
            if folder.exists():
                shutil.rmtree(folder)
            cfg = run_session(arm, ep, folder, plan.weights)
            counts = _counters(cfg.log_path)
            assert counts["observed_chunks"] == ep.observed_chunks, (counts, ep.observed_chunks)
            scores, seen = score_session(cfg.log_path, cfg.out, ep.observed_chunks, plan.bin_s, truth)
            if truth is not None:
                assert truth.same_path(seen), f"seed {seed}: arm {arm.name} walked another path"
            truth = seen
            row = {"experiment": "long", "arm": arm.name, "seed": seed, "arena_seed": ep.arena_seed,
                   "chunks": ep.chunks, "places": [list(p) for p in ep.places], "smoke_test": plan.smoke_test,
                   **scores, **{k: counts[k] for k in COUNTERS}}
            if seed != plan.first_seed:
                shutil.rmtree(folder, ignore_errors=True)
            rows.append(row)
            on_row(row)
    return rows
