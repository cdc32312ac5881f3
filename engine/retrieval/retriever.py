"""The session's retrieval: which past chunks a chunk attends to, from real and predicted poses.

Owns the glue between a trajectory's per-frame poses and the pose-keyed policy: chunk keys are computed
once per chunk and cached, ``select(c)`` uses chunk c's real pose, ``predict_select(c)`` uses the pose
predicted for c from the frames known before c (constant velocity by default). The chunks' video frames
come from the model's ``VideoGrid``; which model it is does not matter here. No torch.

Bounded cost: a long session revisits the same views many times, and scoring every past chunk would
make each chunk's selection grow with the session. Candidates are therefore reduced to the newest chunk
of each *view cell* (position on a ``cell_size`` grid, yaw and pitch in ``angle_bin`` degree bins): an
older chunk of the same cell sees the same place from the same direction, and the policy would prefer
the newer one anyway (its recency term). The number of candidates then grows with the places visited,
not with the session's length. With ``first_visit`` the policy prefers first visits
(``FovOverlapPolicy.prefer_first``): a return brings back the place as first seen (observed, or generated
when the session was youngest), not the latest copy of it. There a chunk stands for a cell when it is
the oldest chunk to have stood in it with *any* of its video frames (``view_cells``), and a chunk that
stands for none is a pure revisit — every view it holds was seen before, so what it holds is a copy —
and never a candidate. The middle frame alone is not enough for that: a chunk turning 54 degrees covers
five angle bins, and a later chunk whose middle frame falls in a bin the first only crossed would win
the coverage ranking with the copy (measured on the long benchmark: a slow turn at the start pose
retrieved its own earlier copies instead of the observed tour, and the re-projected views lost detail
copy by copy).

Prefetch for a walk (``predict_staging``): the set of the extrapolated pose first, then, with ``hedge``,
the sets of the input changes a player makes most (``engine.retrieval.predict.hedge_poses``: stop, turn
either way, walk ahead), merged rank by rank — every hypothesis's best pick before any one's second —
up to the staging slots. ``preferred`` (the chunks at hand: in a slot, staged, in the device cache) goes
to the policy, which may keep them over near-equal views (``FovOverlapPolicy.stick``); so do the observed
chunks (the first ``observed_chunks``), which it ranks first with ``observed_bonus``
(``FovOverlapPolicy.observed_bonus``: a session that re-projects with depth).
"""
from __future__ import annotations

import numpy as np

from engine.geometry import euler_from_quat
from engine.facts.layout import VideoGrid
from engine.retrieval.predict import (ConstantVelocityPredictor, PosePredictor, ReuseCurrentPredictor,
                                      hedge_poses, known_until)
from engine.retrieval.select import ChunkGrid, ChunkPose, FovOverlapPolicy, RetrievalPolicy

SNAP = 1e-4    # of a cell: a coordinate this close to a cell's edge is on it (numeric drift, not a move)


def _bin(values: np.ndarray, size: float) -> np.ndarray:
    """Bins of width ``size`` (integers), snapping first to ``SNAP`` of a bin: a walk out and back
    returns to the start within 1e-6 units, and without the snap a start on a cell edge (the origin)
    would land in the cell below and count as a view never seen."""
    return np.floor(np.round(values / size / SNAP) * SNAP).astype(int)


OBSERVED_FIRST = 1.0   # observed_bonus of a session whose frames take observed pixels from anywhere (depth)
PREDICTORS = {"constant-velocity": ConstantVelocityPredictor, "reuse-current": ReuseCurrentPredictor}


