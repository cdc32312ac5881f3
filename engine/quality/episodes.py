"""Leave-and-return camera paths in held-out arenas: look at a place, go elsewhere for about ``gap``
chunks, come back to exactly the same pose.

Owns the episodes of ``worldpager bench quality``. An episode starts at the session's origin (the
arena's centre, yaw 0) and holds still there (the *place*: chunk 0 is the given true view, the next
chunks are generated at the same pose — the first visit), optionally after a still *prefix* of whole
chunks at the same pose (to run the same path past the positional horizon). It then leaves: a turn
at 4.5 degrees a frame, a walk forward, a slow spin (1.5 degrees a frame) filling the rest of the
gap; and comes back along the exact inverse (the spin unwound, the walk undone with ``s``, the turn
undone), then holds still at the place again (the return). The actions of the way back are the
negation of the way out in reverse order, so the integrated pose returns to the place to rounding;
a path that a wall or pillar would clamp is rejected and the next turn angle is tried.

Arena seeds are ``QUALITY_ARENA_BASE + seed``: disjoint from training (< 1,000,000) and from
``bench arena``'s held-out range (1,001,000 + episode).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.arena.config import ArenaModelConfig
from engine.arena.data import TRAIN_ARENAS
from engine.arena.episodes import Episode, _segments_to_actions, walk
from engine.arena.world import Arena

QUALITY_ARENA_BASE = TRAIN_ARENAS + 500_000
HOLD_CHUNKS = 3                 # still chunks at the place, before leaving and after returning
_MODEL = ArenaModelConfig()
LATENT_PER_CHUNK = _MODEL.frames_per_chunk                 # latent frames a chunk
TEMPORAL = _MODEL.temporal                                 # video frames per latent frame
VIDEO_PER_CHUNK = TEMPORAL * LATENT_PER_CHUNK              # video frames a chunk after the first (9 in chunk 0)
TURN_RATE, SPIN_RATE = 0.3, 0.1  # mouse yaw per frame: 4.5 and 1.5 degrees
TURN_FRAMES = (40, 30, 20, 50)  # 180, 135, 90, 225 degrees: tried in turn until the walk is unclamped
WALK_FRAMES = 20                # about 2.5 world units (a cell and a quarter)
POSE_TOL = 1e-3


@dataclass
class LeaveReturn:
    """A leave-and-return episode and which latent frames are its first visit and its return."""

    episode: Episode
    gap_chunks: int
    prefix_chunks: int
    chunks: int                  # session length in chunks
    first_visit: np.ndarray      # latent frames at the place before leaving (generated ones: chunk >= 1)
    returning: np.ndarray        # latent frames at the place after coming back

    @property
    def arena_seed(self) -> int:
        return self.episode.arena_seed


def _away(gap_chunks: int, turn_frames: int, sign: float) -> list[tuple[str, float, float, int]]:
    half = gap_chunks * VIDEO_PER_CHUNK // 2
    turn = min(turn_frames, half)
    walk_frames = min(WALK_FRAMES, half - turn)
    spin = half - turn - walk_frames
    out = [("", 0.0, TURN_RATE * sign, turn), ("w", 0.0, 0.0, walk_frames), ("", 0.0, SPIN_RATE * sign, spin)]
    back = [({"w": "s"}.get(keys, keys), -pitch, -yaw, n) for keys, pitch, yaw, n in reversed(out)]
    return [s for s in out + back if s[3] > 0]


def chunks_for(video_frames: int) -> int:
    """The most chunks whose video frames fit in ``video_frames`` actions (9 in chunk 0, 12 after)."""
    first = 1 + TEMPORAL * (LATENT_PER_CHUNK - 1)            # chunk 0: 9 video frames
    return 1 + max(0, video_frames - first) // VIDEO_PER_CHUNK


def leave_and_return(seed: int, gap_chunks: int, prefix_chunks: int = 0) -> LeaveReturn:
    """The episode of quality seed ``seed`` with a gap of ``gap_chunks`` chunks away from the place."""
    assert gap_chunks >= 1 and prefix_chunks >= 0, (gap_chunks, prefix_chunks)
    arena_seed = QUALITY_ARENA_BASE + seed
    arena = Arena.generate(arena_seed)
    sign = 1.0 if seed % 2 == 0 else -1.0
    hold = HOLD_CHUNKS * VIDEO_PER_CHUNK
    for turn in TURN_FRAMES:
        segments = [("", 0.0, 0.0, hold + prefix_chunks * VIDEO_PER_CHUNK), *_away(gap_chunks, turn, sign),
                    ("", 0.0, 0.0, hold + VIDEO_PER_CHUNK)]
        keyboard, mouse = _segments_to_actions(segments)
        poses, clamped = walk(arena, keyboard, mouse)
        if clamped == 0:
            break
    else:
        raise ValueError(f"arena {arena_seed}: every leave-and-return path is blocked")
    chunks = chunks_for(len(keyboard))
    latent = poses[::TEMPORAL][:chunks * LATENT_PER_CHUNK]
    at_place = np.linalg.norm(latent - poses[0], axis=1) < POSE_TOL
    leave = int(np.argmin(at_place))                     # first latent frame away from the place
    frames = np.arange(len(latent))
    first = frames[at_place & (frames < leave) & (frames >= LATENT_PER_CHUNK)]
    back = frames[at_place & (frames >= leave) & (frames < chunks * LATENT_PER_CHUNK)]
    assert len(first) and len(back), (arena_seed, gap_chunks)
    episode = Episode(arena_seed, f"gap{gap_chunks}", keyboard, mouse, poses, clamped)
    return LeaveReturn(episode, gap_chunks, prefix_chunks, chunks, first, back)
