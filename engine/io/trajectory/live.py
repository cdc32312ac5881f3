"""A trajectory whose frames are given as they happen (live play), and its recording.

Contract. ``LiveTrack(mode, frames, calibration)`` holds a ``Trajectory`` of ``frames`` video frames
allocated once (a session's models and its retrieval keep references to its arrays): frames not given
yet hold a still camera at the start pose. ``extend(keyboard, mouse)`` writes the next frames' actions
in place and integrates their poses from where the camera was, exactly as ``load_trajectory`` would for
a file holding the same actions (the same float32 values, the same per-frame kinematics, the quaternion
signs aligned across pieces): a session replayed from the recording sees the very same arrays. It
returns the video frames whose actions or poses changed (the pose of frame t is that of the actions of
frames before t, so it is known one frame ahead of the actions).

``observe(keyboard, mouse)`` gives the frames the session observes first (its look around, an observed
clip): the recording leaves them out, and its ``start:`` is still the track's start (where the look
around turns; the session's settings make the observed frames again, before the recording's).

``recording_yaml`` is the trajectory YAML (``start:`` and ``segments:``) of the frames given so far; its
first line is ``RECORDING_MARK``, which tells a session that the file ends where the recording ends
(``recorded_frames``: the session is not looped past it). Each value is written as the float it is, so
the file loads back to exactly those actions.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.errors import InputError
from engine.files.input_files import open_input
from engine.io.actions import KEYBOARD_KEYS, ActionTrack
from engine.io.poses import ORIGIN, Calibration, CameraState, states_to_poses
from engine.io.trajectory.build import Trajectory, TrackingError
from engine.io.trajectory.kinematics import _integrate_actions

RECORDING_MARK = "# worldpager play: recorded live"


class LiveTrack:
    """The session's trajectory, filled frame by frame (see the module docstring)."""

    def __init__(self, mode: str, frames: int, calibration=None, source: str = "live input",
                 start: CameraState = ORIGIN):
        assert mode in KEYBOARD_KEYS and frames >= 1
        self.mode, self.cal, self.start = mode, Calibration.coerce(calibration), start
        keys = len(KEYBOARD_KEYS[mode])
        keyboard = np.zeros((frames, keys), dtype=np.float32)            # [T, k]
        if mode == "templerun":
            keyboard[:, 0] = 1.0                                         # 'none': a still frame
        mouse = None if mode == "templerun" else np.zeros((frames, 2), dtype=np.float32)   # [T, 2]
        poses = np.repeat(states_to_poses([start]), frames, axis=0)     # [T, 7] a still camera
        track = ActionTrack(torch.from_numpy(keyboard), None if mouse is None else torch.from_numpy(mouse))
        self.trajectory = Trajectory(track, poses, mode, source, "live", 0, "none", TrackingError())
        self._keyboard, self._mouse = keyboard, mouse
        self.known = 0                     # frames whose actions were given
        self.state = start                 # the camera at frame ``known``
        self.observed = 0                  # the first frames, observed (``observe``): not recorded

    @property
    def frames(self) -> int:
        return len(self._keyboard)

    def extend(self, keyboard: np.ndarray, mouse: np.ndarray | None) -> tuple[int, int]:
        """Give the next frames' actions (keyboard [n, k], mouse [n, 2] or None); returns the video
        frames [start, stop) whose actions or poses changed."""
        keyboard = np.asarray(keyboard, dtype=np.float32).reshape(-1, self._keyboard.shape[1])
        n = len(keyboard)
        a = self.known
        assert a + n <= self.frames, f"{a + n} frames given to a track of {self.frames}"
        if self._mouse is not None:
            mouse = np.asarray(mouse, dtype=np.float32).reshape(n, 2)
            self._mouse[a:a + n] = mouse
        self._keyboard[a:a + n] = keyboard
        # the float32 values the model receives, integrated as ``build._build`` integrates a file's
        states = _integrate_actions(keyboard.astype(np.float64),
                                    None if self._mouse is None else mouse.astype(np.float64),
                                    self.mode, self.cal, self.state)
        stop = min(a + n + 1, self.frames)                 # poses of frames a+1 .. a+n
        poses = self.trajectory.poses
        new = states_to_poses(states[1:1 + stop - (a + 1)], previous=poses[a])
        poses[a + 1:stop] = new
        self.state = states[-1]
        self.known = a + n
        return a, stop

    def observe(self, keyboard: np.ndarray, mouse: np.ndarray | None) -> None:
        """Give the frames the session observes before the live ones (its look around, an observed
        clip): they are the track's first frames, left out of the recording (the session's settings
        make them again)."""
        assert self.known == 0, "the observed frames come first"
        self.extend(keyboard, mouse)
        self.observed = self.known

    def given(self, frames: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """The actions given so far (or of the first ``frames``): keyboard [n, k], mouse [n, 2] or None."""
        n = self.known if frames is None else frames
        assert n <= self.known
        return self._keyboard[:n], None if self._mouse is None else self._mouse[:n]


def recording_yaml(track: LiveTrack, comment: str = "") -> str:
    """The trajectory YAML of the frames given so far, marked as a recording (see the module docstring).

    Written without a YAML library (a long session rewrites it every chunk): runs of equal actions are
    one segment each, every value the float it is (``repr``)."""
    keyboard, mouse = track.given()
    keyboard, mouse = keyboard[track.observed:], None if mouse is None else mouse[track.observed:]
    rows = keyboard if mouse is None else np.concatenate([keyboard, mouse], axis=1)
    names = KEYBOARD_KEYS[track.mode]
    s = track.start
    lines = [f"{RECORDING_MARK}: {track.known - track.observed} video frames", *(f"# {line}" for line in comment.splitlines()),
             f"start: {{position: [{s.x!r}, {s.y!r}, {s.z!r}], yaw: {s.yaw!r}, pitch: {s.pitch!r}, roll: {s.roll!r}}}",
             "segments:" if len(rows) else "segments: []"]
    edges = np.flatnonzero(np.any(rows[1:] != rows[:-1], axis=1)) + 1 if len(rows) > 1 else np.zeros(0, int)
    starts = [0, *edges.tolist()] if len(rows) else []
    for begin, end in zip(starts, [*starts[1:], len(rows)]):
        held = ", ".join(names[i] for i in np.flatnonzero(keyboard[begin] > 0.5))
        lines.append(f"- keys: [{held}]")
        if mouse is not None:
            lines.append(f"  mouse: [{float(mouse[begin, 0])!r}, {float(mouse[begin, 1])!r}]")
        lines.append(f"  frames: {end - begin}")
    return "\n".join(lines) + "\n"


def recorded_frames(path: Path | str | None, trajectory: Trajectory) -> int | None:
    """The frames a recording holds (it ends the session there), or None for any other file."""
    if path is None:
        return None
    try:
        with open_input(path, "trajectory") as f:   # a pose folder or a FIFO: no recording, never a wait
            first = f.read(len(RECORDING_MARK))
    except (OSError, InputError):
        return None
    return trajectory.source_frames if first == RECORDING_MARK.encode() else None
