"""Observed tours, then explorations that come back: the episodes of ``bench quality``'s revisit experiment.

Owns the three kinds of episode and their shapes. Every episode starts at the session's origin (the
arena's centre, yaw 0, pitch 0). Its first ``observed_chunks`` chunks are an *observed tour* (given to
the session as ``--observe``: the world's rendered truth along that part of the path); the rest is a
generated exploration (``--trajectory``) that comes back both to views of the tour and to views first
seen only in generated chunks:

* ``glance`` (a long-hold glance): hold at a place for ``hold_frames``, turn at 4.5 degrees a frame to
  the next, over the places ``GLANCE_YAWS`` (the start, one the tour ends on, two only ever generated)
  in that order, then round again from the second.
* ``spin`` (a slow spin): turning at ``spin_rate`` for the whole session (1.5 degrees a frame: one turn
  is 20 chunks, so 40 chunks are two turns and the second revisits the first's views).
* ``walk`` (a slow out-and-back walk): turn to a heading, walk ``walk_steps`` steps out (a step is one
  latent frame of ``w``, 0.49 units, then ``walk_pause`` still video frames) and as many back with
  ``s`` (facing the same way, so every pose on the way back is one of the way out), turn back to yaw 0,
  and again. A heading whose walk a wall or pillar would clamp is rejected and the next is tried.

Turns are multiples of 18 degrees at 4.5 degrees a frame and every segment is a multiple of 4 video
frames, so latent frames (every 4th video frame) fall on the places and returns repeat their poses to
rounding. Arena seeds are ``QUALITY_ARENA_BASE + seed`` (held out, as ``engine.quality.episodes``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.arena.episodes import Episode, _segments_to_actions, walk
from engine.arena.world import Arena
from engine.errors import ConfigError
from engine.io.poses import Calibration
from engine.quality.episodes import (LATENT_PER_CHUNK, QUALITY_ARENA_BASE, TEMPORAL, TURN_RATE, VIDEO_PER_CHUNK,
                                     chunks_for)

KINDS = ("glance", "spin", "walk")
TURN_DEG = TURN_RATE * Calibration().degrees_per_mouse_unit     # 4.5 degrees a frame
GLANCE_YAWS = (0, 72, -90, 72, -90, 0, 162, 270)   # degrees, unwrapped: each turn is the difference
HEADINGS = (90, -90, 0, 180, 36, -36, 144, -144, 72, -72, 108, -108)   # walk headings, tried in turn
START_HOLD = 12                                    # still video frames at the start (chunk 0)


@dataclass(frozen=True)
class Shape:
    """How long an episode is and how its kinds are paced (``FULL``; ``QUICK`` for the smoke test)."""

    chunks: int = 40
    observed_chunks: int = 4
    hold_frames: int = 36            # glance: video frames at each place (3 chunks)
    spin_rate: float = 0.1           # spin: mouse yaw a frame (1.5 degrees)
    walk_steps: int = 12             # walk: steps out (and back)
    walk_pause: int = 8              # walk: still video frames after each step

    def check(self) -> "Shape":
        if self.observed_chunks < 1 or self.chunks <= self.observed_chunks:
            raise ConfigError(f"episode of {self.chunks} chunks with {self.observed_chunks} observed: "
                              "give at least one observed chunk and more chunks than that")
        return self


FULL = Shape()
QUICK = Shape(chunks=13, observed_chunks=2, hold_frames=16, spin_rate=0.2, walk_steps=3, walk_pause=0)


@dataclass
class RevisitEpisode:
    """One episode: the whole path (actions and clamped poses) and how much of it is observed."""

    episode: Episode
    seed: int
    chunks: int
    observed_chunks: int

    @property
    def arena_seed(self) -> int:
        return self.episode.arena_seed

    @property
    def kind(self) -> str:
        return self.episode.kind

    @property
    def tour_frames(self) -> int:
        """Video frames of the observed tour: its whole chunks (9 in chunk 0, 12 after)."""
        return session_frames(self.observed_chunks)


def _turn(yaw_deg: float) -> tuple[str, float, float, int]:
    frames = round(abs(yaw_deg) / TURN_DEG)
    assert abs(frames * TURN_DEG - abs(yaw_deg)) < 1e-9 and frames % TEMPORAL == 0, yaw_deg
    return ("", 0.0, float(np.sign(yaw_deg)) * TURN_RATE, frames)


def _still(frames: int) -> tuple[str, float, float, int]:
    return ("", 0.0, 0.0, frames)


def glance_segments(shape: Shape, frames: int, sign: float) -> list:
    segments, at, total, i = [_still(START_HOLD)], GLANCE_YAWS[0], START_HOLD, 1
    while total < frames:
        target = GLANCE_YAWS[i]
        segments += [_turn(sign * (target - at)), _still(shape.hold_frames)]
        total += segments[-2][3] + shape.hold_frames
        at, i = target, i + 1 if i + 1 < len(GLANCE_YAWS) else 1     # round again from the second
    return segments


def spin_segments(shape: Shape, frames: int, sign: float) -> list:
    return [("", 0.0, sign * shape.spin_rate, frames)]


def walk_segments(shape: Shape, frames: int, heading: float) -> list:
    step = [("w", 0.0, 0.0, TEMPORAL), _still(shape.walk_pause)]
    back = [_still(shape.walk_pause), ("s", 0.0, 0.0, TEMPORAL)]
    cycle = [_turn(heading), *step * shape.walk_steps, *back * shape.walk_steps, _turn(-heading)]
    segments, total = [_still(START_HOLD)], START_HOLD
    while total < frames:
        segments += cycle
        total += sum(s[3] for s in cycle)
    return [s for s in segments if s[3] > 0]


def session_frames(chunks: int) -> int:
    """Video frames (actions) of ``chunks`` whole chunks: 9 in chunk 0, 12 in each after."""
    return 1 + TEMPORAL * (LATENT_PER_CHUNK - 1) + VIDEO_PER_CHUNK * (chunks - 1)


def revisit_episode(seed: int, kind: str, shape: Shape = FULL) -> RevisitEpisode:
    """The episode of ``kind`` for quality seed ``seed`` (deterministic from the two)."""
    if kind not in KINDS:
        raise ConfigError(f"unknown episode kind {kind!r} (choose from {', '.join(KINDS)})")
    shape.check()
    arena_seed = QUALITY_ARENA_BASE + seed
    arena = Arena.generate(arena_seed)
    frames = session_frames(shape.chunks)
    sign = 1.0 if seed % 2 == 0 else -1.0
    tries = [sign * h for h in HEADINGS] if kind == "walk" else [sign]
    for t in tries:
        build = {"glance": glance_segments, "spin": spin_segments, "walk": walk_segments}[kind]
        keyboard, mouse = _segments_to_actions(build(shape, frames, t))
        keyboard, mouse = keyboard[:frames], mouse[:frames]
        poses, clamped = walk(arena, keyboard, mouse)
        if clamped == 0:
            break
    else:
        raise ValueError(f"arena {arena_seed}: every {kind} path is clamped by a wall or pillar")
    assert chunks_for(len(keyboard)) == shape.chunks, (len(keyboard), shape.chunks)
    return RevisitEpisode(Episode(arena_seed, kind, keyboard, mouse, poses, clamped), seed, shape.chunks,
                          shape.observed_chunks)
