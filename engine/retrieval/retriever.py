"""The session's retrieval: which past chunks a chunk attends to, from real and predicted poses.

Owns the glue between a trajectory's per-frame poses and the pose-keyed policy: chunk keys are computed
once per chunk and cached, ``select(c)`` uses chunk c's real pose, ``predict_select(c)`` uses the pose
predicted for c from the frames known before c (constant velocity by default). No torch.
"""
from __future__ import annotations

import numpy as np

from engine.config import ModelConfig
from engine.retrieval.predict import ConstantVelocityPredictor, PosePredictor, ReuseCurrentPredictor
from engine.retrieval.select import ChunkGrid, ChunkPose, FovOverlapPolicy, RetrievalPolicy

PREDICTORS = {"constant-velocity": ConstantVelocityPredictor, "reuse-current": ReuseCurrentPredictor}


class Retriever:
    def __init__(self, poses: np.ndarray, model_cfg: ModelConfig, policy: RetrievalPolicy | None = None,
                 predictor: PosePredictor | None = None):
        self.poses = np.asarray(poses)                       # [T, 7] xyz + quaternion per video frame
        self.grid = ChunkGrid(model_cfg.video_frames_of_chunk(0), model_cfg.video_frames_of_chunk(1))
        self.policy = policy or FovOverlapPolicy()
        self.predictor = predictor or ConstantVelocityPredictor()
        self._keys: dict[int, ChunkPose] = {}

    def key(self, chunk: int) -> ChunkPose:
        if chunk not in self._keys:
            self._keys[chunk] = ChunkPose.of_chunk(self.poses, chunk, self.grid)
        return self._keys[chunk]

    def _select(self, query: ChunkPose, candidates: list[int], k: int) -> list[int]:
        if k <= 0 or not candidates:
            return []
        return self.policy.select(query, {c: self.key(c) for c in candidates}, k)

    def select(self, chunk: int, candidates: list[int], k: int) -> list[int]:
        """The set for ``chunk`` from its real pose."""
        return self._select(self.key(chunk), candidates, k)

    def predict_select(self, chunk: int, candidates: list[int], k: int) -> list[int]:
        """The set for ``chunk`` from its pose predicted ``lookahead`` chunks earlier."""
        known_chunk = chunk - self.predictor.lookahead
        if known_chunk < 0:
            return []
        return self._select(self.predictor.predict(self.poses, known_chunk, self.grid), candidates, k)
