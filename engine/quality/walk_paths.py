"""Walking paths of ``bench quality --walk``: places that are really new, and returns to them.

Owns the walk episode. It starts at the session's origin (the arena's centre, yaw 0) with the long
benchmark's observed look-around (``engine.quality.long_paths``: a still start and a whole turn on the
spot, given to the session as ``--observe``), or, with ``look_around=False``, with the still start
alone (chunk 0, the view every session is handed, is then all that is observed). The rest is walked
at full key speed (0.1235 units a video frame, 0.49 units a latent frame) and turned at 4.5 degrees a
frame; its kinds (``WALK_KINDS``):

* ``onward`` — a square spiral out from the start, rings ``SPACING`` units apart (so the path never
  comes back within 0.5 units of where it was), with a whole look-around turn at each corner of its
  outer rings: a walk that never returns;
* ``loops`` — squares of side ``LOOP_SIDE`` at places round the start, each walked twice (the second
  lap returns to places first made by the model a few seconds before);
* ``near`` — out from the start to a place ``OUT`` units away and back, not to the start but to a
  point 0.2 to 2 units off it (``OFFSETS``), facing the start's view: returns near an observed place;
* ``home`` — the onward spiral (wider, fewer look-arounds), then, when the session has about
  ``HOME_S`` seconds left, back to the start and a whole turn there: a return home after minutes.

Every path stays within ``BOUND`` units of the start: inside the arena's spawn area, which is kept free
of pillars (``ArenaConfig.spawn_clear``), so no wall clamps it (checked). A path shorter than the
session ends turning slowly on the spot; a longer one is cut. Odd seeds walk the mirror image.
Arena seeds are ``LONG_ARENA_BASE + seed``: the long benchmark's held-out range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.arena.episodes import Episode, _segments_to_actions, walk
from engine.arena.world import Arena
from engine.io.poses import Calibration
from engine.quality.episodes import TURN_RATE, chunks_for
from engine.quality.long_paths import FPS, LONG_ARENA_BASE, LongShape
from engine.quality.revisit_paths import START_HOLD, TURN_DEG, session_frames

WALK_KINDS = ("onward", "loops", "near", "home")
STEP = Calibration().distance_per_frame          # world units a video frame of a held key
BOUND = 4.3                                      # world units: the spawn area's free square, less the radius
SPACING = 1.0                                    # units between the onward spiral's rings
LOOP_SIDE = 2.0
LOOP_CENTRES = ((-2.2, -2.2), (2.2, -2.2), (2.2, 2.2), (-2.2, 2.2), (0.0, -2.2), (2.2, 0.0), (0.0, 2.2), (-2.2, 0.0))
OUT = 3.0                                        # units out from the start on a ``near`` leg
OUT_HEADINGS = (45, 135, -135, -45, 90, 180, -90, 0)
OFFSETS = ((0.25, 90), (0.5, -135), (1.0, 180), (1.5, -60), (2.0, 120), (0.2, -90), (0.75, 45), (1.25, 0))
HOME_S = 14.0                                    # seconds left when the home walk turns back
SLOW = 0.1                                       # mouse yaw a frame of the closing slow turn (1.5 degrees)


@dataclass(frozen=True)
class WalkShape:
    """How long a walk episode is and whether it starts with the observed look-around."""

    minutes: float = 2.0
    look_around: bool = True

    def check(self) -> "WalkShape":
        LongShape(minutes=self.minutes).check()
        return self

    @property
    def chunks(self) -> int:
        return LongShape(minutes=self.minutes).chunks

    @property
    def observed_chunks(self) -> int:
        return LongShape(minutes=self.minutes).observed_chunks if self.look_around else 1


@dataclass
class WalkEpisode:
    episode: Episode
    seed: int
    chunks: int
    observed_chunks: int
    look_around: bool

    @property
    def arena_seed(self) -> int:
        return self.episode.arena_seed

    @property
    def kind(self) -> str:
        return self.episode.kind

    @property
    def tour_frames(self) -> int:
        """Video frames given as ``--observe`` (0: none)."""
        return session_frames(self.observed_chunks) if self.look_around else 0


class Pen:
    """Segments of actions with the camera they leave (x, z in world units, yaw in degrees), mirrored
    by ``sign`` (x -> sign * x, turns times sign)."""

    def __init__(self, sign: float):
        self.sign, self.x, self.z, self.yaw, self.segments = sign, 0.0, 0.0, 0.0, []

    @property
    def frames(self) -> int:
        return sum(s[3] for s in self.segments)

    def turn(self, degrees: float, rate: float = TURN_RATE) -> None:
        frames = round(abs(degrees) / (TURN_DEG * rate / TURN_RATE))
        if frames:
            d = math.copysign(frames * TURN_DEG * rate / TURN_RATE, degrees)
            self.segments.append(("", 0.0, math.copysign(rate, degrees) * self.sign, frames))
            self.yaw += d

    def face(self, yaw: float) -> None:
        self.turn((yaw - self.yaw + 180.0) % 360.0 - 180.0)

    def hold(self, frames: int) -> None:
        if frames > 0:
            self.segments.append(("", 0.0, 0.0, frames))

    def goto(self, x: float, z: float) -> None:
        """Turn towards (x, z) (unmirrored coordinates) and walk there."""
        dx, dz = x - self.x, z - self.z
        if math.hypot(dx, dz) < STEP / 2:
            return
        self.face(math.degrees(math.atan2(dx, -dz)))
        frames = round(math.hypot(dx, dz) / STEP)
        self.segments.append(("w", 0.0, 0.0, frames))
        y = math.radians(self.yaw)
        self.x += frames * STEP * math.sin(y)
        self.z -= frames * STEP * math.cos(y)


def _spiral(pen: Pen, spacing: float, look_from: int, frames: int) -> None:
    """A square spiral out from where the pen is, a look-around at each corner from leg ``look_from``."""
    legs, (dx, dz), x, z = 0, (0.0, -1.0), pen.x, pen.z
    while pen.frames < frames:
        length = spacing * (legs // 2 + 1)
        nx, nz = x + dx * length, z + dz * length
        if max(abs(nx), abs(nz)) > BOUND:
            return
        pen.goto(nx, nz)
        x, z, legs = nx, nz, legs + 1
        if legs >= look_from:
            pen.turn(360.0)
        dx, dz = -dz, dx                                   # a quarter turn right


def onward(pen: Pen, frames: int) -> None:
    _spiral(pen, SPACING, 6, frames)


def loops(pen: Pen, frames: int) -> None:
    h, i = LOOP_SIDE / 2, 0
    while pen.frames < frames:
        cx, cz = LOOP_CENTRES[i % len(LOOP_CENTRES)]
        corners = [(cx - h, cz + h), (cx - h, cz - h), (cx + h, cz - h), (cx + h, cz + h)]
        for _ in range(2):
            for corner in corners:
                pen.goto(*corner)
        pen.goto(*corners[0])
        i += 1


def near(pen: Pen, frames: int) -> None:
    i = 0
    while pen.frames < frames:
        h = math.radians(OUT_HEADINGS[i % len(OUT_HEADINGS)])
        pen.goto(OUT * math.sin(h), -OUT * math.cos(h))
        pen.turn(90.0)
        pen.turn(-90.0)
        d, a = OFFSETS[i % len(OFFSETS)]
        pen.goto(d * math.sin(math.radians(a)), -d * math.cos(math.radians(a)))
        pen.face(0.0)
        pen.hold(16)
        i += 1


def home(pen: Pen, frames: int) -> None:
    back = frames - int(HOME_S * FPS)
    _spiral(pen, 1.2 * SPACING, 8, back)
    if pen.frames < back:                                 # the spiral is done early: turn slowly till then
        pen.turn((back - pen.frames) * SLOW * TURN_DEG / TURN_RATE, rate=SLOW)
    pen.goto(0.0, 0.0)
    pen.face(0.0)
    pen.turn(360.0)


PATHS = {"onward": onward, "loops": loops, "near": near, "home": home}


def walk_segments(kind: str, shape: WalkShape, frames: int, sign: float) -> list:
    pen = Pen(sign)
    pen.hold(START_HOLD)
    if shape.look_around:
        pen.turn(360.0)
    PATHS[kind](pen, frames)
    if pen.frames < frames:                               # the ground is covered: turn slowly on the spot
        pen.turn((frames - pen.frames) * SLOW * TURN_DEG / TURN_RATE, rate=SLOW)
    return pen.segments


def walk_episode(seed: int, kind: str, shape: WalkShape = WalkShape()) -> WalkEpisode:
    """The ``kind`` walk of seed ``seed`` (deterministic from the three)."""
    shape.check()
    if kind not in PATHS:
        raise ValueError(f"unknown walk kind {kind!r}")
    arena_seed = LONG_ARENA_BASE + seed
    arena = Arena.generate(arena_seed)
    sign = 1.0 if seed % 2 == 0 else -1.0
    frames = session_frames(shape.chunks)
    keyboard, mouse = _segments_to_actions(walk_segments(kind, shape, frames, sign))
    keyboard, mouse = keyboard[:frames], mouse[:frames]
    poses, clamped = walk(arena, keyboard, mouse)
    if clamped:
        raise ValueError(f"arena {arena_seed}: the {kind} walk is clamped on {clamped} frames")
    assert chunks_for(len(keyboard)) == shape.chunks, (len(keyboard), shape.chunks)
    return WalkEpisode(Episode(arena_seed, kind, keyboard, mouse, poses, clamped), seed, shape.chunks,
                       shape.observed_chunks, shape.look_around)
