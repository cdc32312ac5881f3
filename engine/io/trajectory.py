"""Trajectory files → per-video-frame MG2 actions (the model's input) and camera poses (the memory's key).

Contract: ``load_trajectory(path, mode, frames, repeat, calibration)`` returns a ``Trajectory`` of exactly
``frames`` video frames in ``mode``'s action space, or raises ``InputError`` whose one-line message
names the file and the line or field at fault. Poses follow ``engine.geometry`` (y-up world, camera
looks along -z, yaw > 0 turns right, pitch > 0 looks up; ``[T, 7]`` = x, y, z, qw, qx, qy, qz).

One pipeline for every format: the file becomes per-frame actions plus a start pose (pose files are
first resampled onto the 16 fps grid — linear position, slerp rotation — and then *tracked*: each frame
picks the action whose calibrated motion lands nearest the next target pose, carrying what it missed
into the next frame); the actions are extended to ``frames`` (loop or ping-pong) and integrated with the
calibration into the poses. So the poses always describe the camera the actions drive — the memory is
keyed by the path the model was told to take, not by a path it could not express. ``Trajectory.tracking``
says how far that path strays from the file's poses (vertical motion, roll, pitch in gta_drive and
strafing in gta_drive cannot be expressed and show up there). Pose files cannot drive templerun (its
actions are discrete lane changes and turns of an always-running character).

Formats (by extension; other names are sniffed from the content):

``.yaml`` / ``.yml``::

    start: {position: [0, 0, 0], yaw: 0, pitch: 0, roll: 0}   # optional; only without keyframes
    keyframes:                 # camera poses; times relative to the first keyframe
      - t: 0.0                 # seconds, or `frame: N` (16 fps); strictly increasing
        position: [0, 0, 0]    # x, y, z; each field defaults to the previous keyframe's (first: 0)
        yaw: 0                 # degrees; consecutive keyframes must differ by less than 180
        pitch: 0               # degrees in [-90, 90]
        roll: 0                # optional
    segments:                  # actions, played after the keyframes (from the last keyframe's pose)
      - keys: [w, a]           # universal w s a d (or forward back left right); gta_drive w s, and
                               # a d steer (mouse yaw -/+0.1); templerun one of none jump slide
                               # turn_left turn_right left_side right_side
        camera: right          # or [up, right]: +-0.1 on pitch (up +) / yaw (right +); or
        # mouse: [0.0, 0.05]   # raw [pitch, yaw] mouse values (not with camera)
        frames: 24             # or `seconds: 1.5` (rounded to whole frames)

  Unknown keys, wrong types, NaN/inf and duplicate keys are errors naming the line.

``.csv`` (leading ``#`` comment lines and blank lines are skipped; header names are case-insensitive):
  * poses: ``t`` (seconds) or ``frame``, then ``x, y, z, yaw, pitch`` and optional ``roll`` (degrees; the
    columns in any order). Rotation between rows takes the shorter arc, so wrapped yaw is fine.
  * raw actions, one row per video frame, ``frame`` = 0, 1, 2, …:
    universal ``frame, w, s, a, d, mouse_pitch, mouse_yaw``; gta_drive ``frame, w, s, mouse_yaw``;
    templerun ``frame, none, jump, slide, turn_left, turn_right, left_side, right_side`` (one-hot).
    Keys are 0 or 1; mouse values within [-1, 1] (MG2 trained on 0 and +-0.1). A file for another
    mode is an error.

``.json``: nerfstudio ``camera_path.json``: ``camera_path: [{camera_to_world: 16 floats (row-major 4x4)
  or a nested 4x4 / 3x4, ...}]`` at ``fps`` (else ``len / seconds``). nerfstudio cameras already use our
  camera axes; its world is z-up, so world (x, y, z) becomes ours (x, z, -y) (``nerfstudio_up="y"``
  skips that).

Repeat: a file shorter than ``frames`` is extended at the action level — ``loop`` replays its actions
(a closed path revisits its places; an open one continues from where it ended), ``pingpong`` plays them
backwards mirrored (W<->S, A<->D, mouse negated; templerun swaps the turns and the sides), which retraces
the path exactly unless pitch hit its limit. A longer file is cut. ``Trajectory.repeat`` records which.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Union

import numpy as np
import torch
import yaml

from engine.errors import ConfigError, InputError
from engine.geometry import grid_frames, matrix_to_quat, poses_euler, quat_from_euler, resample, wrap_degrees
from engine.io.actions import CAMERA_STEP, KEYBOARD_KEYS, ActionTrack
from engine.io.poses import (FPS, ORIGIN, Calibration, CameraState, advance, integrate, state_from_pose,
                             states_to_poses)

PathLike = Union[str, os.PathLike]
MODES = tuple(KEYBOARD_KEYS)
REPEATS = ("loop", "pingpong")

_PACKAGE_DIR = Path(__file__).resolve().parents[1] / "trajectories"     # engine/trajectories (wheel data)
_REPO_DIR = Path(__file__).resolve().parents[2] / "trajectories"        # checkout / editable install

# Raw action CSV columns after `frame`, per mode (the order of KEYBOARD_KEYS, then the mouse).
_ACTION_COLUMNS = {
    "universal": ("w", "s", "a", "d", "mouse_pitch", "mouse_yaw"),
    "gta_drive": ("w", "s", "mouse_yaw"),
    "templerun": KEYBOARD_KEYS["templerun"],
}
# Keyboard column permutation that plays an action backwards (ping-pong).
_MIRROR = {"universal": [1, 0, 3, 2], "gta_drive": [1, 0], "templerun": [0, 1, 2, 4, 3, 6, 5]}
_KEY_NAMES = {"w": "forward", "s": "back", "a": "left", "d": "right",
              "forward": "forward", "back": "back", "left": "left", "right": "right"}
_CAMERA_NAMES = {"up": (0, 1.0), "down": (0, -1.0), "left": (1, -1.0), "right": (1, 1.0)}
_MOUSE_LIMIT = 1.0          # larger mouse values are unit mistakes (degrees?), not MG2 inputs
_POSE_COLUMNS = ("x", "y", "z", "yaw", "pitch")


@dataclass(frozen=True)
class TrackingError:
    """Largest deviation of the action-driven path from a pose file's resampled poses (0 for actions)."""

    position: float = 0.0      # world units (3-D distance)
    yaw_deg: float = 0.0
    pitch_deg: float = 0.0


