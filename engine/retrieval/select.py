"""Which past chunks a chunk attends to: pose-keyed retrieval by camera-frustum overlap (numpy only).

Contract:
  * ``ChunkGrid`` says which video frames each chunk covers (chunk 0: frames 0..8; chunk c >= 1: frames
    12c-3 .. 12c+8 for MG2); ``ChunkGrid.of_video`` derives it from a model's ``VideoGrid``.
  * ``ChunkPose`` is a chunk's retrieval key: the camera poses ``[m, 7]`` (``engine.geometry``
    convention: x, y, z, qw, qx, qy, qz, camera looks along its local -z, world +y up) of ``m`` frames
    spread over the chunk (default 3: first, middle, last), because a chunk's KV holds all its frames and
    a turning camera sweeps ~18 degrees within one chunk.
  * ``RetrievalPolicy.select(query, candidates, k, exclude, newest_allowed, preferred)`` returns at most
    ``k`` candidate ids, best first. It never returns an id in ``exclude`` (the caller's sink) or newer
    than ``newest_allowed`` (the local window: the newest chunk that has left the window), and it is a pure
    function of its arguments (same inputs, same list). ``preferred`` names the chunks already at hand
    (in a slot, staged or in the device cache): a policy may favour them over near-equal others.

``FovOverlapPolicy`` (the default) scores like WorldMem / HY-WorldPlay (research/world_model_peers.md
§4): a fixed, seeded set of sample points inside the query camera's frustum stands in for "what the query
will see"; a candidate covers a point when the point lies inside the frustum of any of its summary frames.
Picks are greedy set cover — each pick maximises the fraction of points *not yet covered* plus a small
recency bonus — so the k picks complement each other instead of repeating one view, and picking stops
early when no candidate adds at least ``min_gain``. A candidate at hand (``preferred``) gets ``stick`` on
top of its gain: between near-equal views the one already loaded wins, so a small change of pose does not
swap a slot for a view that adds almost nothing (each swap is a load, and one the prefetch may not have
guessed: a retrieval miss). Candidates farther than ``max_distance`` from the
query are never considered (also the prefilter that keeps thousands of candidates cheap). No occlusion:
a wall between two cameras is invisible to this test (see the peers note on VMem for the alternative).
"""
from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from engine.geometry import quat_to_matrix
from engine.facts.layout import VideoGrid

SUMMARY_FRAMES = 3      # frames per ChunkPose: first, middle, last of the chunk


# ---------------------------------------------------------------- chunk geometry and keys