class Retriever:
    def __init__(self, poses: np.ndarray, grid: VideoGrid, policy: RetrievalPolicy | None = None,
                 predictor: PosePredictor | None = None, cell_size: float = 0.5, angle_bin: float = 10.0,
                 first_visit: bool = False, hedge: bool = False, stick: float = 0.0,
                 observed_chunks: int = 0, observed_bonus: float = 0.0):
        self.poses = np.asarray(poses)                       # [T, 7] xyz + quaternion per video frame
        self.grid = ChunkGrid.of_video(grid)
        self.first_visit = first_visit
        self.hedge = hedge
        self.policy = policy or FovOverlapPolicy(prefer_first=first_visit, stick=stick,
                                                 observed_bonus=observed_bonus)
        self.observed = range(observed_chunks)               # chunks [0, n) hold observed frames
        self.predictor = predictor or ConstantVelocityPredictor()
        self.cell_size, self.angle_bin = cell_size, angle_bin
        self._keys: dict[int, ChunkPose] = {}
        self._cell_of: dict[int, tuple] = {}                 # chunk -> view cell
        self._cells_of: dict[int, tuple[tuple, ...]] = {}    # chunk -> every view cell of its frames

    def _cells(self, frames: np.ndarray) -> list[tuple]:
        """The view cells of video ``frames``: grid cell of the position, yaw and pitch bins (``_bin``)."""
        pose = self.poses[frames]                                            # [n, 7]
        yaw, pitch, _ = euler_from_quat(pose[:, 3:])
        xyz = _bin(pose[:, :3], self.cell_size)
        yaw_bin = _bin(np.asarray(yaw, dtype=np.float64), self.angle_bin) % int(round(360 / self.angle_bin))
        pitch_bin = _bin(np.asarray(pitch, dtype=np.float64), self.angle_bin)
        return [(*p, int(y), int(q)) for p, y, q in zip(xyz.tolist(), yaw_bin, pitch_bin)]

    def view_cell(self, chunk: int) -> tuple:
        """The chunk's middle-frame pose, quantised: grid cell of its position, yaw and pitch bins."""
        return self._cells(self.grid.summary_frames(chunk, 1))[0]

    def view_cells(self, chunk: int) -> tuple[tuple, ...]:
        """Every view cell one of the chunk's video frames stands in (each once, cached)."""
        if chunk not in self._cells_of:
            frames = self.grid.frames(chunk)
            self._cells_of[chunk] = tuple(dict.fromkeys(self._cells(np.arange(frames.start, frames.stop))))
        return self._cells_of[chunk]

    def cell_of(self, chunk: int) -> tuple:
        """``view_cell(chunk)``, cached."""
        if chunk not in self._cell_of:
            self._cell_of[chunk] = self.view_cell(chunk)
        return self._cell_of[chunk]

    def representatives(self, candidates: list[int]) -> list[int]:
        """The newest of ``candidates`` in each view cell (its middle frame's); with ``first_visit`` the
        chunks that are the oldest of ``candidates`` in at least one of their frames' cells."""
        kept: dict[tuple, int] = {}
        if self.first_visit:
            for chunk in sorted(candidates):
                for cell in self.view_cells(chunk):
                    kept.setdefault(cell, chunk)
            return sorted(set(kept.values()))
        for chunk in candidates:
            cell = self.cell_of(chunk)
            if cell not in kept or chunk > kept[cell]:
                kept[cell] = chunk
        return sorted(kept.values())

    def key(self, chunk: int) -> ChunkPose:
        if chunk not in self._keys:
            self._keys[chunk] = ChunkPose.of_chunk(self.poses, chunk, self.grid)
        return self._keys[chunk]

    def _select(self, query: ChunkPose, candidates: list[int], k: int, preferred=()) -> list[int]:
        if k <= 0 or not candidates:
            return []
        return self.policy.select(query, {c: self.key(c) for c in self.representatives(candidates)}, k,
                                  preferred=preferred, observed=self.observed)

    def select(self, chunk: int, candidates: list[int], k: int, preferred=()) -> list[int]:
        """The set for ``chunk`` from its real pose."""
        return self._select(self.key(chunk), candidates, k, preferred)

    def predict_select(self, chunk: int, candidates: list[int], k: int, preferred=()) -> list[int]:
        """The set for ``chunk`` from its pose predicted ``lookahead`` chunks earlier."""
        known_chunk = chunk - self.predictor.lookahead
        if known_chunk < 0:
            return []
        return self._select(self.predictor.predict(self.poses, known_chunk, self.grid), candidates, k, preferred)

    def predict_staging(self, chunk: int, candidates: list[int], k: int, slots: int, preferred=(),
                        carried=()) -> list[int]:
        """What to stage for ``chunk`` (at most ``slots`` ids): the predicted set, then ``carried`` (the
        caller's: what the last chunk missed), then (``hedge``) the sets of the hedged poses, merged rank
        by rank."""
        predicted = self.predict_select(chunk, candidates, k, preferred)
        sets = []
        known_chunk = chunk - self.predictor.lookahead
        if self.hedge and known_chunk >= 0 and k > 0 and candidates:
            known = known_until(self.poses, known_chunk, self.grid)
            frames = self.grid.summary_frames(chunk, len(self.key(known_chunk).poses))
            sets += [self._select(ChunkPose(p), candidates, k, preferred) for p in hedge_poses(known, frames)]
        merged = dict.fromkeys([*predicted, *carried])
        for rank in range(k):
            for picks in sets:
                if rank < len(picks):
                    merged.setdefault(picks[rank])
        return list(merged)[:slots]
