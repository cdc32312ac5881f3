"""Leave-and-return paths: back at exactly the place after the gap, in arenas no other run uses."""
from __future__ import annotations

import numpy as np
import pytest

from engine.arena.data import TRAIN_ARENAS
from engine.arena.evaluate import EVAL_ARENA_BASE
from engine.quality.episodes import QUALITY_ARENA_BASE, leave_and_return


@pytest.mark.parametrize("gap", [3, 10, 50, 200])
def test_the_path_returns_to_the_place_after_the_gap(gap):
    ep = leave_and_return(1, gap)
    latent = ep.episode.poses[::4]
    place = ep.episode.poses[0]
    assert ep.episode.clamped == 0
    assert np.abs(latent[ep.returning] - place).max() < 1e-6           # the same pose, to rounding
    assert np.abs(latent[ep.first_visit] - place).max() < 1e-6
    away = latent[ep.first_visit[-1] + 1:ep.returning[0]]
    assert len(away) and (np.linalg.norm(away - place, axis=1) > 1e-2).all()   # gone the whole time
    assert ep.returning[0] // 3 - ep.first_visit[-1] // 3 == gap
    assert ep.first_visit[0] >= 3 and ep.returning[-1] < ep.chunks * 3    # generated frames, in the session


def test_a_prefix_moves_the_same_path_later():
    below, past = leave_and_return(2, 10), leave_and_return(2, 10, prefix_chunks=90)
    assert past.returning[0] - below.returning[0] == 90 * 3
    np.testing.assert_array_equal(below.episode.mouse, past.episode.mouse[90 * 12:])
    assert past.chunks - below.chunks == 90


def test_arenas_are_held_out_from_training_and_from_bench_arena():
    seeds = {leave_and_return(s, 3).arena_seed for s in range(4)}
    assert min(seeds) >= QUALITY_ARENA_BASE > TRAIN_ARENAS and len(seeds) == 4
    assert QUALITY_ARENA_BASE > EVAL_ARENA_BASE + 10_000      # bench arena's held-out episodes are below