@dataclass(frozen=True)
class ChunkGrid:
    """Video frames of each chunk: chunk 0 has ``first_frames``, each later chunk ``frames_per_chunk``."""

    first_frames: int = 9
    frames_per_chunk: int = 12

    def __post_init__(self) -> None:
        assert self.first_frames >= 1 and self.frames_per_chunk >= 1

    @classmethod
    def of_video(cls, grid: VideoGrid) -> "ChunkGrid":
        """The chunk geometry of a model's video grid (its frame rate plays no part in retrieval)."""
        return cls(grid.first_frames, grid.frames_per_chunk)

    def frames(self, chunk: int) -> range:
        """The video frame indices of ``chunk``."""
        assert chunk >= 0, chunk
        if chunk == 0:
            return range(self.first_frames)
        start = self.first_frames + (chunk - 1) * self.frames_per_chunk
        return range(start, start + self.frames_per_chunk)

    def chunks_in(self, total_frames: int) -> int:
        """Whole chunks that ``total_frames`` video frames hold."""
        if total_frames < self.first_frames:
            return 0
        return 1 + (total_frames - self.first_frames) // self.frames_per_chunk

    def summary_frames(self, chunk: int, count: int = SUMMARY_FRAMES) -> np.ndarray:
        """``count`` frame indices spread evenly over ``chunk`` (first and last included; 1 = middle)."""
        assert count >= 1
        r = self.frames(chunk)
        if count == 1:
            return np.array([(r.start + r.stop - 1) // 2], dtype=np.int64)
        return np.rint(np.linspace(r.start, r.stop - 1, count)).astype(np.int64)


@dataclass(frozen=True, eq=False)
class ChunkPose:
    """A chunk's retrieval key: camera poses ``[m, 7]`` of ``m >= 1`` of its frames (float64)."""

    poses: np.ndarray

    def __post_init__(self) -> None:
        p = np.asarray(self.poses, dtype=np.float64)
        p = p[None] if p.ndim == 1 else p
        assert p.ndim == 2 and p.shape[1] == 7 and len(p) >= 1, p.shape
        object.__setattr__(self, "poses", p)

    @classmethod
    def of_chunk(cls, trajectory_poses: np.ndarray, chunk: int, grid: ChunkGrid,
                 count: int = SUMMARY_FRAMES) -> "ChunkPose":
        """The key of ``chunk`` from per-video-frame poses ``[T, 7]`` (T must reach the chunk's end)."""
        frames = grid.summary_frames(chunk, count)
        assert frames[-1] < len(trajectory_poses), (chunk, len(trajectory_poses))
        return cls(np.asarray(trajectory_poses)[frames])


# ---------------------------------------------------------------- the policy interface

class RetrievalPolicy(Protocol):
    def select(self, query: ChunkPose, candidates: Mapping[int, ChunkPose], k: int,
               exclude: Collection[int] = (), newest_allowed: int | None = None,
               preferred: Collection[int] = (), observed: Collection[int] = ()) -> list[int]:
        """At most ``k`` ids of ``candidates``, best first; none in ``exclude`` or newer than
        ``newest_allowed``; deterministic. ``preferred``: the chunks at hand; ``observed``: the chunks
        that hold observed frames (the world's truth), which a policy may rank first."""
        ...


# ---------------------------------------------------------------- FOV overlap

@dataclass(frozen=True)
class FovOverlapPolicy:
    """Greedy frustum-overlap coverage with a distance cutoff and a recency tie-breaker.

    Defaults (world units ~ metres with the default calibration; MG2 walks 0.12 per frame, turns 1.5
    degrees per frame, so one chunk moves ~1.5 units or turns 18 degrees):
      * ``hfov_deg`` 90, ``vfov_deg`` 60 — about MG2's 640x352 frame at a 90-degree horizontal FOV
        (MG2 states no intrinsics; the exact value matters less than using one for query and memory).
      * ``near`` 0.5, ``far`` 8 — the depths of the query's sample points and the depth range in which
        a candidate camera "sees" a point (HY-WorldPlay's 8-unit visibility limit). Points are uniform
        in image position and in depth, so every pixel direction and every depth layer weighs the same
        (uniform-in-volume sampling, as WorldMem does, would let the far field dominate).
      * ``points_per_frame`` 128 per query summary frame (384 for the default 3-frame key): one point is
        0.26 % of the score; the picks' coverage is stable to a few points.
      * ``max_distance`` 8 — a candidate whose nearest summary frame is farther than this from the
        query's nearest summary frame is never picked, however its frustum overlaps.
      * ``recency_weight`` 0.01 — bonus ``0.01 * id / newest`` (at most ~4 points' worth): between near
        duplicates the newer chunk wins, since it is closer to the current appearance of the place;
        it cannot outweigh a real coverage difference.
      * ``prefer_first`` False — True turns the bonus round (``0.01 * (1 - id / newest)``): between near
        duplicates the *first* visit wins, the world as it was first seen or observed rather than the
        model's latest rendition of it (which, in a long session, is a copy of a copy).
      * ``stick`` 0 — the bonus of a candidate at hand (``preferred``), in coverage (0.1 = 10 % of the
        query's points): a view at hand is kept unless another adds that much more. The session sets it
        (``memory.stick``).
      * ``observed_bonus`` 0 — the bonus of an observed chunk (``observed``: frames given to the session,
        the world's truth), in coverage: 1 takes every observed chunk that adds ``min_gain`` before any
        generated one. A session that re-projects with depth sets it (``memory.observed_first``): there an
        observed frame's pixels are moved into the view from anywhere and outrank a generated frame's, so
        the memory is best spent on observed views of what is in sight (measured on the walking benchmark's
        30-s ``onward`` walk: memory frames observed 5.3 -> 7.2 of 9, pixels drawn from observed sources
        65 % -> 94 %, the frames 22.9 -> 23.6 dB).
      * ``min_gain`` 0.05 — stop picking when no candidate adds at least 5 % new coverage, so a set can
        be shorter than ``k`` (e.g. an exact revisit covers everything with one chunk).
      * ``seed`` 0 — the sample points are drawn once per policy, so selection is reproducible.
      * ``block`` 512 — candidates per vectorised block; bounds the temporary at
        ``block * m * points * 3`` floats (~7 MB with the defaults).
    """

    hfov_deg: float = 90.0
    vfov_deg: float = 60.0
    near: float = 0.5
    far: float = 8.0
    points_per_frame: int = 128
    max_distance: float = 8.0
    recency_weight: float = 0.01
    prefer_first: bool = False
    min_gain: float = 0.05
    stick: float = 0.0
    observed_bonus: float = 0.0
    seed: int = 0
    block: int = 512
    _local_points: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert 0 < self.hfov_deg < 180 and 0 < self.vfov_deg < 180
        assert 0 < self.near < self.far and self.points_per_frame >= 1 and self.block >= 1
        assert self.max_distance >= 0 and self.recency_weight >= 0 and 0 <= self.min_gain <= 1
        assert self.stick >= 0 and self.observed_bonus >= 0
        object.__setattr__(self, "_local_points", self._sample_local_points())

    @property
    def _tan_half(self) -> tuple[float, float]:
        return math.tan(math.radians(self.hfov_deg) / 2), math.tan(math.radians(self.vfov_deg) / 2)

    def _sample_local_points(self) -> np.ndarray:
        """[P, 3] camera-frame points filling the frustum: uniform image position, uniform depth."""
        rng = np.random.default_rng(self.seed)
        uv = rng.uniform(-1.0, 1.0, size=(self.points_per_frame, 2))
        depth = rng.uniform(self.near, self.far, size=self.points_per_frame)
        tan_h, tan_v = self._tan_half
        return np.stack([uv[:, 0] * tan_h * depth, uv[:, 1] * tan_v * depth, -depth], axis=-1)

    # ------------------------------------------------------------ public

    def select(self, query: ChunkPose, candidates: Mapping[int, ChunkPose], k: int,
               exclude: Collection[int] = (), newest_allowed: int | None = None,
               preferred: Collection[int] = (), observed: Collection[int] = ()) -> list[int]:
        ids = _eligible_ids(candidates, exclude, newest_allowed)
        if k <= 0 or not len(ids):
            return []
        keys = _stack_keys(candidates, ids)                              # [C, m, 7]
        near = self.within_distance(query, keys)
        ids, keys = ids[near], keys[near]
        if not len(ids):
            return []
        cover = self.coverage(self.query_points(query), keys)           # [C, N]
        newest = newest_allowed if newest_allowed is not None else int(ids[-1])
        at_hand = np.isin(ids, np.fromiter(preferred, dtype=np.int64)) if self.stick and preferred else None
        truth = np.isin(ids, np.fromiter(observed, dtype=np.int64)) if self.observed_bonus and observed else None
        return self._greedy(ids, cover, k, newest, at_hand, truth)

    def query_points(self, query: ChunkPose) -> np.ndarray:
        """[m * P, 3] world points: the fixed local points placed in each of the query's frustums."""
        rot = quat_to_matrix(query.poses[:, 3:])                        # [m, 3, 3]
        world = np.einsum("mde,pe->mpd", rot, self._local_points) + query.poses[:, None, :3]
        return world.reshape(-1, 3)

    def within_distance(self, query: ChunkPose, keys: np.ndarray) -> np.ndarray:
        """[C] bool: the candidate's nearest summary frame lies within ``max_distance`` of the query's."""
        diff = keys[:, :, None, :3] - query.poses[None, None, :, :3]    # [C, m, mq, 3]
        return np.sqrt((diff ** 2).sum(-1)).min(axis=(1, 2)) <= self.max_distance

    def coverage(self, points: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """[C, N] bool: point n lies inside the frustum of at least one summary frame of candidate c."""
        out = np.zeros((len(keys), len(points)), dtype=bool)
        for start in range(0, len(keys), self.block):
            out[start:start + self.block] = self._coverage_block(points, keys[start:start + self.block])
        return out

    # ------------------------------------------------------------ internals

    def _coverage_block(self, points: np.ndarray, keys: np.ndarray) -> np.ndarray:
        c, m = keys.shape[:2]
        rot = quat_to_matrix(keys[..., 3:])                              # [c, m, 3, 3]
        # Camera-frame coordinates R^T (p - t), written for row vectors as p @ R - t @ R; the p @ R
        # part is one BLAS matmul over all frames (an einsum here is several times slower).
        rows = rot.transpose(2, 0, 1, 3).reshape(3, c * m * 3)          # [d, (c m e)]
        offset = np.einsum("cmd,cmde->cme", keys[..., :3], rot)         # [c, m, 3]
        local = (points @ rows).reshape(len(points), c, m, 3) - offset   # [N, c, m, 3]
        depth = -local[..., 2]                                           # the camera looks along -z
        tan_h, tan_v = self._tan_half
        inside = ((depth >= self.near) & (depth <= self.far)
                  & (np.abs(local[..., 0]) <= depth * tan_h) & (np.abs(local[..., 1]) <= depth * tan_v))
        return inside.any(axis=2).T                                      # [c, N]

    def _greedy(self, ids: np.ndarray, cover: np.ndarray, k: int, newest: int,
                at_hand: np.ndarray | None = None, observed: np.ndarray | None = None) -> list[int]:
        """Greedy cover: each round takes the candidate adding the most uncovered points (+ recency,
        + ``stick`` for a candidate at hand, + ``observed_bonus`` for an observed one)."""
        n_points = cover.shape[1]
        age = ids / max(newest, 1)
        bonus = self.recency_weight * ((1 - age) if self.prefer_first else age)
        if at_hand is not None:
            bonus = bonus + self.stick * at_hand
        if observed is not None:
            bonus = bonus + self.observed_bonus * observed
        uncovered = np.ones(n_points, dtype=bool)
        free = np.ones(len(ids), dtype=bool)
        picked: list[int] = []
        for _ in range(min(k, len(ids))):
            gain = cover[:, uncovered].sum(axis=1) / n_points
            ok = free & (gain > 0) & (gain >= self.min_gain)
            if not ok.any():
                break
            # ids are ascending, so on an exact tie argmax's first maximum is the lowest id: stable.
            best = int(np.argmax(np.where(ok, gain + bonus, -np.inf)))
            picked.append(int(ids[best]))
            free[best] = False
            uncovered &= ~cover[best]
        return picked


def _eligible_ids(candidates: Mapping[int, ChunkPose], exclude: Collection[int],
                  newest_allowed: int | None) -> np.ndarray:
    """Sorted candidate ids that are neither excluded nor newer than ``newest_allowed``."""
    excluded = set(exclude)
    ids = sorted(c for c in candidates
                 if c not in excluded and (newest_allowed is None or c <= newest_allowed))
    return np.asarray(ids, dtype=np.int64)


def _stack_keys(candidates: Mapping[int, ChunkPose], ids: np.ndarray) -> np.ndarray:
    """[C, m, 7] poses of ``ids``; every candidate key must have the same number of frames."""
    keys = [candidates[int(c)].poses for c in ids]
    sizes = {len(p) for p in keys}
    assert len(sizes) == 1, f"candidate keys mix frame counts {sorted(sizes)}"
    return np.stack(keys)
