"""A session's look around: what an arena session observes first, unless told otherwise.

Owns, for a session config and its model's ``ModelSpec``:

* **Whether and how long.** ``look_around_chunks``: ``cfg.look_around`` chunks (``--look-around``,
  default ``LOOK_AROUND_CHUNKS`` = 7), at most all but the session's last, for a model that renders its
  own world (``ModelSpec.observes`` holds ``"render"``: the arena model); none for a model without a
  renderer (MG2, LingBot), none with ``--observe`` (the user's clip is what is observed instead), and
  none where that leaves fewer than ``LOOK_AROUND_MIN_CHUNKS`` = 3 (a shorter turn would need a mouse
  value above 1 a frame, more than a trajectory file may hold: a fork's or a replay's path could not be
  written), so a session of 3 chunks or fewer does not look around.
* **The turn.** ``look_around_track``: the actions of a full turn on the spot to the right, starting and
  ending at the start view. Seven chunks are 81 video frames: 80 frames of the fastest turn the arena
  model was trained on (mouse 0.3, 4.5 degrees a frame), then one still frame at the start view, so the
  path that follows starts where it would have started without the look around, and every direction
  around the start was seen in truth before anything is generated (the frames are 90 degrees wide; a
  latent frame every 4 video frames is 18 degrees on). A shorter look around turns faster (a full turn
  in all but its last frame); a longer one holds the start view after the turn.

``engine.session.observe.session_path`` puts these frames before the session's path and observes them
through the same machinery as ``--observe``: the world's rendered truth, stored as observed chunks,
marked in the MP4 and flagged in the log. A resumed or forked run never looks around again: a resume
follows the path its config gives (the look around included, where it began), and a branch's trajectory
holds the parent's whole path, so its config asks for none.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from engine.config import LOOK_AROUND_MIN_CHUNKS, SessionConfig
from engine.io.actions import ActionTrack, KEYBOARD_KEYS
from engine.io.poses import Calibration

TURN_DEG_PER_FRAME = 4.5    # the fastest turn the arena model trained on (mouse 0.3, engine.arena.episodes)


def look_around_chunks(cfg: SessionConfig, spec) -> int:
    """How many of the session's first chunks are its look around (see the module docstring)."""
    if cfg.observe is not None or "render" not in spec.observes:
        return 0
    chunks = min(cfg.look_around, cfg.chunks - 1)
    return chunks if chunks >= LOOK_AROUND_MIN_CHUNKS else 0


def look_around_track(frames: int, mode: str, calibration=None) -> ActionTrack:
    """The actions of the look around's ``frames`` video frames: a full turn to the right in
    ``min(80, frames - 1)`` frames, then still (see the module docstring)."""
    cal = Calibration.coerce(calibration)
    turning = min(math.ceil(360.0 / TURN_DEG_PER_FRAME), frames - 1)
    keyboard = torch.zeros(frames, len(KEYBOARD_KEYS[mode]))   # a model with a renderer steers with a mouse
    mouse = np.zeros((frames, 2), dtype=np.float32)
    mouse[:turning, 1] = 360.0 / (turning * cal.degrees_per_mouse_unit)
    return ActionTrack(keyboard, torch.from_numpy(mouse))


def look_around_text(chunks: int, frames: int) -> str:
    """The log header's and the banner's line for it."""
    return (f"a look around at the start: {chunks} chunks ({frames} video frames) of a full turn on the spot, "
            "the world's rendered truth")
