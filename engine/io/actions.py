"""Per-video-frame MG2 actions: the action spaces of the three modes and the built-in schedule.

Owns the meaning of each action channel (MG2 §5.2) and ``ActionTrack``, the per-video-frame keyboard
and mouse tensors a session feeds the model. The built-in schedule (used when no trajectory is given)
walks forward, looks right, walks forward, looks left, walks back, in 12-frame segments, so every
action path of the model is exercised.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

CAMERA_STEP = 0.1   # MG2's mouse value for one camera key press (pitch up / yaw right positive)

# Keyboard channel order per mode.
KEYBOARD_KEYS = {
    "universal": ("forward", "back", "left", "right"),
    "gta_drive": ("forward", "back"),
    "templerun": ("none", "jump", "slide", "turn_left", "turn_right", "left_side", "right_side"),
}


@dataclass
class ActionTrack:
    """Actions of video frames [0, T): keyboard [T, kdim] and mouse [T, 2] (None without a mouse)."""

    keyboard: torch.Tensor
    mouse: torch.Tensor | None

    @property
    def frames(self) -> int:
        return self.keyboard.shape[0]


_SEGMENTS = (  # (keys held, mouse [pitch, yaw]) for 12 video frames each
    (("forward",), (0.0, 0.0)),
    (("forward",), (0.0, CAMERA_STEP)),
    (("forward",), (0.0, 0.0)),
    ((), (0.0, -CAMERA_STEP)),
    (("back",), (0.0, 0.0)),
    (("left",), (CAMERA_STEP, 0.0)),
    (("right",), (-CAMERA_STEP, 0.0)),
)
_TEMPLERUN_SEGMENTS = ("none", "jump", "none", "turn_left", "slide", "turn_right", "left_side", "right_side")


def builtin_schedule(mode: str, frames: int, segment_frames: int = 12) -> ActionTrack:
    """The fixed demo schedule for ``frames`` video frames in ``mode``'s action space."""
    keys = KEYBOARD_KEYS[mode]
    keyboard = torch.zeros(frames, len(keys))
    mouse = None if mode == "templerun" else torch.zeros(frames, 2)
    for start in range(0, frames, segment_frames):
        seg = start // segment_frames
        rows = slice(start, min(start + segment_frames, frames))
        if mode == "templerun":
            keyboard[rows, keys.index(_TEMPLERUN_SEGMENTS[seg % len(_TEMPLERUN_SEGMENTS)])] = 1.0
            continue
        held, (pitch, yaw) = _SEGMENTS[seg % len(_SEGMENTS)]
        for key in held:
            if key in keys:
                keyboard[rows, keys.index(key)] = 1.0
        # gta_drive steers with the mouse yaw only (A/D map to yaw -/+).
        mouse[rows] = torch.tensor([0.0 if mode == "gta_drive" else pitch, yaw])
    return ActionTrack(keyboard, mouse)
