"""Sessions as long as the product's: the paths of ``bench quality --long`` (minutes, past the horizon).

Owns the long episode. It starts at the session's origin (the arena's centre, yaw 0) with an *observed
tour*: a still start, then a whole turn on the spot (given to the session as ``--observe``: the world's
rendered truth all round the start). The rest is generated and is made of **legs** out from the start
and back to it, cycled in ``LEG_ORDER`` until the session is ``minutes`` long:

* a leg turns to one of the episode's ``places`` (a heading whose walk no wall or pillar clamps),
  walks out ``steps`` latent frames of ``w``, looks around there (``spin``: a whole turn; ``glance``:
  a quarter turn each way and back, holding at both ends), walks back with ``s`` (facing the same way,
  so every pose on the way back is one of the way out), turns back to yaw 0 and holds;
* ``home`` (no walk): a slow whole turn at the start (1.5 degrees a frame).

So the session keeps coming back to the tour's views (the start, every leg's end; observed returns),
and comes back to each place's views, first seen only in generated chunks, minutes after the first
visit (generated returns). Turns are multiples of 18 degrees at 4.5 degrees a frame and every segment
is a multiple of 4 video frames, so latent frames land on the revisited poses to rounding.

Arena seeds are ``LONG_ARENA_BASE + seed``: held out from training and from the other benchmarks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.arena.episodes import Episode, _segments_to_actions, walk
from engine.arena.world import Arena
from engine.errors import ConfigError
from engine.quality.episodes import QUALITY_ARENA_BASE, TEMPORAL, TURN_RATE, VIDEO_PER_CHUNK, chunks_for
from engine.quality.revisit_paths import START_HOLD, TURN_DEG, _still, _turn, session_frames

LONG_ARENA_BASE = QUALITY_ARENA_BASE + 10_000
HEADINGS = (90, -90, 180, 0, 36, -36, 144, -144, 72, -72, 108, -108, 18, -18, 162, -162)
LEG_ORDER = ("A:spin", "B:glance", "home", "C:spin", "A:glance", "B:spin", "home", "C:glance")
FPS = 16


@dataclass(frozen=True)
class LongShape:
    """How long a long episode is and how its legs are paced (``LONG``; ``LONG_SMOKE`` for CI)."""

    minutes: float = 5.0             # video after which the session ends (whole chunks, at least this)
    tour_turn: int = 360             # degrees the observed tour turns (after START_HOLD still frames)
    steps: tuple[int, ...] = (10, 8, 6)   # latent frames walked out to a place: the longest unclamped
    places: int = 3                  # distinct headings (A, B, C)
    glance_deg: int = 90             # glance: a quarter turn each way
    hold_frames: int = 12            # still video frames at each end of a glance, and back home
    home_rate: float = 0.1           # mouse yaw a frame of the slow turn at home (1.5 degrees)
    order: tuple[str, ...] = LEG_ORDER

    def check(self) -> "LongShape":
        if not self.minutes > 0 or not math.isfinite(self.minutes):
            raise ConfigError(f"--minutes {self.minutes}: give a positive length of video in minutes")
        return self

    @property
    def chunks(self) -> int:
        """Chunks whose video is at least ``minutes`` long (9 frames in chunk 0, 12 in each after)."""
        frames = math.ceil(self.minutes * 60 * FPS)
        return 1 + max(0, math.ceil((frames - session_frames(1)) / VIDEO_PER_CHUNK))

    @property
    def observed_chunks(self) -> int:
        """Chunks of the tour: the fewest whose video holds its still start and its whole turn."""
        tour = START_HOLD + round(self.tour_turn / TURN_DEG)
        return 1 + max(0, math.ceil((tour - session_frames(1)) / VIDEO_PER_CHUNK))


LONG = LongShape()
LONG_SMOKE = LongShape(minutes=22 / 60, tour_turn=72, steps=(2,), places=2, glance_deg=36, hold_frames=8,
                       order=("A:glance", "B:glance", "A:glance", "B:glance"))


@dataclass
class LongEpisode:
    """One long path: the whole of it (actions and clamped poses), its tour, and its places."""

    episode: Episode
    seed: int
    chunks: int
    observed_chunks: int
    places: tuple[tuple[int, int], ...]          # (heading degrees, steps) of A, B, C ...

    @property
    def arena_seed(self) -> int:
        return self.episode.arena_seed

    @property
    def kind(self) -> str:
        return self.episode.kind

    @property
    def tour_frames(self) -> int:
        return session_frames(self.observed_chunks)


def _walk(keys: str, steps: int) -> tuple[str, float, float, int]:
    return (keys, 0.0, 0.0, TEMPORAL * steps)


def _look(activity: str, shape: LongShape, sign: float) -> list:
    if activity == "spin":
        return [_turn(sign * 360)]
    g = sign * shape.glance_deg
    return [_turn(g), _still(shape.hold_frames), _turn(-2 * g), _still(shape.hold_frames), _turn(g)]


def leg(heading: int, steps: int, activity: str, shape: LongShape, sign: float) -> list:
    """Out to a place and back: turn, walk out, look around, walk back, turn back, hold."""
    out = [_turn(heading)] if heading else []
    back = [_turn(-heading)] if heading else []
    return [*out, _walk("w", steps), *_look(activity, shape, sign), _walk("s", steps), *back,
            _still(shape.hold_frames)]


def home(shape: LongShape, sign: float) -> list:
    frames = round(360 / (shape.home_rate * TURN_DEG / TURN_RATE))
    return [("", 0.0, sign * shape.home_rate, frames), _still(shape.hold_frames)]


def _clear(arena: Arena, heading: int, steps: int, shape: LongShape) -> bool:
    keyboard, mouse = _segments_to_actions(leg(heading, steps, "glance", shape, 1.0))
    return walk(arena, keyboard, mouse)[1] == 0


def places_of(arena: Arena, shape: LongShape, sign: float, seed: int = 0) -> tuple[tuple[int, int], ...]:
    """The first ``shape.places`` headings (tried from a seed-dependent start in ``HEADINGS``) whose leg
    of the longest possible walk is unclamped."""
    found: list[tuple[int, int]] = []
    start = (5 * seed) % len(HEADINGS)
    for steps in shape.steps:
        for h in HEADINGS[start:] + HEADINGS[:start]:
            heading = int(sign * h)
            if len(found) < shape.places and all(heading != f[0] for f in found) and _clear(arena, heading, steps, shape):
                found.append((heading, steps))
    if len(found) < shape.places:
        raise ValueError(f"arena {arena.seed}: only {len(found)} unclamped places for a long episode")
    return tuple(found)


def long_segments(shape: LongShape, places, frames: int, sign: float) -> list:
    segments = [_still(START_HOLD), _turn(sign * shape.tour_turn)]
    total, i = sum(s[3] for s in segments), 0
    while total < frames:
        name = shape.order[i % len(shape.order)]
        if name == "home":
            new = home(shape, sign)
        else:
            place, activity = name.split(":")
            heading, steps = places["ABC".index(place)]
            new = leg(heading, steps, activity, shape, sign)
        segments += new
        total += sum(s[3] for s in new)
        i += 1
    return [s for s in segments if s[3] > 0]


def long_episode(seed: int, shape: LongShape = LONG) -> LongEpisode:
    """The long episode of seed ``seed`` (deterministic from the two)."""
    shape.check()
    arena_seed = LONG_ARENA_BASE + seed
    arena = Arena.generate(arena_seed)
    sign = 1.0 if seed % 2 == 0 else -1.0
    places = places_of(arena, shape, sign, seed)
    frames = session_frames(shape.chunks)
    keyboard, mouse = _segments_to_actions(long_segments(shape, places, frames, sign))
    keyboard, mouse = keyboard[:frames], mouse[:frames]
    poses, clamped = walk(arena, keyboard, mouse)
    if clamped:
        raise ValueError(f"arena {arena_seed}: the long path is clamped on {clamped} frames")
    assert chunks_for(len(keyboard)) == shape.chunks, (len(keyboard), shape.chunks)
    return LongEpisode(Episode(arena_seed, "long", keyboard, mouse, poses, clamped), seed, shape.chunks,
                       shape.observed_chunks, places)