@dataclass
class Trajectory:
    """What a session consumes: per-video-frame actions and the camera pose of every frame."""

    actions: ActionTrack       # keyboard [T, k] float32, mouse [T, 2] float32 (None for templerun)
    poses: np.ndarray          # [T, 7] float64: x, y, z, qw, qx, qy, qz (c2w; engine.geometry convention)
    mode: str
    source: str                # the file (or what produced the actions)
    format: str                # yaml | pose csv | action csv | nerfstudio | actions
    source_frames: int         # frames the file itself describes
    repeat: str                # none | loop | pingpong — how it was extended to ``frames``
    tracking: TrackingError

    @property
    def frames(self) -> int:
        return self.actions.frames

    def describe(self) -> str:
        """One line for logs: where from, how long, how extended, how well poses were tracked."""
        text = f"{self.source} ({self.format}, {self.source_frames} frames"
        if self.repeat != "none":
            text += f", {self.repeat} x{self.frames / self.source_frames:.2f}"
        elif self.frames < self.source_frames:
            text += ", cut"
        text += f") -> {self.frames} frames, {self.mode}"
        if self.tracking != TrackingError():
            t = self.tracking
            text += (f"; tracked within {t.position:.3g} units, {t.yaw_deg:.3g} deg yaw, "
                     f"{t.pitch_deg:.3g} deg pitch")
        return text


# ================================================================ public API

def load_trajectory(path: PathLike, mode: str, frames: int, repeat: str = "loop",
                    calibration: Any = None, nerfstudio_up: str = "z") -> Trajectory:
    """Read a trajectory file and return exactly ``frames`` frames of ``mode`` actions and poses.

    ``calibration`` is a ``Calibration`` (or any dataclass sharing its field names; None = defaults).
    Raises InputError for anything wrong with the file, ConfigError for bad arguments.
    """
    _check_arguments(mode, frames, repeat, nerfstudio_up)
    cal = Calibration.coerce(calibration)
    ctx = _Context(str(path))
    text = _read_text(ctx, Path(path))
    kind = _detect_format(ctx, Path(path), text)
    loader: Callable[..., _Actions] = {"yaml": _load_yaml, "csv": _load_csv, "json": _load_nerfstudio}[kind]
    acts = loader(ctx, text, mode, cal, frames=frames, nerfstudio_up=nerfstudio_up)
    return _build(acts, mode, frames, repeat, cal, source=str(path))


def trajectory_from_actions(track: ActionTrack, mode: str, calibration: Any = None,
                            source: str = "built-in schedule", start: CameraState = ORIGIN) -> Trajectory:
    """A ``Trajectory`` of given actions (e.g. ``builtin_schedule``), with their integrated poses."""
    assert mode in MODES
    cal = Calibration.coerce(calibration)
    mouse = None if track.mouse is None else track.mouse.double().numpy()
    acts = _Actions(track.keyboard.double().numpy(), mouse, start, TrackingError(), "actions")
    return _build(acts, mode, track.frames, "loop", cal, source)


def poses_from_actions(track: ActionTrack, mode: str, calibration: Any = None,
                       start: CameraState = ORIGIN) -> np.ndarray:
    """[T, 7] poses of frames [0, T) driven by ``track`` from ``start`` (frame 0 is ``start``)."""
    mouse = None if track.mouse is None else track.mouse.double().numpy()
    cal = Calibration.coerce(calibration)
    states = _integrate_actions(track.keyboard.double().numpy(), mouse, mode, cal, start)
    return states_to_poses(states[:track.frames])


