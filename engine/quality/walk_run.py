"""``bench quality --walk``: walking sessions run as a user runs them, then scored from their files.

Owns the plan of a walk run and its order of work. For every seed (a held-out arena: the long
benchmark's range), every kind of walk (``engine.quality.walk_paths``) and every arm (window-only,
the default int4 memory, the same without re-projection, optionally the long benchmark's others), a
real ``engine.session.loop.Session`` writes its MP4 and log as ``worldpager generate`` does (through
``engine.quality.long_run.run_session``: the look-around as ``--observe`` unless it is left out, the
rest as ``--trajectory``); then the session is scored from those files alone
(``engine.quality.walk_score``: exact latent frames against the rendered truth, per class and per
minute). Every arm of an episode walks the same path (checked). The first seed's first kind's sessions
are kept under ``out_dir/sessions/``; the others are deleted once scored.

The arm ``int4`` is today's memory: its re-projection (``--arena-reproject``, within 0.15 units) warps
a context frame by rotation alone, with no depth, so it is also the "rotation-only re-projection" arm a
depth re-projection is to be compared with; ``noreproject`` is the same memory without it.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.errors import ConfigError
from engine.quality.arms import INT4, NO_REPROJECT, WINDOW, Arm
from engine.quality.long_run import OPTIONAL_ARMS, _counters, run_session
from engine.quality.walk_paths import WALK_KINDS, WalkEpisode, WalkShape, walk_episode
from engine.quality.walk_score import score_walk

WALK_ARMS = (WINDOW, INT4, NO_REPROJECT)


@dataclass
class WalkPlan:
    seeds: int = 4
    first_seed: int = 0
    kinds: tuple[str, ...] = WALK_KINDS
    shape: WalkShape = WalkShape()
    arms: tuple[Arm, ...] = WALK_ARMS
    bin_s: float = 60.0
    smoke_test: bool = False
    weights: Path | None = None


def walk_arms(names: list[str]) -> tuple[Arm, ...]:
    """window, int4 and noreproject, and any of the long benchmark's other arms named."""
    known = {a.name: a for a in (*WALK_ARMS, *OPTIONAL_ARMS.values())}
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"unknown arm {bad[0]!r} for --walk (choose from {', '.join(known)})")
    return WALK_ARMS + tuple(known[n] for n in known if n in names and known[n] not in WALK_ARMS)


def _row(plan: WalkPlan, ep: WalkEpisode, arm: Arm, scores: dict) -> dict:
    return {"experiment": "walk", "arm": arm.name, "seed": ep.seed, "kind": ep.kind,
            "look_around": ep.look_around, "arena_seed": ep.arena_seed, "chunks": ep.chunks,
            "smoke_test": plan.smoke_test, **scores}


def walk_rows(plan: WalkPlan, out_dir: Path, on_row: Callable[[dict], None] = lambda row: None) -> list[dict]:
    rows = []
    for seed in range(plan.first_seed, plan.first_seed + plan.seeds):
        for kind in plan.kinds:
            ep = walk_episode(seed, kind, plan.shape)
            truth = None
            keep = seed == plan.first_seed and kind == plan.kinds[0]
            for arm in plan.arms:
                folder = out_dir / "sessions" / f"seed{seed}-{kind}-{arm.name}"
                if folder.exists():
                    shutil.rmtree(folder)
                cfg = run_session(arm, ep, folder, plan.weights)
                observed = _counters(cfg.log_path)["observed_chunks"]
                assert observed == ep.observed_chunks, (observed, ep.observed_chunks)
                scores, seen = score_walk(cfg.log_path, cfg.out, ep.observed_chunks, plan.bin_s, truth)
                if truth is not None:
                    assert truth.same_path(seen), f"seed {seed} {kind}: arm {arm.name} walked another path"
                truth = seen
                if not keep:
                    shutil.rmtree(folder, ignore_errors=True)
                row = _row(plan, ep, arm, scores)
                rows.append(row)
                on_row(row)
    return rows
