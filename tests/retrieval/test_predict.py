"""engine.retrieval.predict: constant-velocity extrapolation is exact on constant-velocity motion, never
reads past the current chunk, and the reuse-current baseline returns the current chunk's key."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.geometry import make_poses, quat_from_euler, quat_multiply, rotation_angle
from engine.retrieval.predict import (ConstantVelocityPredictor, ReuseCurrentPredictor, extrapolate,
                                      quat_power)
from engine.retrieval.select import ChunkGrid, ChunkPose

GRID = ChunkGrid()


def steady(frames: int, velocity=(0.0, 0.0, 0.0), yaw_rate=0.0, pitch=0.0, yaw0=0.0) -> np.ndarray:
    """[frames, 7] poses of a camera moving at a constant world velocity and turning at a constant rate."""
    f = np.arange(frames, dtype=np.float64)
    positions = f[:, None] * np.asarray(velocity)
    return make_poses(positions, quat_from_euler(yaw0 + yaw_rate * f, pitch + 0 * f))


def assert_same_key(a: ChunkPose, b: ChunkPose) -> None:
    np.testing.assert_allclose(a.poses[:, :3], b.poses[:, :3], atol=1e-9)
    assert rotation_angle(a.poses[:, 3:], b.poses[:, 3:]).max() < 1e-6


def test_yaw_in_place_is_exact():
    poses = steady(400, yaw_rate=1.5)                        # MG2's camera press, a full turn in 240 frames
    for chunk in (0, 1, 5, 19, 25):
        predicted = ConstantVelocityPredictor().predict(poses, chunk, GRID)
        assert_same_key(predicted, ChunkPose.of_chunk(poses, chunk + 1, GRID))


@settings(max_examples=50, deadline=None)
@given(st.floats(-0.2, 0.2), st.floats(-0.2, 0.2), st.floats(-3.0, 3.0), st.floats(-60, 60),
       st.floats(-180, 180), st.integers(1, 20), st.integers(1, 2))
def test_straight_walk_while_turning_is_exact(vx, vz, yaw_rate, pitch, yaw0, chunk, lookahead):
    poses = steady(400, velocity=(vx, 0.0, vz), yaw_rate=yaw_rate, pitch=pitch, yaw0=yaw0)
    predictor = ConstantVelocityPredictor(lookahead=lookahead)
    assert_same_key(predictor.predict(poses, chunk, GRID), ChunkPose.of_chunk(poses, chunk + lookahead, GRID))


def test_history_averages_the_velocity():
    poses = steady(100, velocity=(0.0, 0.0, -0.1))
    poses[-1, 2] += 0.05                                     # one noisy last frame
    one = extrapolate(poses, np.array([120]), history=1)
    four = extrapolate(poses, np.array([120]), history=4)
    truth = -0.1 * 120
    assert abs(four[0, 2] - truth) < abs(one[0, 2] - truth)


def test_prediction_never_reads_past_the_current_chunk():
    poses = steady(400, velocity=(0.1, 0.0, 0.0), yaw_rate=1.0)
    end = GRID.frames(7).stop
    future_changed = poses.copy()
    rest = 400 - end
    future_changed[end:] = make_poses(np.full((rest, 3), 50.0), quat_from_euler(np.full(rest, 90.0), 0.0))
    predictors = ConstantVelocityPredictor(), ConstantVelocityPredictor(lookahead=2), ReuseCurrentPredictor()
    for predictor in predictors:
        a = predictor.predict(poses, 7, GRID)
        np.testing.assert_array_equal(a.poses, predictor.predict(future_changed, 7, GRID).poses)
        np.testing.assert_array_equal(a.poses, predictor.predict(poses[:end], 7, GRID).poses)


def test_reuse_current_returns_the_current_key():
    poses = steady(200, velocity=(0.0, 0.0, -0.12), yaw_rate=1.5)
    np.testing.assert_array_equal(ReuseCurrentPredictor().predict(poses, 6, GRID).poses,
                                  ChunkPose.of_chunk(poses, 6, GRID).poses)


def test_a_single_known_pose_is_held():
    poses = steady(9, yaw_rate=1.0)
    out = extrapolate(poses[:1], np.array([5, 9]))
    np.testing.assert_array_equal(out, np.repeat(poses[:1], 2, axis=0))


def test_quat_power():
    q = quat_from_euler(30.0, 10.0)
    np.testing.assert_allclose(quat_power(q, np.array([1.0]))[0], q, atol=1e-12)
    np.testing.assert_allclose(quat_power(q, np.array([0.0]))[0], [1, 0, 0, 0], atol=1e-12)
    assert rotation_angle(quat_power(q, np.array([2.0]))[0], quat_multiply(q, q)) < 1e-9
    assert rotation_angle(quat_power(-q, np.array([0.5]))[0], quat_power(q, np.array([0.5]))[0]) < 1e-9
    np.testing.assert_allclose(quat_power(np.array([1.0, 0, 0, 0]), np.array([3.0]))[0], [1, 0, 0, 0])