def packaged_trajectory(name: str) -> Path:
    """Path of a shipped trajectory: ``engine/trajectories/NAME`` (package data: the build maps the
    source tree's top-level ``trajectories/`` there, see ``engine.resources``) if present, else the
    checkout's top-level ``trajectories/NAME`` (an editable install).
    """
    for folder in (_PACKAGE_DIR, _REPO_DIR):
        if (folder / name).is_file():
            return folder / name
    available = sorted({p.name for d in (_PACKAGE_DIR, _REPO_DIR) if d.is_dir() for p in d.iterdir()})
    raise InputError(f"no packaged trajectory {name!r} in {_PACKAGE_DIR} or {_REPO_DIR} "
                     f"(available: {', '.join(available) or 'none'})")


# ================================================================ errors and small readers

class _Context:
    """Builds the one-line error messages: ``FILE[ line N]: [FIELD: ]message``."""

    def __init__(self, path: str):
        self.path = path

    def error(self, message: str, line: int | None = None, field: str | None = None) -> InputError:
        where = self.path + (f" line {line}" if line else "")
        text = f"{where}: {field + ': ' if field else ''}{message}"
        return InputError(re.sub(r"\s*[\r\n]+\s*", " ", text))   # one line, whatever the input held


def _show(value: Any) -> str:
    """A user's value for a message: repr, shortened."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_arguments(mode: str, frames: int, repeat: str, up: str) -> None:
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise ConfigError(f"frames must be a positive integer, got {frames!r}")
    if repeat not in REPEATS:
        raise ConfigError(f"repeat must be loop or pingpong, got {repeat!r}")
    if up not in ("y", "z"):
        raise ConfigError(f"nerfstudio_up must be y or z, got {up!r}")


def _read_text(ctx: _Context, path: Path) -> str:
    if not path.exists():
        raise ctx.error("trajectory file not found")
    if not path.is_file():
        raise ctx.error("not a file")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ctx.error(f"not a UTF-8 text file (byte {exc.start})") from None
    except OSError as exc:
        raise ctx.error(f"cannot read ({exc.strerror})") from None
    if not text.strip():
        raise ctx.error("file is empty")
    return text


def _content_lines(text: str):
    """(line number, stripped text) of lines that are neither blank nor ``#`` comments."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped


