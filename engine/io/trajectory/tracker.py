"""Target camera poses -> actions: the tracker every pose format (YAML keyframes, pose CSV, nerfstudio)
goes through.

Owns the resampling of a file's timed poses onto the 16 fps grid (``_pose_targets``) and the causal,
greedy tracking of those targets (``_track``): each frame picks the turn nearest the next target
(``_mouse_chooser``), then the keys whose calibrated motion lands nearest it (``_keyboard_options``),
from where the camera actually is, so what one frame misses the next makes up. How far the resulting
path strays from the targets is the ``TrackingError``.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from engine.geometry import grid_frames, poses_euler, resample, wrap_degrees
from engine.io.actions import KEYBOARD_KEYS
from engine.io.poses import FPS, Calibration, advance, state_from_pose
from engine.io.trajectory.build import TrackingError, _Actions
from engine.io.trajectory.fields import _Context
from engine.io.trajectory.kinematics import _moves


def _keyboard_options(mode: str, cal: Calibration) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Every keyboard row a tracker may emit (no keys first, so ties prefer pressing nothing) and its
    (forward, right) motion."""
    signs = [0, 1, -1]
    if mode == "universal":
        pairs = list(itertools.product(signs, signs))
    else:
        pairs = [(f, 0) for f in signs]
    rows = np.zeros((len(pairs), len(KEYBOARD_KEYS[mode])))
    for i, (f, r) in enumerate(pairs):
        if f:
            rows[i, 0 if f > 0 else 1] = 1.0
        if r:
            rows[i, 3 if r > 0 else 2] = 1.0
    forward, right, _, _ = _moves(mode, rows, np.zeros((len(rows), 2)), cal)
    return rows, list(zip(forward.tolist(), right.tolist()))


def _mouse_chooser(cal: Calibration) -> Callable[[float], tuple[float, float]]:
    """A function: wanted degrees -> (mouse value, degrees it turns), the value float32-exact (as the
    model receives it) and chosen to land nearest: one of 0, +-mouse_step when quantising, else the
    clipped continuous value (0 inside the dead zone)."""
    step = float(np.float32(cal.mouse_step))
    levels = [(v, float(cal.mouse_degrees(v))) for v in (0.0, -step, step)]   # 0 first: ties turn nothing

    def quantised(want: float) -> tuple[float, float]:
        return min(levels, key=lambda level: abs(level[1] - want))

    def continuous(want: float) -> tuple[float, float]:
        value = float(np.float32(max(-step, min(step, want / cal.degrees_per_mouse_unit))))
        return (value, float(cal.mouse_degrees(value))) if abs(value) >= cal.mouse_dead_zone else (0.0, 0.0)

    return quantised if cal.quantise_mouse else continuous


def _track(ctx: _Context, targets: np.ndarray, mode: str, cal: Calibration, fmt: str,
           file_frames: int | None = None) -> _Actions:
    """Actions that drive the camera from ``targets[0]`` through targets [K, 7] as closely as the
    mode's action space allows: each frame picks the turn, then the keys, nearest to the next target
    from where the camera actually is, so what one frame misses the next makes up (bounded error).
    ``file_frames``: the actions of the whole file when ``targets`` are only its first poses."""
    if mode == "templerun":
        raise ctx.error("camera poses cannot drive templerun (its actions are lane moves and turns of an "
                        "always-running character); use segments: or a templerun action CSV")
    euler = poses_euler(targets)
    yaw_target = np.degrees(np.unwrap(np.radians(euler[:, 3])))      # turns accumulate
    rows, options = _keyboard_options(mode, cal)
    mouse_for = _mouse_chooser(cal)
    start = state = state_from_pose(targets[0])._replace(yaw=float(yaw_target[0]))
    keyboard, mouse = np.zeros((len(targets) - 1, rows.shape[1])), np.zeros((len(targets) - 1, 2))
    errors = np.zeros((len(targets) - 1, 3))   # frame i's position, yaw and pitch error in row i - 1
    for i in range(1, len(targets)):
        m_pitch, dpitch = (0.0, 0.0) if mode == "gta_drive" else mouse_for(euler[i, 4] - state.pitch)
        m_yaw, dyaw = mouse_for(yaw_target[i] - state.yaw)
        heading = math.radians(state.yaw + dyaw / 2)
        dx, dz = targets[i, 0] - state.x, targets[i, 2] - state.z
        want = (dx * math.sin(heading) - dz * math.cos(heading), dx * math.cos(heading) + dz * math.sin(heading))
        pick = min(range(len(options)), key=lambda j: math.dist(options[j], want))
        state = advance(state, *options[pick], dyaw, dpitch, cal.pitch_limit)
        keyboard[i - 1], mouse[i - 1] = rows[pick], (m_pitch, m_yaw)
        errors[i - 1] = (math.dist(targets[i, :3], state[:3]), abs(float(wrap_degrees(yaw_target[i] - state.yaw))),
                         abs(euler[i, 4] - state.pitch))
    return _Actions(keyboard, mouse, start, TrackingError.over(errors), fmt, file_frames, errors)


def _pose_targets(ctx: _Context, times: np.ndarray, positions: np.ndarray, quats: np.ndarray, frames: int,
                  line: int | None, field: str, end: float | None = None) -> tuple[np.ndarray, int]:
    """The resampled poses a session of ``frames`` frames can use (the first ``frames + 1``), and the
    actions the whole file describes (one per step between its grid poses). ``end``: the file's last
    time, when ``times`` are only the rows the session reaches."""
    span = float(times[-1] if end is None else end) - float(times[0])
    if not math.isfinite(span * FPS):   # 1e308 s is finite, its frames at FPS are not
        raise ctx.error(f"the times span {span:g} s: not a finite duration at {FPS} fps", line, field)
    return resample(times, positions, quats, FPS, max_frames=frames + 1), grid_frames(span, FPS) - 1
