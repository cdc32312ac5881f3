"""How often a predicted pose finds the retrieval set the real pose will select (numpy only).

Contract: ``prediction_hit_rate(trajectory_poses, chunks, predictor, policy, k, window_chunks)`` replays
the first ``chunks`` chunks of a trajectory the way the session does. For each target chunk t it asks
the policy twice over the same candidates — every chunk older than the local window (``window_chunks``
chunks before t) and not the sink — once with t's real key (the set step 2 of the chunk loop uses) and
once with the predictor's key made from the poses known up to the end of chunk ``t - lookahead`` (the
set step 4 staged). Targets with fewer than ``k`` eligible candidates are skipped (early chunks, where
any set is the whole memory).

The result's ``hit_rate`` is ``sum |predicted ∩ true| / sum |true|`` over the scored targets: the
fraction of the chunks the loop wants that were staged in time. Targets whose true set is empty count
in ``chunks_scored`` and ``empty_true`` but add nothing to either sum.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from engine.retrieval.predict import PosePredictor
from engine.retrieval.select import ChunkGrid, ChunkPose, RetrievalPolicy


def prediction_hit_rate(trajectory_poses: np.ndarray, chunks: int, predictor: PosePredictor,
                        policy: RetrievalPolicy, k: int, window_chunks: int = 1, *,
                        grid: ChunkGrid | None = None, sink: bool = False) -> dict[str, Any]:
    """Replay ``chunks`` chunks; returns hit_rate, hits, total, chunks_scored, exact_sets, empty_true,
    mean_true_size, mean_pred_size (see the module docstring)."""
    grid = grid or ChunkGrid()          # the defaults are MG2's grid
    poses = np.asarray(trajectory_poses, dtype=np.float64)
    assert grid.chunks_in(len(poses)) >= chunks, f"{len(poses)} frames hold fewer than {chunks} chunks"
    assert k >= 1 and window_chunks >= 0
    keys = {c: ChunkPose.of_chunk(poses, c, grid) for c in range(chunks)}
    exclude = {0} if sink else set()
    tally = {"hits": 0, "total": 0, "chunks_scored": 0, "exact_sets": 0, "empty_true": 0, "pred_size": 0}
    for target in range(predictor.lookahead, chunks):
        newest = target - 1 - window_chunks
        eligible = {c: keys[c] for c in range(newest + 1) if c not in exclude}
        if len(eligible) < k:
            continue
        current = target - predictor.lookahead
        # Only the poses up to the end of the current chunk exist when the prefetch is issued.
        known = poses[:grid.frames(current).stop]
        predicted = predictor.predict(known, current, grid)
        true = policy.select(keys[target], eligible, k, exclude, newest)
        staged = policy.select(predicted, eligible, k, exclude, newest)
        _count(tally, true, staged)
    return _summary(tally)


def _count(tally: dict[str, int], true: list[int], staged: list[int]) -> None:
    tally["chunks_scored"] += 1
    tally["hits"] += len(set(true) & set(staged))
    tally["total"] += len(true)
    tally["exact_sets"] += set(true) == set(staged)
    tally["empty_true"] += not true
    tally["pred_size"] += len(staged)


def _summary(tally: dict[str, int]) -> dict[str, Any]:
    scored = tally["chunks_scored"]
    return {
        "hit_rate": tally["hits"] / tally["total"] if tally["total"] else math.nan,
        "hits": tally["hits"],
        "total": tally["total"],
        "chunks_scored": scored,
        "exact_sets": tally["exact_sets"],
        "empty_true": tally["empty_true"],
        "mean_true_size": tally["total"] / scored if scored else math.nan,
        "mean_pred_size": tally["pred_size"] / scored if scored else math.nan,
    }
