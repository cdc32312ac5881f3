"""Camera poses: the one convention every trajectory is converted to, rotation maths, resampling onto
the 16 fps video grid, and the calibration that links camera motion to MG2's actions.

Convention (OpenGL / nerfstudio camera axes in a y-up world):
  * World frame: right-handed, +y up. Units are "world units"; the default calibration makes one unit
    roughly one metre (see ``Calibration``).
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

Kinematics of MG2's actions (how a camera moves per video frame; the pose of frame i+1 is the pose of
frame i advanced by the action of frame i, as in Matrix-Game 3's ``compute_next_pose_from_action``):
yaw and pitch change by the calibrated degrees of the mouse value (a dead zone makes tiny values zero;
pitch is clamped to +-``pitch_limit``); keys move the camera in the horizontal plane along the heading
halfway between the old and the new yaw (the midpoint rule, so that a step followed by its mirror
image returns exactly); pitch, height and roll never change the position. Height (y) and roll stay
what they were at the start.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from engine.config import CalibrationConfig

FPS = 16   # MG2's video rate; one action per video frame


@dataclass(frozen=True)
class Calibration(CalibrationConfig):
    """How MG2 actions map to camera motion and back; fields and defaults are the config's.

    MG2 defines no camera model (it learned one from data), so the defaults are Matrix-Game 3's
    pose-from-action constants (``Matrix-Game-3/utils/utils.py``): 15 degrees per frame per unit of
    mouse value with a 0.02 dead zone, so MG2's camera press (mouse 0.1) turns **1.5 degrees per frame
    = 24 degrees per second** (a full turn in 240 frames, 15 s); a held move key advances **12.35
    MG3 units per frame, which MG3 scales by 0.01, i.e. 0.1235 world units (about 2 m/s at 16 fps)**,
    and a diagonal (two keys) 8.73 per axis, i.e. the same speed (1/sqrt 2 per axis). These are
    assumptions about MG2 until measured on its output.
    """

    def __post_init__(self) -> None:
        assert self.degrees_per_mouse_unit > 0 and self.distance_per_frame > 0
        assert 0 <= self.mouse_dead_zone < self.mouse_step and 0 < self.pitch_limit <= 90

    @classmethod
    def coerce(cls, obj: Any) -> "Calibration":
        """A ``Calibration`` from itself, None (defaults) or any dataclass sharing some field names
        (e.g. the session config's calibration section); its other fields are ignored."""
        if obj is None or isinstance(obj, cls):
            return obj or cls()
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in dataclasses.asdict(obj).items() if k in names})

    def mouse_degrees(self, value):
        """Degrees turned in one frame by a mouse value (scalar or array), dead zone applied."""
        value = np.asarray(value, dtype=np.float64)
        return np.where(np.abs(value) >= self.mouse_dead_zone, value * self.degrees_per_mouse_unit, 0.0)


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


def align_signs(q: np.ndarray) -> np.ndarray:
    """A [T, 4] sequence with each quaternion's sign flipped so that consecutive dots are >= 0."""
    q = np.array(q, dtype=np.float64)
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

def make_poses(positions: np.ndarray, quats: np.ndarray) -> np.ndarray:
    """[T, 7] poses from positions [T, 3] and quaternions [T, 4] (normalised and sign-aligned)."""
    return np.concatenate([np.asarray(positions, dtype=np.float64),
                           align_signs(normalize(quats))], axis=-1)


def poses_euler(poses: np.ndarray) -> np.ndarray:
    """[T, 6] = x, y, z, yaw, pitch, roll (degrees) of [T, 7] poses."""
    yaw, pitch, roll = euler_from_quat(poses[..., 3:7])
    return np.concatenate([poses[..., :3], np.stack([yaw, pitch, roll], -1)], -1)


def grid_frames(duration_s: float, fps: float = FPS) -> int:
    """Video frames whose times lie in [0, duration_s] (a frame within 1e-6 s of the end counts)."""
    return int(math.floor(duration_s * fps + 1e-6)) + 1


def resample(times: np.ndarray, positions: np.ndarray, quats: np.ndarray, fps: float = FPS) -> np.ndarray:
    """Poses [F, 7] at times ``times[0] + f / fps`` for f in [0, F), F = frames up to ``times[-1]``.

    Between keyframes: linear position, slerp rotation (shorter arc). A grid time within 1e-9 s of a
    keyframe returns that keyframe exactly. ``times`` [K] must be strictly increasing (parsers check).
    """
    times = np.asarray(times, dtype=np.float64)
    positions, quats = np.asarray(positions, dtype=np.float64), normalize(quats)
    assert times.ndim == 1 and len(times) >= 1 and np.all(np.diff(times) > 0)
    frames = grid_frames(times[-1] - times[0], fps)
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


# ---------------------------------------------------------------- kinematics

class CameraState(NamedTuple):
    """A camera during integration: position and *unwrapped* yaw (so turns accumulate), degrees."""

    x: float
    y: float
    z: float
    yaw: float
    pitch: float
    roll: float


def state_from_pose(pose: np.ndarray) -> CameraState:
    x, y, z, yaw, pitch, roll = (float(v) for v in poses_euler(np.asarray(pose, dtype=np.float64)))
    return CameraState(x, y, z, yaw, pitch, roll)


ORIGIN = CameraState(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def advance(state: CameraState, forward: float, right: float, dyaw: float, dpitch: float,
            pitch_limit: float) -> CameraState:
    """The state one frame later: turn, clamp pitch, then move ``forward``/``right`` world units in
    the horizontal plane along the heading halfway between the old and the new yaw."""
    yaw = state.yaw + dyaw
    pitch = min(max(state.pitch + dpitch, -pitch_limit), pitch_limit)
    heading = math.radians((state.yaw + yaw) / 2)
    s, c = math.sin(heading), math.cos(heading)
    # horizontal forward = (sin h, 0, -cos h), right = (cos h, 0, sin h)
    return CameraState(state.x + forward * s + right * c, state.y, state.z - forward * c + right * s,
                       yaw, pitch, state.roll)


def integrate(forward: np.ndarray, right: np.ndarray, dyaw: np.ndarray, dpitch: np.ndarray,
              start: CameraState, pitch_limit: float) -> list[CameraState]:
    """States of frames [0, T] (T + 1 of them) from T per-frame moves, starting at ``start``."""
    states = [start]
    for move in zip(forward.tolist(), right.tolist(), dyaw.tolist(), dpitch.tolist()):
        states.append(advance(states[-1], *move, pitch_limit))
    return states


def states_to_poses(states: list[CameraState]) -> np.ndarray:
    """[T, 7] poses of a list of states."""
    a = np.asarray(states, dtype=np.float64).reshape(-1, 6)
    return make_poses(a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5]))
