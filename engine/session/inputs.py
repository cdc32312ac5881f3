"""Step 1 of the chunk loop: where a chunk's inputs come from (an *input source*).

Contract. A source holds the session's ``Trajectory`` (per-video-frame actions and poses, as long as the
session may run) and, before each chunk, ``take(chunk, frames, stop)`` makes the inputs of the chunk's
video frames ``frames`` (a ``range``) known, or says that they will never be (the inputs ended: the
session stops there, done). It may block until then — a live source waits for its player — and says how
long it waited: that is a pause, not a stall (the chunk record's ``input_wait_ms``, inside its
``paused_ms``), and it returns at once (None) when ``stop`` is set.

* ``FileSource`` — a trajectory file (or the model's default path): every frame is known at set-up. A
  recording of live play (``engine.io.trajectory.live.recorded_frames``) ends the session where the
  recording ends instead of being looped past it.
* The live source of ``worldpager play`` (``engine.play.source``) fills the trajectory in place as the
  player's inputs arrive and tells which frames it wrote (``Inputs.changed``); the session then lets a
  model that derived per-frame inputs from the trajectory at set-up re-derive them
  (``engine.model.interface.LiveInputModel``).

The session imports nothing of ``engine.play``: a source is anything with this shape.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from engine.io.trajectory import Trajectory


@dataclass
class Inputs:
    """What ``take`` made known for one chunk."""

    changed: tuple[int, int] | None = None   # video frames [start, stop) written just now (live), else None
    waited_ms: float = 0.0                   # how long ``take`` blocked for them (a pause, not a stall)
    facts: dict = field(default_factory=dict)   # extra fields of the chunk's log record


@runtime_checkable
class InputSource(Protocol):
    trajectory: Trajectory
    description: str            # the log header's ``inputs``

    def take(self, chunk: int, frames: range, stop: threading.Event) -> Inputs | None:
        """The inputs of ``frames`` (chunk ``chunk``), or None: they ended, or ``stop`` was set."""


class FileSource:
    """A trajectory known whole at set-up (``end_frames``: a recording's length, where the session ends)."""

    def __init__(self, trajectory: Trajectory, end_frames: int | None = None):
        self.trajectory, self.end_frames = trajectory, end_frames
        self.description = "file" if end_frames is None else f"a recording of live play ({end_frames} video frames)"

    def take(self, chunk: int, frames: range, stop: threading.Event) -> Inputs | None:
        if self.end_frames is not None and frames.stop > self.end_frames:
            return None
        return Inputs()
