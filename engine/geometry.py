"""Camera-pose geometry: the one pose convention of the engine and the rotation maths on it (numpy only).

Owns pure functions of poses — quaternions, Euler conversion, rotation matrices, slerp, angle wrapping,
resampling keyframes onto a video grid — that the trajectory readers (``engine.io``), the retrieval
(``engine.retrieval``) and any model that needs camera poses import. No torch, no model, no actions: how
MG2's actions move a camera is ``engine.io.poses``.

Convention (OpenGL / nerfstudio camera axes in a y-up world):
  * World frame: right-handed, +y up. Units are "world units" (the default calibration of
    ``engine.io.poses`` makes one unit roughly one metre).
  * Camera frame: x right, y up, z backward — the camera looks along its local -z.
  * A pose is camera-to-world (c2w): ``world = R @ camera + position``.
  * Euler angles, in degrees: ``R = Ry(-yaw) @ Rx(pitch) @ Rz(roll)`` (Rk(a) = right-handed rotation
    by a about axis k). So at yaw = pitch = roll = 0 the camera looks along world -z with +x on its
    right; **yaw > 0 turns right** (towards +x: yaw 90 looks along +x), **pitch > 0 looks up**, and
    roll > 0 tips the camera's up vector towards its left (the image turns clockwise). Forward is
    ``(sin(yaw)·cos(pitch), sin(pitch), -cos(yaw)·cos(pitch))``.
  * Stored poses are float64 ``[T, 7]`` = ``x, y, z, qw, qx, qy, qz``: position and a unit quaternion
    (Hamilton, w first) of R. Consecutive quaternions of a sequence are sign-aligned (dot >= 0) so a
    sequence can be differenced or extrapolated without 360-degree jumps.
"""
from __future__ import annotations

import math

import numpy as np


# ---------------------------------------------------------------- rotations (degrees in, [..., 4] out)

