"""One trajectory made of two: a run's actions up to a frame, then another file's (a fork's trajectory).

Contract: ``splice_yaml(first, frames, second)`` is the text of a trajectory YAML (``start:`` and
``segments:``, the format ``engine.io.trajectory`` reads) whose actions are ``first``'s for video frames
[0, frames), then ``second``'s, and whose start is ``first``'s first pose. Loaded back with
``load_trajectory`` (for ``frames + second.frames`` frames) it gives exactly those actions, and its
poses, integrated from them, are ``first``'s up to ``frames`` (to float rounding of the start pose; exact
from the origin) and then continue from where ``first`` was — ``second``'s own start is not used.

Exact because the session's actions are float32 and each value is written as the float it is
(``repr`` of a float round-trips); runs of equal actions become one segment each.
"""
from __future__ import annotations

import numpy as np
import yaml

from engine.io.actions import KEYBOARD_KEYS
from engine.io.poses import CameraState, state_from_pose
from engine.io.trajectory.build import Trajectory


def splice_yaml(first: Trajectory, frames: int, second: Trajectory, comment: str = "") -> str:
    assert first.mode == second.mode, (first.mode, second.mode)
    assert 0 < frames <= first.frames, f"splice at frame {frames} of a {first.frames}-frame trajectory"
    keyboard = np.concatenate([first.actions.keyboard.numpy()[:frames], second.actions.keyboard.numpy()])
    mouse = None
    if first.actions.mouse is not None:
        mouse = np.concatenate([first.actions.mouse.numpy()[:frames], second.actions.mouse.numpy()])
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + actions_yaml(first.mode, keyboard, mouse, state_from_pose(first.poses[0]))


def actions_yaml(mode: str, keyboard: np.ndarray, mouse: np.ndarray | None, start: CameraState) -> str:
    """The YAML (``start:`` and ``segments:``) of per-frame actions [T, k] / [T, 2] from ``start``."""
    doc = {"start": {"position": [start.x, start.y, start.z], "yaw": start.yaw, "pitch": start.pitch,
                     "roll": start.roll},
           "segments": _segments(mode, keyboard, mouse)}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


def _segments(mode: str, keyboard: np.ndarray, mouse: np.ndarray | None) -> list[dict]:
    """Runs of equal per-frame actions [T, k] / [T, 2] as ``segments:`` entries."""
    rows = keyboard if mouse is None else np.concatenate([keyboard, mouse], axis=1)
    segments, begin = [], 0
    for t in range(1, len(rows) + 1):
        if t < len(rows) and np.array_equal(rows[t], rows[begin]):
            continue
        segment = {"keys": [KEYBOARD_KEYS[mode][i] for i in np.flatnonzero(keyboard[begin] > 0.5)]}
        if mouse is not None:
            segment["mouse"] = [float(v) for v in mouse[begin]]
        segment["frames"] = t - begin
        segments.append(segment)
        begin = t
    return segments
