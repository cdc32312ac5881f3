"""engine.retrieval.hit_rate: the replay's bookkeeping, and the paper's claim on the packaged
trajectories — constant velocity finds the next retrieval set far more often than reusing the current
pose (paper §II.C: 0.66-0.94 vs 0.03-0.52). Inequalities only, not exact numbers."""
from __future__ import annotations

import numpy as np
import pytest

from engine.config import model_config
from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.retrieval.hit_rate import prediction_hit_rate
from engine.retrieval.predict import ConstantVelocityPredictor, ReuseCurrentPredictor, known_until
from engine.retrieval.select import ChunkGrid, ChunkPose, FovOverlapPolicy

GRID = ChunkGrid.of_video(model_config("mg2-universal").video_grid())
CHUNKS = 60                   # 45 s: yaw turns 3 times, b1_ws walks its stretch 6 times
POLICY = FovOverlapPolicy()


def poses_of(name: str, chunks: int = CHUNKS) -> np.ndarray:
    return load_trajectory(packaged_trajectory(name), "universal", GRID.frames(chunks - 1).stop).poses


class Oracle:
    """Knows the future (for bookkeeping tests only): predicts the true key."""

    lookahead = 1

    def __init__(self, poses: np.ndarray):
        self.poses = poses

    def predict(self, known_poses, chunk, grid):
        known_until(known_poses, chunk, grid)
        return ChunkPose.of_chunk(self.poses, chunk + 1, grid)


@pytest.mark.parametrize("name, margin", [("yaw.yaml", 0.3), ("b1_ws.yaml", 0.3),
                                          ("revisit_loop.yaml", 0.15)])
def test_constant_velocity_beats_reusing_the_current_pose(name, margin):
    poses = poses_of(name)
    cv = prediction_hit_rate(poses, CHUNKS, ConstantVelocityPredictor(), POLICY, k=3)
    reuse = prediction_hit_rate(poses, CHUNKS, ReuseCurrentPredictor(), POLICY, k=3)
    assert cv["hit_rate"] >= 0.66, cv                            # the paper's lower end
    assert cv["hit_rate"] > reuse["hit_rate"] + margin, (cv, reuse)


def test_oracle_hits_everything_and_counts_add_up():
    poses = poses_of("revisit_loop.yaml", 30)
    r = prediction_hit_rate(poses, 30, Oracle(poses), POLICY, k=3)
    assert r["hit_rate"] == 1.0 and r["hits"] == r["total"] and r["exact_sets"] == r["chunks_scored"]
    # k=3 candidates exist from chunk 4 on (0..2 are older than the one-chunk window of chunk 4).
    assert r["chunks_scored"] == 30 - 4
    assert r["total"] == pytest.approx(r["mean_true_size"] * r["chunks_scored"])


def test_window_and_sink_delay_the_first_scored_chunk():
    poses = poses_of("yaw.yaml", 20)
    cv = ConstantVelocityPredictor()
    assert prediction_hit_rate(poses, 20, cv, POLICY, k=3, window_chunks=2)["chunks_scored"] == 20 - 5
    assert prediction_hit_rate(poses, 20, cv, POLICY, k=3, sink=True)["chunks_scored"] == 20 - 5


def test_lookahead_two_still_beats_reuse_on_a_steady_turn():
    poses = poses_of("yaw.yaml")
    cv2 = prediction_hit_rate(poses, CHUNKS, ConstantVelocityPredictor(lookahead=2), POLICY, k=3)
    reuse2 = prediction_hit_rate(poses, CHUNKS, ReuseCurrentPredictor(lookahead=2), POLICY, k=3)
    assert cv2["hit_rate"] > reuse2["hit_rate"] + 0.3
