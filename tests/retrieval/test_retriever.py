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
