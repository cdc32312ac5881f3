"""The session's retriever: candidates bounded by view cells, selections from real and predicted poses."""
from __future__ import annotations

from engine.config import model_config
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