def _axis_quat(axis: int, degrees) -> np.ndarray:
    half = np.radians(np.asarray(degrees, dtype=np.float64)) / 2
    q = np.zeros(half.shape + (4,))
    q[..., 0] = np.cos(half)
    q[..., 1 + axis] = np.sin(half)
    return q


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` of [..., 4] (w, x, y, z) quaternions (rotation b, then a)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, dtype=np.float64), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, dtype=np.float64), -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def quat_from_euler(yaw, pitch, roll=0.0) -> np.ndarray:
    """Unit quaternions [..., 4] of ``Ry(-yaw) @ Rx(pitch) @ Rz(roll)`` (degrees; see module doc)."""
    yaw, pitch, roll = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (yaw, pitch, roll)))
    return quat_multiply(quat_multiply(_axis_quat(1, -yaw), _axis_quat(0, pitch)), _axis_quat(2, roll))


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [..., 3, 3] of (not necessarily unit) quaternions [..., 4]."""
    q = normalize(q)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """Unit quaternions [..., 4] of rotation matrices [..., 3, 3] (largest-component method)."""
    m = np.asarray(m, dtype=np.float64)
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    # 4·c² for c = w, x, y, z; dividing by the largest keeps the result accurate near 180 degrees.
    four = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    big = np.sqrt(np.maximum(four.max(-1), 1e-12)) / 2            # [...], the largest |component|
    d21, d02, d10 = m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]
    s01, s02, s12 = m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0], m[..., 1, 2] + m[..., 2, 1]
    candidates = np.stack([
        np.stack([big, d21 / (4 * big), d02 / (4 * big), d10 / (4 * big)], -1),
        np.stack([d21 / (4 * big), big, s01 / (4 * big), s02 / (4 * big)], -1),
        np.stack([d02 / (4 * big), s01 / (4 * big), big, s12 / (4 * big)], -1),
        np.stack([d10 / (4 * big), s02 / (4 * big), s12 / (4 * big), big], -1),
    ], -2)                                                         # [..., 4 choices, 4]
    pick = four.argmax(-1)[..., None, None]
    return normalize(np.take_along_axis(candidates, pick, -2)[..., 0, :])


def euler_from_quat(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(yaw, pitch, roll) in degrees of quaternions [..., 4]; yaw, roll in (-180, 180], pitch in
    [-90, 90]. Looking straight up or down (gimbal lock) all heading goes to yaw and roll is 0."""
    r = quat_to_matrix(q)
    fx, fy, fz = -r[..., 0, 2], -r[..., 1, 2], -r[..., 2, 2]       # forward = -(third column)
    pitch = np.degrees(np.arcsin(np.clip(fy, -1.0, 1.0)))
    locked = np.hypot(fx, fz) < 1e-9
    yaw_rad = np.where(locked, np.arctan2(r[..., 2, 0], r[..., 0, 0]), np.arctan2(fx, -fz))
    # Undo the yaw: row 0 of Ry(yaw) @ R is row 0 of Rx(pitch) @ Rz(roll) = [cos roll, -sin roll, 0].
    c, s = np.cos(yaw_rad), np.sin(yaw_rad)
    m00 = c * r[..., 0, 0] + s * r[..., 2, 0]
    m01 = c * r[..., 0, 1] + s * r[..., 2, 1]
    roll = np.where(locked, 0.0, np.degrees(np.arctan2(-m01, m00)))
    return _wrap(np.degrees(yaw_rad)), pitch, _wrap(roll)


def _wrap(degrees):
    """Angles into (-180, 180]."""
    return 180.0 - np.mod(180.0 - np.asarray(degrees, dtype=np.float64), 360.0)


def wrap_degrees(degrees):
    """Public form of the (-180, 180] wrap, for angle differences."""
    return _wrap(degrees)


def normalize(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def align_signs(q: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
    """A [T, 4] sequence with each quaternion's sign flipped so that consecutive dots are >= 0;
    ``previous``: the aligned quaternion before the first (a sequence made piece by piece is then
    aligned exactly as if made whole)."""
    q = np.array(q, dtype=np.float64)
    if previous is not None and len(q) and np.dot(previous, q[0]) < 0:
        q[0] = -q[0]
    for i in range(1, len(q)):
        if np.dot(q[i - 1], q[i]) < 0:
            q[i] = -q[i]
    return q


def rotation_angle(q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    """Angle in degrees of the rotation between two orientations (sign-insensitive).

    atan2 of the chord lengths instead of arccos of the dot: exact to ~1e-14 for tiny angles."""
    q0, q1 = normalize(q0), normalize(q1)
    q1 = np.where(np.sum(q0 * q1, axis=-1, keepdims=True) < 0, -q1, q1)
    half = np.arctan2(np.linalg.norm(q0 - q1, axis=-1), np.linalg.norm(q0 + q1, axis=-1))
    return np.degrees(4 * half)


def slerp(q0: np.ndarray, q1: np.ndarray, u) -> np.ndarray:
    """Spherical interpolation along the shorter arc; u = 0 gives q0, u = 1 gives ±q1.

    Broadcasts over leading dims; ``u`` is [...] (no trailing 4)."""
    q0, q1 = normalize(q0), normalize(q1)
    u = np.asarray(u, dtype=np.float64)[..., None]
    dot = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(dot < 0, -q1, q1)                                 # shorter arc
    dot = np.clip(np.abs(dot), 0.0, 1.0)
    theta = np.arccos(dot)
    near = dot > 0.9995       # sin(theta) ~ 0: the normalised lerp is accurate and stable there
    sin_t = np.where(near, 1.0, np.sin(theta))
    w0 = np.where(near, 1 - u, np.sin((1 - u) * theta) / sin_t)
    w1 = np.where(near, u, np.sin(u * theta) / sin_t)
    return normalize(w0 * q0 + w1 * q1)


# ---------------------------------------------------------------- poses and resampling

def make_poses(positions: np.ndarray, quats: np.ndarray, previous: np.ndarray | None = None) -> np.ndarray:
    """[T, 7] poses from positions [T, 3] and quaternions [T, 4] (normalised and sign-aligned; after the
    pose ``previous`` [7], when the poses continue a sequence)."""
    return np.concatenate([np.asarray(positions, dtype=np.float64),
                           align_signs(normalize(quats), None if previous is None else previous[3:7])], axis=-1)


def poses_euler(poses: np.ndarray) -> np.ndarray:
    """[T, 6] = x, y, z, yaw, pitch, roll (degrees) of [T, 7] poses."""
    yaw, pitch, roll = euler_from_quat(poses[..., 3:7])
    return np.concatenate([poses[..., :3], np.stack([yaw, pitch, roll], -1)], -1)


def grid_frames(duration_s: float, fps: float) -> int:
    """Video frames whose times lie in [0, duration_s] (a frame within 1e-6 s of the end counts)."""
    return int(math.floor(duration_s * fps + 1e-6)) + 1


def resample(times: np.ndarray, positions: np.ndarray, quats: np.ndarray, fps: float,
             max_frames: int | None = None) -> np.ndarray:
    """Poses [F, 7] at times ``times[0] + f / fps`` for f in [0, F), F = frames up to ``times[-1]``
    (at most ``max_frames``: the first frames only, each the same as without the limit).

    Between keyframes: linear position, slerp rotation (shorter arc). A grid time within 1e-9 s of a
    keyframe returns that keyframe exactly. ``times`` [K] must be strictly increasing and span a finite
    time (parsers check).
    """
    times = np.asarray(times, dtype=np.float64)
    positions, quats = np.asarray(positions, dtype=np.float64), normalize(quats)
    assert times.ndim == 1 and len(times) >= 1 and np.all(np.diff(times) > 0)
    frames = grid_frames(times[-1] - times[0], fps)
    if max_frames is not None:
        frames = min(frames, max_frames)
    grid = times[0] + np.arange(frames) / fps
    if len(times) == 1:
        return make_poses(positions[:1], quats[:1])
    seg = np.clip(np.searchsorted(times, grid, side="right") - 1, 0, len(times) - 2)
    u = np.clip((grid - times[seg]) / (times[seg + 1] - times[seg]), 0.0, 1.0)
    pos = (1 - u)[:, None] * positions[seg] + u[:, None] * positions[seg + 1]
    rot = slerp(quats[seg], quats[seg + 1], u)
    for side in (seg, seg + 1):                    # exact keyframes, not 1-ulp interpolations of them
        hit = np.abs(grid - times[side]) < 1e-9
        pos[hit], rot[hit] = positions[side[hit]], quats[side[hit]]
    return make_poses(pos, rot)
