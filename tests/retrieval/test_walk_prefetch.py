"""Prefetch for a walk: the hedged poses (stop, turn either way, walk ahead at the rates the session has
shown), a view at hand kept over a near-equal one (``stick``), and the staging order of
``Retriever.predict_staging`` (the predicted set, what the last chunk missed, then the hedges' picks)."""
from __future__ import annotations

import numpy as np

from engine.geometry import make_poses, quat_from_euler, quat_to_matrix, rotation_angle
from engine.retrieval.predict import hedge_poses
from engine.retrieval.retriever import Retriever
from engine.facts.layout import VideoGrid
from engine.retrieval.select import ChunkPose, FovOverlapPolicy


def path(yaw_deg: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return make_poses(positions, quat_from_euler(yaw_deg, 0 * yaw_deg))


def test_hedges_stop_turn_both_ways_and_walk_ahead_at_the_rates_shown():
    f = np.arange(40, dtype=np.float64)
    yaw = np.where(f < 20, 3.0 * f, 57.0)                      # turned at 3 degrees a frame, then walked
    pos = np.zeros((40, 3))
    pos[20:, 2] = -0.1 * (f[20:] - 19)
    known = path(yaw, pos)
    frames = np.array([45, 50])
    stop, left, right, ahead = hedge_poses(known, frames)
    np.testing.assert_allclose(stop, np.repeat(known[-1:], 2, 0))
    turned = rotation_angle(np.repeat(known[-1:, 3:], 2, 0), left[:, 3:])
    np.testing.assert_allclose(turned, [3.0 * 6, 3.0 * 11], atol=1e-6)   # frames past the last known one
    np.testing.assert_allclose(rotation_angle(left[:, 3:], right[:, 3:]), [36.0, 66.0], atol=1e-6)
    assert np.allclose(left[:, :3], known[-1, :3]) and np.allclose(right[:, :3], known[-1, :3])
    step = np.linalg.norm(ahead[:, :3] - known[-1, :3], axis=1)
    np.testing.assert_allclose(step, [0.6, 1.1], atol=1e-9)             # 0.1 a frame
    forward = quat_to_matrix(known[-1, 3:]) @ np.array([0.0, 0.0, -1.0])   # where the camera looks
    np.testing.assert_allclose((ahead[0, :3] - known[-1, :3]) / 0.6, forward, atol=1e-9)


def test_no_rate_is_guessed_that_the_session_never_showed():
    still = path(np.zeros(30), np.zeros((30, 3)))
    assert len(hedge_poses(still, np.array([35]))) == 1                  # stop only
    pos = np.zeros((30, 3))
    pos[:, 0] = 0.05 * np.arange(30)
    walking = path(np.zeros(30), pos)
    hedges = hedge_poses(walking, np.array([35]))
    assert len(hedges) == 2                                            # stop and walk ahead: no turns


def key(x=0.0, z=0.0, yaw=0.0) -> ChunkPose:
    return ChunkPose(path(np.array([yaw]), np.array([[x, 0.0, z]])))


def test_a_view_at_hand_is_kept_unless_another_adds_more_than_stick():
    query = key()
    near_equal = {1: key(0.05, 0.0), 2: key(-0.05, 0.0)}
    plain = FovOverlapPolicy()
    best = plain.select(query, near_equal, 1)
    other = 1 if best == [2] else 2
    sticky = FovOverlapPolicy(stick=0.1)
    assert sticky.select(query, near_equal, 1, preferred={other}) == [other]
    assert sticky.select(query, near_equal, 1) == best
    far = {1: key(0.0, 0.0), 2: key(0.0, 0.0, yaw=80.0)}                # 2 sees much less of the query's view
    assert sticky.select(query, far, 1, preferred={2}) == [1]


def test_staging_order_is_predicted_then_carried_then_hedges_rank_by_rank():
    grid = VideoGrid(first_frames=9, frames_per_chunk=12, fps=16)
    f = np.arange(9 + 12 * 30, dtype=np.float64)
    yaw = np.where(f < 200, 4.5 * f, 4.5 * 199)                      # a full turn seen, then a walk
    pos = np.zeros((len(f), 3))
    pos[200:, 2] = -0.12 * (f[200:] - 199)
    r = Retriever(path(yaw, pos), grid, first_visit=True, hedge=True)
    candidates = list(range(0, 20))
    predicted = r.predict_select(22, candidates, 3)
    staged = r.predict_staging(22, candidates, 3, slots=12, carried=[5])
    assert staged[:len(predicted)] == predicted
    assert staged[len(predicted)] == 5 or 5 in predicted
    assert len(staged) > len(predicted) + 1                            # the hedges add views to stage
    assert len(set(staged)) == len(staged) and set(staged) <= set(candidates)
    assert r.predict_staging(22, candidates, 3, slots=2, carried=[5]) == staged[:2]
    plain = Retriever(path(yaw, pos), grid, first_visit=True)           # no hedge: predicted + carried
    assert plain.predict_staging(22, candidates, 3, slots=12, carried=[5]) == list(dict.fromkeys(predicted + [5]))


def test_staging_sizes_follow_the_chunk_size_and_the_config():
    from engine.memory.budget import staging_of

    arena = staging_of(3, None, None, 691_200)                          # the arena model's bf16 chunk
    assert (arena.hedge_slots, arena.cache_chunks, arena.stage_slots) == (3, 24, 6)
    mg2 = staging_of(3, None, None, 486_604_800)                        # MG2's: no hedges, no cache
    assert (mg2.hedge_slots, mg2.cache_chunks, mg2.stage_slots) == (0, 0, 3)
    assert staging_of(3, None, None, 15 << 20).cache_chunks == 0         # 2 would fit: fewer than 8, none
    assert staging_of(3, 1, 5, 691_200).chunks == 3 + 1 + 5              # the config's numbers win
    assert staging_of(3, None, None, 691_200, prefetching=False).chunks == 3


def test_bad_walk_prefetch_settings_are_one_line_errors():
    import pytest

    from engine.errors import ConfigError
    from engine.settings.overlay import resolve_session_config

    for memory, needle in (({"stick": 2}, "memory.stick"), ({"hedge_slots": -1}, "memory.hedge_slots"),
                           ({"device_cache": 5000}, "memory.device_cache")):
        with pytest.raises(ConfigError, match=needle):
            resolve_session_config(None, {"memory": memory})
