"""The session's retriever: candidates bounded by view cells, selections from real and predicted poses."""
from __future__ import annotations

import numpy as np

from engine.config import model_config
from engine.geometry import make_poses, quat_from_euler
from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.retrieval.retriever import Retriever

MODEL = model_config("mg2-universal")


def retriever_for(name: str, chunks: int) -> Retriever:
    poses = load_trajectory(packaged_trajectory(name), MODEL.mode, MODEL.video_frames_total(chunks)).poses
    return Retriever(poses, MODEL.video_grid())


def test_candidates_grow_with_places_not_with_session_length():
    r = retriever_for("yaw.yaml", 400)
    early = r.representatives(list(range(40)))      # two full turns
    late = r.representatives(list(range(398)))       # twenty
    assert len(late) <= len(early) + 2 and len(late) < 60
    assert max(late) == 397                          # the newest chunk of its cell is kept
    assert all(r.view_cell(c) != r.view_cell(d) for c in late for d in late if c < d)


def test_revisits_are_still_found_after_pruning():
    r = retriever_for("yaw.yaml", 100)
    chosen = r.select(90, list(range(88)), 3)
    # one turn is 20 chunks: the same view as chunk 90 was last seen at chunk 70 (or 50, 30, ...)
    assert chosen and chosen[0] == 70
    assert r.predict_select(90, list(range(88)), 3)[0] == 70


def test_first_visit_retrieval_brings_back_the_first_of_the_same_views():
    """``first_visit``: of the chunks that saw the same view, the first stands for the cell and is
    picked (the place as first seen, not the latest copy of it); the default keeps the newest."""
    poses = load_trajectory(packaged_trajectory("yaw.yaml"), MODEL.mode, MODEL.video_frames_total(100)).poses
    first = Retriever(poses, MODEL.video_grid(), first_visit=True)
    cells = first.representatives(list(range(88)))
    assert min(cells) == 0 and max(cells) < 20                # one turn: every cell's first chunk
    assert first.select(90, list(range(88)), 3)[0] == 10      # chunk 90's view, first seen at chunk 10
    assert first.predict_select(90, list(range(88)), 3)[0] == 10
    assert retriever_for("yaw.yaml", 100).select(90, list(range(88)), 3)[0] == 70


def turning_poses(yaws: list[float], positions: np.ndarray | None = None) -> np.ndarray:
    """Per-frame poses ``[T, 7]`` at the origin (or ``positions``) looking along ``yaws``."""
    yaws = np.asarray(yaws, dtype=np.float64)
    pos = np.zeros((len(yaws), 3)) if positions is None else positions
    return make_poses(pos, quat_from_euler(yaws, np.zeros_like(yaws)))


def test_first_visit_candidates_own_a_view_no_earlier_chunk_had():
    """A chunk whose every frame stands in a view cell an older chunk's frames stood in holds a copy:
    it is never a candidate, even when its middle frame's angle bin is one the older chunks only
    crossed (the tour turns 4.5 degrees a frame, the later chunk turns slowly through the same yaws)."""
    grid = MODEL.video_grid()
    tour = [4.5 * i for i in range(grid.frames_total(4))]                 # chunks 0-3: 0 .. 148.5 degrees
    slow = [93.0 + 0.5 * i for i in range(grid.frames_per_chunk)]         # chunk 4: 93 .. 98.5 degrees
    new = [200.0 + 0.5 * i for i in range(grid.frames_per_chunk)]         # chunk 5: never seen
    r = Retriever(turning_poses(tour + slow + new), grid, first_visit=True)
    assert r.representatives(list(range(6))) == [0, 1, 2, 3, 5]
    # the newest-visit default keys a chunk by its middle frame alone
    assert 4 in Retriever(turning_poses(tour + slow + new), grid).representatives(list(range(6)))


def test_a_return_to_the_start_within_rounding_is_the_same_view():
    """A walk out and back leaves the camera 1e-6 units off the origin, a cell edge: it is the
    start's view cell, not the one below."""
    grid = MODEL.video_grid()
    frames = grid.frames_total(2)
    pos = np.zeros((frames, 3))
    pos[grid.first_frames:, 2] = -1.2e-6
    r = Retriever(turning_poses([0.0] * frames, pos), grid, first_visit=True)
    assert r.view_cells(1) == r.view_cells(0) and r.view_cell(1) == r.view_cell(0)
    assert r.representatives([0, 1]) == [0]
