"""The ``Trajectory`` a load returns, and how a file's actions become one: extended (loop or ping-pong)
or cut to the session's frames, then integrated into poses.

Owns the data types ``Trajectory``, ``TrackingError`` and ``_Actions`` (what every format module hands
back: the file's own per-frame actions and start pose), ``MODES`` / ``REPEATS``, the lag thresholds of
``Trajectory.lag_warning`` (when the tracked camera falls visibly behind a pose file), and the public
builders from given actions, ``trajectory_from_actions`` and ``poses_from_actions``. The poses are always
those the actions drive, so ``poses_from_actions(trajectory.actions) == trajectory.poses``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from engine.io.actions import KEYBOARD_KEYS, ActionTrack
from engine.io.poses import FPS, ORIGIN, Calibration, CameraState, states_to_poses
from engine.io.trajectory.kinematics import _integrate_actions

MODES = tuple(KEYBOARD_KEYS)
REPEATS = ("loop", "pingpong")

# When ``Trajectory.lag_warning`` speaks: MG2's camera step is 1.5 deg and 0.1235 world units a frame
# (``Calibration``'s defaults), and the tracker stays within about one step of a file it can follow. A
# lag above ~3 frames' worth is one a viewer sees: 5 deg is over three frames of turning, 0.25 units two
# frames of walking (a position is also off by whatever vertical motion no action can express).
LAG_ANGLE_DEG = 5.0        # yaw or pitch
LAG_POSITION = 0.25        # world units

# Keyboard column permutation that plays an action backwards (ping-pong).
_MIRROR = {"universal": [1, 0, 3, 2], "gta_drive": [1, 0], "templerun": [0, 1, 2, 4, 3, 6, 5]}


@dataclass(frozen=True)
class TrackingError:
    """Largest deviation of the action-driven path from a pose file's resampled poses over the session's
    frames, and the video frame where each happened (0 and None for actions, which are not tracked)."""

    position: float = 0.0      # world units (3-D distance)
    yaw_deg: float = 0.0
    pitch_deg: float = 0.0
    position_frame: int | None = None   # video frame of the worst position error (None: no error)
    yaw_frame: int | None = None
    pitch_frame: int | None = None
    # The camera's most motion in one frame under the calibration (what the lag warning explains with).
    turn_deg: float = field(default=0.0, compare=False)
    step: float = field(default=0.0, compare=False)

    @classmethod
    def over(cls, errors: np.ndarray) -> "TrackingError":
        """The worst of per-frame errors [N, 3] (position, yaw, pitch) of video frames 1..N."""
        if len(errors) == 0:
            return cls()
        worst, at = errors.max(axis=0), errors.argmax(axis=0) + 1
        frames = [int(f) if w > 0 else None for w, f in zip(worst, at)]
        return cls(*(float(w) for w in worst), *frames)

    def as_record(self) -> dict[str, Any]:
        """The log header's ``tracking`` field."""
        return {"position": self.position, "yaw_deg": self.yaw_deg, "pitch_deg": self.pitch_deg,
                "position_frame": self.position_frame, "yaw_frame": self.yaw_frame,
                "pitch_frame": self.pitch_frame}


def _at(frame: int) -> str:
    """Where in the video a frame is: its index and time."""
    return f"frame {frame}, {frame / FPS:.1f} s"


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
    intrinsics: np.ndarray | None = None   # [4] fx, fy, cx, cy of a 480x832 frame (a LingBot pose folder)
    key_states: np.ndarray | None = None   # [T, 4] W, A, S, D per video frame (a pose folder's action.npy)

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
            yaw_at = "" if t.yaw_frame is None else f" ({_at(t.yaw_frame)})"
            text += (f"; tracked within {t.position:.3g} units, {t.yaw_deg:.3g} deg yaw{yaw_at}, "
                     f"{t.pitch_deg:.3g} deg pitch")
        return text

    def lag_warning(self, offset: int = 0) -> str | None:
        """One line when the tracked camera falls visibly behind the file (None when it does not);
        ``offset``: video frames before this trajectory's first (a fork's branch)."""
        t = self.tracking
        lags = []
        if t.yaw_deg > LAG_ANGLE_DEG:
            lags.append(f"falls up to {t.yaw_deg:.3g} deg of yaw behind ({_at(t.yaw_frame + offset)}; "
                        f"{self._turn_limit()})")
        if t.pitch_deg > LAG_ANGLE_DEG:
            why = f"{self.mode} cannot pitch" if self.mode == "gta_drive" else self._turn_limit()
            lags.append(f"falls up to {t.pitch_deg:.3g} deg of pitch behind ({_at(t.pitch_frame + offset)}; {why})")
        if t.position > LAG_POSITION:
            lags.append(f"strays up to {t.position:.3g} units from the path ({_at(t.position_frame + offset)}; "
                        f"it moves at most {t.step:.4g} units a frame, on the level)")
        if not lags:
            return None
        joined = lags[0] if len(lags) == 1 else ", ".join(lags[:-1]) + " and " + lags[-1]
        return f"{self.source} cannot be followed exactly: the camera {joined}"

    def _turn_limit(self) -> str:
        return f"it turns at most {self.tracking.turn_deg * FPS:.3g} deg/s"


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
    errors: np.ndarray | None = None  # tracked files: per-frame errors [N, 3] of video frames 1..N

    @property
    def frames_in_file(self) -> int:
        return len(self.keyboard) if self.file_frames is None else self.file_frames

    def appended(self, keyboard: np.ndarray, mouse: np.ndarray | None, file_frames: int, fmt: str) -> "_Actions":
        mouse_all = None if mouse is None else np.concatenate([self.mouse, mouse])
        return _Actions(np.concatenate([self.keyboard, keyboard]), mouse_all, self.start, self.tracking, fmt,
                        self.frames_in_file + file_frames, self.errors)

    def tracking_over(self, frames: int, cal: Calibration) -> TrackingError:
        """The tracking error over a session's first ``frames`` frames (the file's targets may run
        one frame further), with the calibration's most motion in a frame."""
        if self.errors is None:
            return self.tracking
        worst = TrackingError.over(self.errors[:max(0, frames - 1)])
        return replace(worst, turn_deg=float(cal.mouse_degrees(cal.mouse_step)), step=cal.distance_per_frame)


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
    return Trajectory(track, states_to_poses(states[:frames]), mode, source, acts.format, n, used,
                      acts.tracking_over(frames, cal))
