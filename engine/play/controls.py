"""What the player holds, sampled per video frame into the model's actions.

Contract. ``Controls(mode, fps)`` receives the player's input messages as they arrive (``apply(keys,
mouse, seq, at)``: the keys held now, the pointer's movement since the last message in pixels, the
message's sequence number, its arrival time) and samples them on the video's frame clock, as a
trajectory file would give them: one sample per 1/fps seconds. A key counts as held in a frame if it was
held at any time in that frame's interval (a tap shorter than a frame is not lost); pointer movement
turns the camera one step (MG2's mouse value ``CAMERA_STEP``, 0.1) per frame for every
``PIXELS_PER_STEP`` pixels moved, the rest carried to the next frame (at most ``MAX_PENDING_STEPS`` are
carried, so a fling does not turn for seconds). ``take(n, now)`` returns the n frames a chunk starting
now gets: the newest n samples (fewer than n: the current state fills the rest), as keyboard [n, k] and
mouse [n, 2] (None for templerun) float32 arrays, and the newest message's sequence number they include.

The key map is MG2's (its official streaming inference and universal action space):

* universal: W / S / A / D move (forward, back, left, right; several at once), I / K look up / down,
  J / L turn left / right, and the pointer (pointer lock) looks as the mouse moves;
* gta_drive: W / S drive, A / D (or J / L, or the pointer) steer;
* templerun: W jump, S slide, A / D side steps, Z / C turn left / right (one at a time: the first held
  in that order), nothing held: run on.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.io.actions import CAMERA_STEP, KEYBOARD_KEYS

PIXELS_PER_STEP = 4.0        # pointer pixels per camera step (1.5 degrees with MG2's calibration)
MAX_PENDING_STEPS = 24       # pointer movement carried at most this many frames ahead
KEYS = {"universal": ("w", "s", "a", "d", "i", "k", "j", "l"),
        "gta_drive": ("w", "s", "a", "d", "j", "l"),
        "templerun": ("w", "s", "a", "d", "z", "c")}
TEMPLERUN = (("w", "jump"), ("s", "slide"), ("z", "turn_left"), ("c", "turn_right"), ("a", "left_side"),
             ("d", "right_side"))
HELP = {"universal": "W/S/A/D move · I/K look up/down · J/L turn · click the picture to look with the mouse",
        "gta_drive": "W/S drive · A/D (or J/L, or the mouse) steer",
        "templerun": "W jump · S slide · A/D side step · Z/C turn"}


@dataclass
class Sample:
    keys: frozenset
    pitch: float        # mouse value, up +
    yaw: float          # mouse value, right +
    seq: int


class Controls:
    """The player's held inputs on the frame clock (see the module docstring)."""

    def __init__(self, mode: str, fps: float, start: float):
        assert mode in KEYBOARD_KEYS
        self.mode, self.period = mode, 1.0 / fps
        self.held: frozenset = frozenset()
        self.latched: set = set()          # keys held at some time in the current frame's interval
        self.pending = [0.0, 0.0]          # pointer movement not turned yet: pitch (up +), yaw (right +), pixels
        self.seq = 0                       # the newest message applied
        self.next_tick = start + self.period
        self.samples: list[Sample] = []

    def apply(self, keys, mouse, seq: int, at: float) -> None:
        """A message from the player: ``keys`` held now, pointer ``mouse`` = (dx, dy) pixels moved."""
        self.advance(at)
        self.held = frozenset(k for k in keys if k in KEYS[self.mode])
        self.latched |= self.held
        dx, dy = mouse
        limit = MAX_PENDING_STEPS * PIXELS_PER_STEP
        self.pending = [float(np.clip(self.pending[0] - dy, -limit, limit)),
                        float(np.clip(self.pending[1] + dx, -limit, limit))]
        self.seq = max(self.seq, int(seq))

    def release_all(self) -> None:
        """The player left: nothing is held any more (a closed tab does not keep walking)."""
        self.held, self.pending = frozenset(), [0.0, 0.0]

    def advance(self, now: float) -> None:
        """Sample every frame tick up to ``now`` (at most one chunk's worth is ever needed: older are dropped)."""
        ticks = int((now - self.next_tick) // self.period) + 1 if now >= self.next_tick else 0
        if ticks > 64:   # a long pause: only the newest frames matter
            self.next_tick += (ticks - 64) * self.period
            ticks = 64
        for _ in range(ticks):
            self.samples.append(self._sample())
            self.next_tick += self.period
        del self.samples[:-64]

    def _sample(self) -> Sample:
        keys = frozenset(self.held | self.latched)
        self.latched = set(self.held)
        pitch, yaw = (self._step(axis) for axis in (0, 1))
        return Sample(keys, pitch, yaw, self.seq)

    def _step(self, axis: int) -> float:
        """One camera step from the pointer's pending movement on ``axis``, if there is one."""
        if abs(self.pending[axis]) < PIXELS_PER_STEP:
            return 0.0
        sign = 1.0 if self.pending[axis] > 0 else -1.0
        self.pending[axis] -= sign * PIXELS_PER_STEP
        return sign * CAMERA_STEP

    def take(self, n: int, now: float) -> tuple[np.ndarray, np.ndarray | None, int]:
        """The n frames of a chunk starting ``now`` (see the module docstring)."""
        self.advance(now)
        taken, self.samples = self.samples[-n:], []
        while len(taken) < n:
            taken.append(self._sample())
        rows = [self._actions(s) for s in taken]
        keyboard = np.asarray([r[0] for r in rows], dtype=np.float32)
        mouse = None if self.mode == "templerun" else np.asarray([r[1] for r in rows], dtype=np.float32)
        return keyboard, mouse, max(s.seq for s in taken)

    def _actions(self, s: Sample) -> tuple[list[float], list[float]]:
        """A sample as the mode's keyboard row and mouse [pitch, yaw]."""
        k = s.keys
        if self.mode == "templerun":
            row = [0.0] * len(KEYBOARD_KEYS["templerun"])
            name = next((action for key, action in TEMPLERUN if key in k), "none")
            row[KEYBOARD_KEYS["templerun"].index(name)] = 1.0
            return row, []
        pitch, yaw = s.pitch, s.yaw
        if self.mode == "universal":
            row = [float(key in k) for key in ("w", "s", "a", "d")]
            pitch += CAMERA_STEP * (("i" in k) - ("k" in k))
            yaw += CAMERA_STEP * (("l" in k) - ("j" in k))
        else:   # gta_drive: A/D steer; it has no pitch
            row = [float("w" in k), float("s" in k)]
            yaw += CAMERA_STEP * (("d" in k or "l" in k) - ("a" in k or "j" in k))
            pitch = 0.0
        return row, [float(np.clip(pitch, -CAMERA_STEP, CAMERA_STEP)), float(np.clip(yaw, -CAMERA_STEP, CAMERA_STEP))]
