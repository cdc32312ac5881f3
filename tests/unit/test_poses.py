"""engine.geometry and engine.io.poses: the camera convention, rotation conversions, slerp, resampling,
calibration, kinematics."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.geometry import (euler_from_quat, grid_frames, make_poses, matrix_to_quat, quat_from_euler,
                             quat_to_matrix, resample, rotation_angle, slerp)
from engine.io.actions import CAMERA_STEP
from engine.io.poses import FPS, ORIGIN, Calibration, CameraState, advance, states_to_poses

angles = st.floats(-179.0, 179.0)
pitches = st.floats(-89.0, 89.0)


def forward_of(q):
    return -quat_to_matrix(q)[..., :, 2]


def right_of(q):
    return quat_to_matrix(q)[..., :, 0]


# ---------------------------------------------------------------- convention

@pytest.mark.parametrize("yaw, pitch, forward, right", [
    (0, 0, (0, 0, -1), (1, 0, 0)),           # looks along -z, +x on the right
    (90, 0, (1, 0, 0), (0, 0, 1)),           # yaw > 0 turns right
    (-90, 0, (-1, 0, 0), (0, 0, -1)),
    (180, 0, (0, 0, 1), (-1, 0, 0)),
    (0, 30, (0, 0.5, -math.sqrt(3) / 2), (1, 0, 0)),   # pitch > 0 looks up
])
def test_convention(yaw, pitch, forward, right):
    q = quat_from_euler(yaw, pitch)
    np.testing.assert_allclose(forward_of(q), forward, atol=1e-12)
    np.testing.assert_allclose(right_of(q), right, atol=1e-12)


def test_roll_tips_up_vector_left():
    up = quat_to_matrix(quat_from_euler(0, 0, 10))[:, 1]
    assert up[0] < 0 and up[1] > 0.98


@settings(max_examples=200, deadline=None)
@given(angles, pitches, angles)
def test_euler_quat_round_trip(yaw, pitch, roll):
    back = euler_from_quat(quat_from_euler(yaw, pitch, roll))
    np.testing.assert_allclose([float(v) for v in back], [yaw, pitch, roll], atol=1e-7)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1, 1), min_size=4, max_size=4).filter(lambda v: np.linalg.norm(v) > 1e-3))
def test_matrix_quat_round_trip(values):
    q = np.asarray(values) / np.linalg.norm(values)
    back = matrix_to_quat(quat_to_matrix(q))
    assert abs(abs(np.dot(back, q)) - 1) < 1e-12


def test_gimbal_lock_keeps_rotation():
    q = quat_from_euler(30, 90, 20)
    yaw, pitch, roll = euler_from_quat(q)
    assert pitch == pytest.approx(90) and roll == 0
    assert rotation_angle(quat_from_euler(yaw, pitch, roll), q) < 1e-6


def test_quat_sequence_is_sign_aligned():
    poses = states_to_poses([ORIGIN._replace(yaw=float(y)) for y in np.arange(0, 720, 10)])
    q = poses[:, 3:]
    assert np.all(np.sum(q[1:] * q[:-1], axis=1) > 0)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1, atol=1e-12)


# ---------------------------------------------------------------- slerp and resampling

def test_slerp_endpoints_and_constant_speed():
    q0, q1 = quat_from_euler(0, 0), quat_from_euler(80, 20)
    assert rotation_angle(slerp(q0, q1, 0.0), q0) < 1e-6
    assert rotation_angle(slerp(q0, q1, 1.0), q1) < 1e-6
    total = rotation_angle(q0, q1)
    for u in (0.25, 0.5, 0.75):
        assert rotation_angle(q0, slerp(q0, q1, u)) == pytest.approx(u * total, abs=1e-6)


def test_slerp_takes_shorter_arc():
    mid = slerp(quat_from_euler(170, 0), quat_from_euler(-170, 0), 0.5)
    assert float(euler_from_quat(mid)[0]) == pytest.approx(180, abs=1e-9)


def test_slerp_nearly_equal_is_stable():
    q0 = quat_from_euler(10, 5)
    q1 = quat_from_euler(10 + 1e-8, 5)
    assert np.all(np.isfinite(slerp(q0, q1, 0.3)))


def test_resample_hits_keyframes_exactly_and_interpolates():
    times = np.array([0.0, 0.5, 1.25])                       # frames 0, 8, 20
    positions = np.array([[0.0, 0, 0], [1.6, 0, -0.8], [1.6, 2.4, -0.8]])
    quats = quat_from_euler([0.0, 40.0, 10.0], [0.0, 10.0, -20.0])
    poses = resample(times, positions, quats, FPS)
    assert len(poses) == 21 == grid_frames(1.25, FPS)
    for frame, k in ((0, 0), (8, 1), (20, 2)):
        assert np.array_equal(poses[frame, :3], positions[k])
        assert rotation_angle(poses[frame, 3:], quats[k]) < 1e-6
    np.testing.assert_allclose(poses[4, :3], [0.8, 0, -0.4], atol=1e-12)        # halfway in time
    assert rotation_angle(poses[4, 3:], slerp(quats[0], quats[1], 0.5)) < 1e-6
    np.testing.assert_allclose(poses[14, :3], [1.6, 1.2, -0.8], atol=1e-12)


def test_resample_off_grid_end_and_single_keyframe():
    poses = resample(np.array([0.0, 1.03]), np.zeros((2, 3)), quat_from_euler([0.0, 10.0], 0.0), FPS)
    assert len(poses) == 17                                    # 1.03 s: frames 0..16
    assert len(resample(np.array([2.0]), np.ones((1, 3)), quat_from_euler([5.0], 0.0), FPS)) == 1


# ---------------------------------------------------------------- calibration and kinematics

def test_calibration_defaults():
    cal = Calibration()
    assert cal.mouse_step == CAMERA_STEP
    assert float(cal.mouse_degrees(CAMERA_STEP)) == pytest.approx(1.5)      # 24 deg/s at 16 fps
    assert float(cal.mouse_degrees(0.019)) == 0.0                            # dead zone
    assert cal.distance_per_frame == pytest.approx(0.1235)
    assert cal.diagonal_scale * 12.35 == pytest.approx(8.73, abs=0.01)      # MG3's diagonal offset


def test_calibration_coerce_from_other_config():
    @dataclass(frozen=True)
    class Other:
        degrees_per_mouse_unit: float = 10.0
        distance_per_frame: float = 0.2
        unrelated: int = 3

    cal = Calibration.coerce(Other())
    assert (cal.degrees_per_mouse_unit, cal.distance_per_frame, cal.mouse_dead_zone) == (10.0, 0.2, 0.02)
    assert Calibration.coerce(None) == Calibration()


def test_advance_moves_along_heading():
    east = advance(ORIGIN._replace(yaw=90.0), 1.0, 0.0, 0.0, 0.0, 89.0)
    assert (east.x, east.z) == pytest.approx((1.0, 0.0))
    strafe = advance(ORIGIN, 0.0, 1.0, 0.0, 0.0, 89.0)
    assert (strafe.x, strafe.z) == pytest.approx((1.0, 0.0))
    assert advance(ORIGIN, 0, 0, 0, 5.0, 3.0).pitch == 3.0                   # clamped


@settings(max_examples=100, deadline=None)
@given(st.floats(-1, 1), st.floats(-1, 1), st.floats(-2, 2), st.floats(-2, 2), angles)
def test_mirrored_step_returns(forward, right, dyaw, dpitch, yaw):
    """The midpoint rule makes a step followed by its mirror image land exactly where it started."""
    start = CameraState(1.0, 2.0, 3.0, yaw, 10.0, 0.0)
    there = advance(start, forward, right, dyaw, dpitch, 89.0)
    back = advance(there, -forward, -right, -dyaw, -dpitch, 89.0)
    np.testing.assert_allclose(back, start, atol=1e-9)


def test_make_poses_layout():
    poses = make_poses(np.zeros((2, 3)), quat_from_euler([0.0, 90.0], 0.0))
    assert poses.shape == (2, 7) and poses.dtype == np.float64
