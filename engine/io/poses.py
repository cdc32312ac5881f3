"""How MG2's actions move a camera: the calibration, and the per-frame kinematics that integrate actions
into poses on the 16 fps video grid.

Poses follow the engine's one convention (``engine.geometry``: y-up world, camera looking along its
-z, ``[T, 7]`` = position + w-first quaternion); the rotation maths and resampling live there, torch-
and action-free, so the retrieval can use them without depending on the trajectory readers.

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
from engine.geometry import make_poses, poses_euler, quat_from_euler

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


def states_to_poses(states: list[CameraState], previous: np.ndarray | None = None) -> np.ndarray:
    """[T, 7] poses of a list of states (``previous``: the pose before the first, when they continue a
    sequence: the quaternions' signs are aligned to it)."""
    a = np.asarray(states, dtype=np.float64).reshape(-1, 6)
    return make_poses(a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5]), previous)