def _detect_format(ctx: _Context, path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix in (".csv", ".json"):
        return suffix[1:]
    first = next((line for _, line in _content_lines(text)), "")
    if first.startswith("{"):
        return "json"
    if re.fullmatch(r"[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)+", first):
        return "csv"
    if re.match(r"(keyframes|segments|start)\s*:", first):
        return "yaml"
    raise ctx.error("unknown trajectory format (expected .yaml, a pose or action .csv, or a nerfstudio "
                    "camera_path .json)")


def _number(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    """A finite float from a YAML/JSON number, or from CSV text when ``text`` (YAML/JSON strings are
    wrong types, not numbers)."""
    if text and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ctx.error(f"{_show(value)} is not a number", line, field) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ctx.error(f"expected a number, got {_show(value)}", line, field)
    try:
        number = float(value)
    except OverflowError:   # an integer beyond the float range
        raise ctx.error(f"{_show(value)} is too large", line, field) from None
    if not math.isfinite(number):
        raise ctx.error(f"{value} is not a finite number", line, field)
    return number


def _integer(ctx: _Context, value: Any, line: int | None, field: str, minimum: int, text: bool = False) -> int:
    number = _number(ctx, value, line, field, text)
    if number != int(number) or number < minimum:
        raise ctx.error(f"expected a whole number >= {minimum}, got {_show(value)}", line, field)
    return int(number)


def _pitch(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    pitch = _number(ctx, value, line, field, text)
    if abs(pitch) > 90:
        raise ctx.error(f"pitch {pitch:g} is outside [-90, 90] degrees", line, field)
    return pitch


def _check_times(ctx: _Context, times: list[float], shown: list[str], lines: list[int | None],
                 field: Callable[[int], str]) -> None:
    """Times must strictly increase; ``shown`` is each time as the user wrote it (seconds or frame)."""
    for i in range(1, len(times)):
        if times[i] == times[i - 1]:
            raise ctx.error(f"duplicate time ({shown[i]})", lines[i], field(i))
        if times[i] < times[i - 1]:
            raise ctx.error(f"time goes backwards ({shown[i]} after {shown[i - 1]})", lines[i], field(i))


# ================================================================ action spaces and kinematics

@dataclass
class _Actions:
    """A file's own frames: keyboard [N, k] and mouse [N, 2] | None (float64), the start pose.

    Only the frames a session can use are made: a file longer than the session is read to its end but
    made into actions only up to the session's length (tracking is causal, so those frames are the same
    as for the whole file); ``file_frames`` counts the frames of the whole file."""

    keyboard: np.ndarray
    mouse: np.ndarray | None
    start: CameraState
    tracking: TrackingError
    format: str
    file_frames: int | None = None    # None: len(keyboard), the file was made into actions whole

    @property
    def frames_in_file(self) -> int:
        return len(self.keyboard) if self.file_frames is None else self.file_frames

    def appended(self, keyboard: np.ndarray, mouse: np.ndarray | None, file_frames: int, fmt: str) -> "_Actions":
        mouse_all = None if mouse is None else np.concatenate([self.mouse, mouse])
        return _Actions(np.concatenate([self.keyboard, keyboard]), mouse_all, self.start, self.tracking, fmt,
                        self.frames_in_file + file_frames)


def _empty(mode: str) -> tuple[np.ndarray, np.ndarray | None]:
    return np.zeros((0, len(KEYBOARD_KEYS[mode]))), (None if mode == "templerun" else np.zeros((0, 2)))


def _still(mode: str) -> tuple[np.ndarray, np.ndarray | None]:
    """One frame of no motion (templerun's 'none' is a key of its own)."""
    keyboard, mouse = np.zeros((1, len(KEYBOARD_KEYS[mode]))), None
    if mode == "templerun":
        keyboard[0, 0] = 1.0
    else:
        mouse = np.zeros((1, 2))
    return keyboard, mouse


def _moves(mode: str, keyboard: np.ndarray, mouse: np.ndarray | None, cal: Calibration):
    """Per-frame (forward, right, dyaw, dpitch) of actions [N, k] / [N, 2], per the calibration."""
    held = keyboard > 0.5
    zeros = np.zeros(len(keyboard))
    if mode == "templerun":   # the character always runs forward; turns and lane moves are keys
        forward = np.full(len(keyboard), cal.distance_per_frame)
        right = cal.distance_per_frame * (held[:, 6].astype(float) - held[:, 5])
        dyaw = cal.templerun_turn_degrees * (held[:, 4].astype(float) - held[:, 3])
        return forward, right, dyaw, zeros
    # Opposite keys held together cancel (as in MG3's integrator).
    fwd = (held[:, 0] & ~held[:, 1]).astype(float) - (held[:, 1] & ~held[:, 0])
    side = zeros if mode == "gta_drive" else (held[:, 3] & ~held[:, 2]).astype(float) - (held[:, 2] & ~held[:, 3])
    speed = cal.distance_per_frame * np.where((fwd != 0) & (side != 0), cal.diagonal_scale, 1.0)
    dpitch = zeros if mode == "gta_drive" else cal.mouse_degrees(mouse[:, 0])   # gta steers with yaw only
    return fwd * speed, side * speed, cal.mouse_degrees(mouse[:, 1]), dpitch


def _integrate_actions(keyboard: np.ndarray, mouse: np.ndarray | None, mode: str, cal: Calibration,
                       start: CameraState) -> list[CameraState]:
    return integrate(*_moves(mode, keyboard, mouse, cal), start, cal.pitch_limit)


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
    worst = [0.0, 0.0, 0.0]
    for i in range(1, len(targets)):
        m_pitch, dpitch = (0.0, 0.0) if mode == "gta_drive" else mouse_for(euler[i, 4] - state.pitch)
        m_yaw, dyaw = mouse_for(yaw_target[i] - state.yaw)
        heading = math.radians(state.yaw + dyaw / 2)
        dx, dz = targets[i, 0] - state.x, targets[i, 2] - state.z
        want = (dx * math.sin(heading) - dz * math.cos(heading), dx * math.cos(heading) + dz * math.sin(heading))
        pick = min(range(len(options)), key=lambda j: math.dist(options[j], want))
        state = advance(state, *options[pick], dyaw, dpitch, cal.pitch_limit)
        keyboard[i - 1], mouse[i - 1] = rows[pick], (m_pitch, m_yaw)
        errors = (math.dist(targets[i, :3], state[:3]), abs(float(wrap_degrees(yaw_target[i] - state.yaw))),
                  abs(euler[i, 4] - state.pitch))
        worst = [max(w, e) for w, e in zip(worst, errors)]
    return _Actions(keyboard, mouse, start, TrackingError(*worst), fmt, file_frames)


def _pose_targets(ctx: _Context, times: np.ndarray, positions: np.ndarray, quats: np.ndarray, frames: int,
                  line: int | None, field: str) -> tuple[np.ndarray, int]:
    """The resampled poses a session of ``frames`` frames can use (the first ``frames + 1``), and the
    actions the whole file describes (one per step between its grid poses)."""
    span = float(times[-1]) - float(times[0])
    if not math.isfinite(span):
        raise ctx.error(f"the times span {span:g} s: not a finite duration", line, field)
    return resample(times, positions, quats, FPS, max_frames=frames + 1), grid_frames(span, FPS) - 1


def _build(acts: _Actions, mode: str, frames: int, repeat: str, cal: Calibration, source: str) -> Trajectory:
    """Extend or cut the file's actions to ``frames``, then integrate them into poses."""
    keyboard, mouse = acts.keyboard, acts.mouse
    if len(keyboard) == 0:                  # a single keyframe: a still camera
        keyboard, mouse = _still(mode)
    n = max(len(keyboard), acts.frames_in_file)
    assert n == len(keyboard) or len(keyboard) >= frames, "a file cut shorter than the session"
    used = "none"
    if n < frames:
        used = repeat
        if repeat == "pingpong":             # forward, then backwards mirrored: a period of 2n frames
            keyboard = np.concatenate([keyboard, keyboard[::-1][:, _MIRROR[mode]]])
            mouse = None if mouse is None else np.concatenate([mouse, -mouse[::-1]])
        index = np.arange(frames) % len(keyboard)
        keyboard, mouse = keyboard[index], (None if mouse is None else mouse[index])
    frames = int(frames)
    keyboard = keyboard[:frames].astype(np.float32)
    mouse = None if mouse is None else mouse[:frames].astype(np.float32)
    # Integrate the float32 values the model receives, so poses_from_actions(actions) == poses.
    states = _integrate_actions(keyboard.astype(np.float64), None if mouse is None else mouse.astype(np.float64),
                                mode, cal, acts.start)
    track = ActionTrack(torch.from_numpy(keyboard), None if mouse is None else torch.from_numpy(mouse))
    return Trajectory(track, states_to_poses(states[:frames]), mode, source, acts.format, n, used, acts.tracking)


# ================================================================ YAML

class _Map(dict):
    """A YAML mapping that remembers its line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _Seq(list):
    line: int = 0


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences carry line numbers, and which rejects duplicate keys."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    result = _Map()
    result.line, result.key_lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float)) or isinstance(key, bool):
            raise yaml.constructor.ConstructorError(None, None, f"key {_show(key)} is not a name",
                                                    key_node.start_mark)
        if key in result:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> _Seq:
    result = _Seq(loader.construct_sequence(node, deep=True))
    result.line = node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


def _parse_yaml(ctx: _Context, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_LineLoader)   # noqa: S506 — a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ctx.error(f"invalid YAML ({problem})", mark.line + 1 if mark else None) from None
    except (ValueError, OverflowError) as exc:   # a value the YAML resolver matched, e.g. 2001-13-45
        raise ctx.error(f"invalid YAML value ({exc})") from None
    except RecursionError:
        raise ctx.error("invalid YAML (nested too deeply)") from None


def _mapping(ctx: _Context, value: Any, line: int, field: str, allowed: tuple[str, ...]) -> _Map:
    if not isinstance(value, _Map):
        raise ctx.error(f"expected a mapping, got {_show(value)}", line, field)
    for key in value:
        if key not in allowed:
            raise ctx.error(f"unknown key {key!r} (allowed: {', '.join(allowed)})", value.line_of(key), field)
    return value


def _sequence(ctx: _Context, value: Any, line: int, field: str) -> _Seq:
    if not isinstance(value, _Seq) or not value:
        raise ctx.error(f"expected a non-empty list, got {_show(value)}", line, field)
    return value


def _load_yaml(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int, **_: Any) -> _Actions:
    top = ("keyframes", "segments", "start")
    data = _parse_yaml(ctx, text)
    if not isinstance(data, _Map):
        raise ctx.error("expected a mapping with keyframes: and/or segments:", getattr(data, "line", None))
    _mapping(ctx, data, data.line, "", top)
    if "keyframes" not in data and "segments" not in data:
        raise ctx.error("needs keyframes: and/or segments:", data.line)
    if "keyframes" in data:
        if "start" in data:
            raise ctx.error("start: is only for segments without keyframes (the first keyframe is the start)",
                            data.line_of("start"), "start")
        times, positions, quats = _parse_keyframes(ctx, data["keyframes"], data.line_of("keyframes"))
        targets, file_frames = _pose_targets(ctx, times, positions, quats, frames, data.line_of("keyframes"),
                                             "keyframes")
        acts = _track(ctx, targets, mode, cal, "yaml", file_frames)
    else:
        start = _parse_start(ctx, data["start"], data.line_of("start")) if "start" in data else ORIGIN
        acts = _Actions(*_empty(mode), start, TrackingError(), "yaml")
    if "segments" in data:
        room = max(0, frames - len(acts.keyboard))   # frames of segments the session can still use
        acts = acts.appended(*_parse_segments(ctx, data["segments"], data.line_of("segments"), mode, room), "yaml")
    return acts


def _vec3(ctx: _Context, value: Any, line: int, field: str) -> list[float]:
    if not isinstance(value, list) or len(value) != 3:
        raise ctx.error(f"expected [x, y, z], got {_show(value)}", line, field)
    return [_number(ctx, v, line, field) for v in value]


def _parse_start(ctx: _Context, value: Any, line: int) -> CameraState:
    m = _mapping(ctx, value, line, "start", ("position", "yaw", "pitch", "roll"))
    x, y, z = _vec3(ctx, m["position"], m.line_of("position"), "start.position") if "position" in m else (0, 0, 0)
    yaw = _number(ctx, m.get("yaw", 0.0), m.line_of("yaw"), "start.yaw")
    pitch = _pitch(ctx, m.get("pitch", 0.0), m.line_of("pitch"), "start.pitch")
    roll = _number(ctx, m.get("roll", 0.0), m.line_of("roll"), "start.roll")
    return CameraState(x, y, z, yaw, pitch, roll)


def _parse_keyframes(ctx: _Context, value: Any, line: int):
    """times [K] (s), positions [K, 3], quaternions [K, 4] of the keyframes: list."""
    items = _sequence(ctx, value, line, "keyframes")
    allowed = ("t", "frame", "position", "yaw", "pitch", "roll")
    current = {"position": [0.0, 0.0, 0.0], "yaw": 0.0, "pitch": 0.0, "roll": 0.0}
    times, shown, lines, rows = [], [], [], []
    for i, item in enumerate(items):
        name = f"keyframes[{i}]"
        kf = _mapping(ctx, item, items.line, name, allowed)
        if ("t" in kf) == ("frame" in kf):
            raise ctx.error("give exactly one of t (seconds) or frame", kf.line, name)
        if "t" in kf:
            times.append(_number(ctx, kf["t"], kf.line_of("t"), f"{name}.t"))
            shown.append(f"t {times[-1]:g} s")
        else:
            frame = _integer(ctx, kf["frame"], kf.line_of("frame"), f"{name}.frame", 0)
            times.append(frame / FPS)
            shown.append(f"frame {frame}")
        lines.append(kf.line)
        previous = dict(current)
        if "position" in kf:
            current["position"] = _vec3(ctx, kf["position"], kf.line_of("position"), f"{name}.position")
        for angle in ("yaw", "pitch", "roll"):
            if angle in kf:
                read = _pitch if angle == "pitch" else _number
                current[angle] = read(ctx, kf[angle], kf.line_of(angle), f"{name}.{angle}")
                # slerp takes the shorter arc: a turn of 180 degrees or more would silently go the other way
                if i and abs(current[angle] - previous[angle]) >= 180:
                    raise ctx.error(f"{angle} changes by {current[angle] - previous[angle]:g} degrees from the "
                                    f"previous keyframe; rotation takes the shorter arc, so split turns of 180 "
                                    f"degrees or more with more keyframes", kf.line_of(angle), f"{name}.{angle}")
        rows.append(current["position"] + [current["yaw"], current["pitch"], current["roll"]])
    _check_times(ctx, times, shown, lines, lambda i: f"keyframes[{i}]")
    a = np.asarray(rows)
    return np.asarray(times), a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5])


def _parse_segments(ctx: _Context, value: Any, line: int, mode: str, room: int):
    """keyboard [N, k], mouse [N, 2] | None of the segments: list, in ``mode``'s action space, made for
    the first ``room`` frames only (every segment is still checked), and the frames of them all."""
    items = _sequence(ctx, value, line, "segments")
    allowed = ("keys", "camera", "mouse", "seconds", "frames")
    keyboards, mice, total = [], [], 0
    for i, item in enumerate(items):
        name = f"segments[{i}]"
        seg = _mapping(ctx, item, items.line, name, allowed)
        n = _segment_frames(ctx, seg, name)
        key_row, mouse_row = _segment_action(ctx, seg, name, mode)
        made = min(n, max(0, room - total))
        keyboards.append(np.repeat(key_row[None], made, 0))
        mice.append(None if mouse_row is None else np.repeat(mouse_row[None], made, 0))
        total += n
    return np.concatenate(keyboards), (None if mode == "templerun" else np.concatenate(mice)), total


def _segment_frames(ctx: _Context, seg: _Map, name: str) -> int:
    if ("seconds" in seg) == ("frames" in seg):
        raise ctx.error("give exactly one of seconds or frames", seg.line, name)
    if "frames" in seg:
        return _integer(ctx, seg["frames"], seg.line_of("frames"), f"{name}.frames", 1)
    seconds = _number(ctx, seg["seconds"], seg.line_of("seconds"), f"{name}.seconds")
    if round(seconds * FPS) < 1:
        raise ctx.error(f"{seconds:g} s is less than one frame at {FPS} fps", seg.line_of("seconds"),
                        f"{name}.seconds")
    return round(seconds * FPS)


def _names(ctx: _Context, value: Any, line: int, field: str) -> list[str]:
    """A name or a list of names, lower-cased."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
        raise ctx.error(f"expected a name or a list of names, got {_show(value)}", line, field)
    return [v.strip().lower() for v in names]


def _segment_action(ctx: _Context, seg: _Map, name: str, mode: str):
    """(keyboard row [k], mouse row [2] | None) of one segment."""
    keys = _names(ctx, seg.get("keys", []), seg.line_of("keys"), f"{name}.keys")
    if mode == "templerun":
        for field in ("camera", "mouse"):
            if field in seg:
                raise ctx.error("templerun has no mouse", seg.line_of(field), f"{name}.{field}")
        return _templerun_row(ctx, keys, seg.line_of("keys"), f"{name}.keys"), None
    mouse = _segment_mouse(ctx, seg, name, mode)
    row = np.zeros(len(KEYBOARD_KEYS[mode]))
    for key in keys:
        channel = _KEY_NAMES.get(key)
        if channel is None:
            valid = "w, s, a, d" if mode == "universal" else "w, s (a, d steer)"
            raise ctx.error(f"{key!r} is not a {mode} key ({valid})", seg.line_of("keys"), f"{name}.keys")
        if channel in KEYBOARD_KEYS[mode]:
            row[KEYBOARD_KEYS[mode].index(channel)] = 1.0
            continue
        # gta_drive: A/D are steering, i.e. mouse yaw -/+ one camera step (MG2 §5.2).
        if "camera" in seg or "mouse" in seg:
            raise ctx.error(f"gta_drive steers with {key!r} or with camera/mouse, not both",
                            seg.line_of("keys"), f"{name}.keys")
        mouse[1] += CAMERA_STEP if channel == "right" else -CAMERA_STEP
    return row, mouse


def _templerun_row(ctx: _Context, keys: list[str], line: int, field: str) -> np.ndarray:
    names = KEYBOARD_KEYS["templerun"]
    keys = keys or ["none"]
    if len(keys) != 1 or keys[0] not in names:
        raise ctx.error(f"templerun takes exactly one of {', '.join(names)}; got {_show(keys)}", line, field)
    row = np.zeros(len(names))
    row[names.index(keys[0])] = 1.0
    return row


def _segment_mouse(ctx: _Context, seg: _Map, name: str, mode: str) -> np.ndarray:
    if "camera" in seg and "mouse" in seg:
        raise ctx.error("give camera or mouse, not both", seg.line, name)
    mouse = np.zeros(2)
    if "mouse" in seg:
        value, line = seg["mouse"], seg.line_of("mouse")
        if not isinstance(value, list) or len(value) != 2:
            raise ctx.error(f"expected [pitch, yaw], got {_show(value)}", line, f"{name}.mouse")
        mouse[:] = [_mouse_value(ctx, v, line, f"{name}.mouse") for v in value]
    line, field = seg.line_of("camera"), f"{name}.camera"
    for move in _names(ctx, seg.get("camera", []), line, field):
        if move not in _CAMERA_NAMES:
            raise ctx.error(f"unknown camera move {move!r} (up, down, left, right)", line, field)
        axis, sign = _CAMERA_NAMES[move]
        if mouse[axis]:
            raise ctx.error(f"camera moves {_show(seg['camera'])} contradict or repeat", line, field)
        mouse[axis] = sign * CAMERA_STEP
    if mode == "gta_drive" and mouse[0]:
        field = "camera" if "camera" in seg else "mouse"
        raise ctx.error("gta_drive has no mouse pitch (it steers with yaw only)", seg.line_of(field),
                        f"{name}.{field}")
    return mouse


def _mouse_value(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    number = _number(ctx, value, line, field, text)
    if abs(number) > _MOUSE_LIMIT:
        raise ctx.error(f"mouse value {number:g} is outside [-1, 1] (MG2's camera press is 0.1)", line, field)
    return number


# ================================================================ CSV

def _load_csv(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int, **_: Any) -> _Actions:
    rows = list(_content_lines(text))
    if not rows:
        raise ctx.error("no header line (only comments)")
    header_line, header = rows[0][0], [h.strip().lower() for h in rows[0][1].split(",")]
    for name in header:
        if header.count(name) > 1 or not name:
            raise ctx.error(f"column {name!r} is empty or repeated", header_line, "header")
    table = []
    for number, line in rows[1:]:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(header):
            raise ctx.error(f"expected {len(header)} values ({', '.join(header)}), got {len(fields)}", number)
        table.append((number, dict(zip(header, fields))))
    if not table:
        raise ctx.error("no data rows after the header", header_line)
    if set(header) & {"t", "roll", *_POSE_COLUMNS}:
        return _pose_csv(ctx, header, header_line, table, mode, cal, frames)
    return _action_csv(ctx, header, header_line, table, mode)


def _pose_csv(ctx: _Context, header: list[str], header_line: int, table, mode: str, cal: Calibration,
              frames: int) -> _Actions:
    if ("t" in header) == ("frame" in header):
        raise ctx.error("pose CSV needs exactly one of the columns t (seconds) or frame", header_line, "header")
    known = ("t", "frame", *_POSE_COLUMNS, "roll")
    for name in header:
        if name not in known:
            raise ctx.error(f"unknown column {name!r} (pose columns: t|frame, x, y, z, yaw, pitch[, roll])",
                            header_line, "header")
    for name in _POSE_COLUMNS:
        if name not in header:
            raise ctx.error(f"missing column {name!r}", header_line, "header")
    times, lines, values = [], [], []
    column = "t" if "t" in header else "frame"
    for number, row in table:
        if column == "t":
            times.append(_number(ctx, row["t"], number, "t", text=True))
        else:
            times.append(_integer(ctx, row["frame"], number, "frame", 0, text=True) / FPS)
        lines.append(number)
        values.append([_number(ctx, row[c], number, c, text=True) for c in ("x", "y", "z", "yaw")]
                      + [_pitch(ctx, row["pitch"], number, "pitch", text=True),
                         _number(ctx, row.get("roll", "0"), number, "roll", text=True)])
    shown = [f"t {row['t']} s" if column == "t" else f"frame {row['frame']}" for _, row in table]
    _check_times(ctx, times, shown, lines, lambda i: column)
    a = np.asarray(values)
    targets, file_frames = _pose_targets(ctx, np.asarray(times), a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5]),
                                         frames, lines[-1], column)
    return _track(ctx, targets, mode, cal, "pose csv", file_frames)


def _action_csv(ctx: _Context, header: list[str], header_line: int, table, mode: str) -> _Actions:
    columns = set(header) - {"frame"}
    exact = [m for m, cols in _ACTION_COLUMNS.items() if columns == set(cols) and "frame" in header]
    if exact and exact[0] != mode:
        raise ctx.error(f"columns are {exact[0]} actions ({', '.join(_ACTION_COLUMNS[exact[0]])}) but the "
                        f"mode is {mode}", header_line, "header")
    if not exact:
        _explain_header(ctx, header, header_line, mode)
    keyboard, mouse = [], []
    for k, (number, row) in enumerate(table):
        frame = _integer(ctx, row["frame"], number, "frame", 0, text=True)
        if frame != k:
            problem = "does not increase" if k and frame <= k - 1 else "skips frames"
            raise ctx.error(f"frame {frame} {problem}: one row per frame, numbered 0, 1, 2, ... (expected {k})",
                            number, "frame")
        keys = [c for c in _ACTION_COLUMNS[mode] if not c.startswith("mouse")]
        keyboard.append([_key_value(ctx, row[c], number, c) for c in keys])
        if mode == "templerun" and sum(keyboard[-1]) != 1:
            raise ctx.error("templerun actions are one-hot: exactly one column must be 1", number)
        if mode != "templerun":
            pitch = _mouse_value(ctx, row.get("mouse_pitch", "0"), number, "mouse_pitch", True)
            mouse.append([pitch, _mouse_value(ctx, row["mouse_yaw"], number, "mouse_yaw", True)])
    return _Actions(np.asarray(keyboard, dtype=np.float64), None if mode == "templerun" else np.asarray(mouse),
                    ORIGIN, TrackingError(), "action csv")


def _explain_header(ctx: _Context, header: list[str], line: int, mode: str) -> None:
    """Raise the most helpful error for a header matching no action or pose layout."""
    expected = ("frame",) + tuple(_ACTION_COLUMNS[mode])
    unknown = [h for h in header if h not in expected]
    missing = [c for c in expected if c not in header]
    what = f"unknown column {unknown[0]!r}" if unknown else f"missing column {missing[0]!r}"
    raise ctx.error(f"{what}; {mode} action columns are {', '.join(expected)} (pose columns: t|frame, x, y, z, "
                    f"yaw, pitch[, roll])", line, "header")


def _key_value(ctx: _Context, raw: str, line: int, column: str) -> float:
    value = _number(ctx, raw, line, column, text=True)
    if value not in (0.0, 1.0):
        raise ctx.error(f"key values are 0 or 1, got {raw!r}", line, column)
    return value


# ================================================================ nerfstudio camera_path.json

_Z_UP_TO_Y_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])   # (x, y, z) -> (x, z, -y)


