"""The long benchmark's paths: as long as asked, never clamped, an observed whole turn at the start, then
legs out and back that return to the tour's views and, minutes later, to views first seen only in
generated chunks; deterministic per seed, different places in different arenas."""
from __future__ import annotations

import numpy as np
import pytest

from engine.arena.config import ArenaModelConfig
from engine.arena.data import latent_camera
from engine.errors import ConfigError
from engine.quality.long_paths import LONG, LONG_SMOKE, long_episode
from engine.quality.revisits import classify

MODEL = ArenaModelConfig()
LATENT_S = MODEL.temporal / MODEL.fps           # seconds per latent frame


def _classes(ep):
    cam = latent_camera(ep.episode.poses, MODEL, ep.chunks * MODEL.frames_per_chunk)
    return cam, classify(cam, MODEL.frames_per_chunk, ep.observed_chunks)


@pytest.mark.parametrize("seed", [0, 3])
def test_five_minutes_of_returns_to_observed_and_to_long_ago_generated_views(seed):
    ep = long_episode(seed, LONG)
    frames = 9 + 12 * (ep.chunks - 1)
    assert frames / MODEL.fps >= 300 and (frames - 12) / MODEL.fps < 300 and ep.episode.clamped == 0
    cam, rv = _classes(ep)
    tour = cam[:ep.observed_chunks * MODEL.frames_per_chunk]
    seen = set(np.round(tour[:, 2] % 360 / 18).astype(int) % 20)
    assert seen == set(range(20)) and np.abs(tour[:, :2]).max() < 1e-9       # a whole turn on the spot
    last_minute = np.arange(len(cam)) * LATENT_S >= 240
    assert (rv.observed & last_minute).sum() > 50 and (rv.generated & last_minute).sum() > 50
    gen = np.flatnonzero(rv.generated)
    ago = (gen - rv.first[gen]) * LATENT_S
    assert (ago >= 120).sum() > 100                                             # back after minutes
    assert np.hypot(cam[:, 0], cam[:, 1]).max() > 4.0                           # walks well away


def test_paths_are_deterministic_and_differ_between_arenas():
    a, b, c = long_episode(1, LONG_SMOKE), long_episode(1, LONG_SMOKE), long_episode(2, LONG_SMOKE)
    assert np.array_equal(a.episode.poses, b.episode.poses) and a.places == b.places
    assert a.arena_seed != c.arena_seed and a.places != c.places
    _, rv = _classes(a)
    assert rv.observed.any() and rv.generated.any()


def test_a_length_that_is_not_positive_is_refused():
    import dataclasses

    with pytest.raises(ConfigError, match="--minutes 0"):
        long_episode(0, dataclasses.replace(LONG, minutes=0))