def _load_nerfstudio(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int,
                     nerfstudio_up: str = "z") -> _Actions:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ctx.error(f"invalid JSON ({exc.msg})", exc.lineno) from None
    if not isinstance(data, dict) or "camera_path" not in data:
        raise ctx.error("unknown JSON trajectory: expected a nerfstudio camera_path.json with a camera_path list")
    path = data["camera_path"]
    if not isinstance(path, list) or not path:
        raise ctx.error(f"expected a non-empty list, got {_show(path)}", field="camera_path")
    fps = _nerfstudio_fps(ctx, data, len(path))
    c2w = np.stack([_c2w(ctx, camera, i) for i, camera in enumerate(path)])          # [N, 3, 4]
    if nerfstudio_up == "z":
        c2w = _Z_UP_TO_Y_UP @ c2w
    times = np.arange(len(path)) / fps
    if len(path) > 1 and not times[1] > 0:
        raise ctx.error(f"{fps:g} frames per second leaves no time between cameras", field="fps")
    targets, file_frames = _pose_targets(ctx, times, c2w[:, :, 3], matrix_to_quat(c2w[:, :, :3]), frames, None, "fps")
    return _track(ctx, targets, mode, cal, "nerfstudio", file_frames)


def _nerfstudio_fps(ctx: _Context, data: dict, count: int) -> float:
    if "fps" in data:
        fps = _number(ctx, data["fps"], None, "fps")
    elif "seconds" in data:
        fps = count / _number(ctx, data["seconds"], None, "seconds") if data["seconds"] else 0.0
    else:
        raise ctx.error("needs fps (or seconds) to time the camera path", field="fps")
    if not 0 < fps < math.inf:
        raise ctx.error(f"must be positive and finite, got {fps:g}", field="fps")
    return fps


def _c2w(ctx: _Context, camera: Any, i: int) -> np.ndarray:
    """[3, 4] camera-to-world of one camera_path entry, checked to be a rotation and a translation."""
    field = f"camera_path[{i}].camera_to_world"
    if not isinstance(camera, dict) or "camera_to_world" not in camera:
        raise ctx.error("missing", field=field)
    raw = camera["camera_to_world"]
    flat = [v for row in raw for v in (row if isinstance(row, list) else [row])] if isinstance(raw, list) else None
    if flat is None or len(flat) not in (12, 16):
        raise ctx.error(f"expected 16 numbers (row-major 4x4) or a nested 4x4 / 3x4, got {_show(raw)}",
                        field=field)
    m = np.asarray([_number(ctx, v, None, field) for v in flat]).reshape(-1, 4)[:3]
    rotation = m[:, :3]
    if not np.allclose(rotation.T @ rotation, np.eye(3), atol=1e-3) or np.linalg.det(rotation) < 0:
        raise ctx.error("the 3x3 part is not a rotation (orthonormal, determinant +1)", field=field)
    return m
