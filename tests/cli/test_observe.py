"""Sessions that start from what was observed (``--observe``), on the arena model.

An observed chunk's clean pass leaves the KV a generated chunk with the same latents would; the observed
chunks are the world's truth, flagged in the log and marked in the MP4, stored and retrieved like any
other; a run stopped inside the observed prefix resumes to the uninterrupted bytes, and a fork after it
that goes the parent's own way equals the parent; bad input is one line.
"""
from __future__ import annotations

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from engine.model.kv_context import AttentionContext
from engine.model.registry import build_world_model, model_spec
from engine.settings.overlay import resolve_session_config
from engine.session.fork import prepare_fork
from engine.session.loop import Session
from engine.session.observe import mark_observed, mark_share, session_path
from engine.runtime.telemetry import read_log
from tests_support import one_line_error, resumed_equals_uninterrupted
from worldpager_cli.main import cli

TOUR = "segments:\n  - keys: [w]\n    frames: 20\n  - camera: right\n    frames: 14\n"    # 34 frames: 3 chunks
EXPLORE = "segments:\n  - keys: [s]\n    frames: 30\n  - camera: left\n    frames: 40\n"
CHUNKS = 6
OBSERVED = 3


@pytest.fixture
def paths(tmp_path):
    (tmp_path / "tour.yaml").write_text(TOUR)
    (tmp_path / "explore.yaml").write_text(EXPLORE)
    return tmp_path


def _cfg(tmp, name, **extra):
    flags = {"model": "arena", "chunks": CHUNKS, "observe": tmp / "tour.yaml", "trajectory": tmp / "explore.yaml",
             "out": tmp / f"{name}.mp4", "save_every": 0,
             "memory": {"pool_slots": 4, "late_prefetch": "wait"}}   # bytes compared: whatever the machine's speed
    for key, value in extra.items():
        if key == "memory":
            flags["memory"] = {**flags["memory"], **value}
        else:
            flags[key] = value
    return resolve_session_config(None, flags)


def _frames(path):
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def test_the_path_is_the_clips_then_the_explorations(paths):
    cfg = _cfg(paths, "p")
    spec = model_spec(cfg)
    path = session_path(cfg, spec)
    assert path.observed_chunks == OBSERVED and "tour.yaml" in path.observed
    traj = path.trajectory
    assert traj.frames == spec.grid.frames_total(CHUNKS)
    clip = session_path(_cfg(paths, "q", observe=None, look_around=0, trajectory=paths / "tour.yaml"), spec).trajectory
    seen = spec.grid.frames_total(OBSERVED)
    assert np.allclose(traj.poses[:seen], clip.poses[:seen], atol=1e-9)              # the clip's own path
    assert torch.equal(traj.actions.keyboard[seen:seen + 30, 1], torch.ones(30))      # then explore's "s"


def test_an_observed_chunk_leaves_the_kv_of_a_generated_chunk_with_its_latents(paths):
    """Chunk 1 generated, then the same chunk observed with the generated latents as its truth: the same
    K/V in every layer (the copy layer's included)."""
    cfg = _cfg(paths, "kv")
    spec = model_spec(cfg)
    path = session_path(cfg, spec)
    model = build_world_model(cfg, None, path.trajectory, torch.device("cpu"), torch.float32)

    def context_after_chunk_0():
        ctx = AttentionContext(model.layout, memory_chunks=0)
        model.observe(0, ctx)
        ctx.commit()
        return ctx

    ctx = context_after_chunk_0()
    latents = model.denoise(1, ctx)
    generated = [(k.clone(), v.clone()) for k, v in ctx.current_kv()]
    ctx = context_after_chunk_0()
    model.truth = lambda chunk: latents[0]           # what was "observed" is what was generated
    observed = model.observe(1, ctx)
    assert torch.equal(observed, latents)
    for (k, v), (k2, v2) in zip(generated, ctx.current_kv()):
        assert torch.equal(k, k2) and torch.equal(v, v2)


def test_a_session_observes_then_generates_and_stores_the_observed_chunks(paths):
    cfg = _cfg(paths, "s", memory={"spill": paths / "spill"})
    outputs = {}
    session = Session(cfg, on_output=lambda chunk, latents: outputs.__setitem__(chunk, latents.clone()))
    result = session.run()
    assert result.status == "done"
    records = read_log(cfg.log_path)
    assert records[0]["observed"]["chunks"] == OBSERVED
    chunks = [r for r in records if r["type"] == "chunk"]
    assert [bool(r.get("observed")) for r in chunks] == [True] * OBSERVED + [False] * (CHUNKS - OBSERVED)
    for c in range(OBSERVED):                         # observed latents are the world's truth
        assert torch.equal(outputs[c][0], session.model.truth(c))
    assert not torch.equal(outputs[OBSERVED][0], session.model.truth(OBSERVED))
    frames = _frames(cfg.out)
    seen = model_spec(cfg).grid.frames_total(OBSERVED)
    assert len(frames) == model_spec(cfg).grid.frames_total(CHUNKS)
    assert all(mark_share(f) > 0.9 for f in frames[:seen])
    assert all(mark_share(f) < 0.5 for f in frames[seen:])
    # the observed chunks went into the memory like any other: stored, and retrieved later
    assert sum(len(r.get("memory", [])) for r in chunks[OBSERVED:]) > 0
    assert any(c in r.get("memory", []) for r in chunks[OBSERVED:] for c in range(OBSERVED))


def test_the_mark_is_drawn_on_either_frame_layout():
    uint8 = torch.zeros(2, 48, 80, 3, dtype=torch.uint8)
    assert mark_share(mark_observed(uint8)[0].numpy()) == 1.0 and not uint8.any()   # a copy is marked
    floats = -torch.ones(2, 3, 48, 80)
    marked = mark_observed(floats)
    as_uint8 = ((marked[0].permute(1, 2, 0) + 1) * 127.5).round().to(torch.uint8).numpy()
    assert mark_share(as_uint8) == 1.0 and mark_share(np.zeros((48, 80, 3), np.uint8)) == 0.0


def test_a_stop_inside_the_observed_prefix_resumes_to_the_uninterrupted_bytes(paths):
    whole = _cfg(paths, "whole", memory={"spill": paths / "whole.spill"})
    cfg = _cfg(paths, "cut", save_every=1, memory={"spill": paths / "cut.spill"})
    assert resumed_equals_uninterrupted(whole, cfg, stop_after=1).chunk == 2 < OBSERVED
    assert [bool(r.get("observed")) for r in read_log(cfg.log_path) if r["type"] == "chunk"] == \
        [True] * OBSERVED + [False] * (CHUNKS - OBSERVED)


def test_a_fork_after_the_prefix_that_goes_the_parents_way_equals_the_parent(paths):
    parent = _cfg(paths, "parent", save_every=1, keep_savepoints=CHUNKS, memory={"spill": paths / "parent.spill"})
    assert Session(parent).run().status == "done"
    # the parent's own actions from the fork's frame on, as a file: the branch goes the same way
    spec = model_spec(parent)
    at = OBSERVED + 1
    traj = session_path(parent, spec).trajectory
    start = spec.grid.frames_total(at)
    rows = ["frame,w,s,a,d,mouse_pitch,mouse_yaw"] + [
        ",".join([str(i), *(str(int(v)) for v in k), *(repr(float(v)) for v in m)])
        for i, (k, m) in enumerate(zip(traj.actions.keyboard.numpy()[start:], traj.actions.mouse.numpy()[start:]))]
    (paths / "same.csv").write_text("\n".join(rows) + "\n")
    branch = prepare_fork(parent.out, at, paths / "same.csv", paths / "branch.mp4", chunks=CHUNKS)
    assert branch.cfg.observe is None
    result = Session(branch.cfg, resume_from=branch.savepoint, fork_of=branch).run()
    assert result.status == "done"
    a, b = _frames(parent.out), _frames(branch.cfg.out)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    flags = [bool(r.get("observed")) for r in read_log(branch.cfg.log_path) if r["type"] == "chunk"]
    assert flags == [True] * OBSERVED + [False] * (CHUNKS - OBSERVED)    # the parent's records, then its own


@pytest.mark.parametrize("make, needle", [
    (lambda tmp: tmp / "missing.yaml", "file not found"),
    (lambda tmp: tmp, "is a directory"),
    (lambda tmp: (tmp / "short.yaml", (tmp / "short.yaml").write_text("segments:\n  - keys: [w]\n    frames: 4\n"))[0],
     "shorter than one chunk"),
    (lambda tmp: (tmp / "clip.mp4", (tmp / "clip.mp4").write_bytes(b"\0" * 64))[0], "not a video"),
])
def test_bad_observations_are_one_line_errors(paths, make, needle):
    path = make(paths)
    out = paths / "bad.mp4"
    result = CliRunner().invoke(cli, ["generate", "--observe", str(path), "--chunks", "6", "--out", str(out), "--quiet"])
    one_line_error(result, needle, str(path))
    assert not out.exists()


def test_a_clip_that_is_the_whole_session_and_a_model_that_cannot_observe_are_one_line_errors(paths):
    runner = CliRunner()
    whole = runner.invoke(cli, ["generate", "--observe", str(paths / "tour.yaml"), "--chunks", "3",
                                "--out", str(paths / "w.mp4"), "--quiet"])
    one_line_error(whole, "covers 3 chunks", "--chunks above 3")
    micro = runner.invoke(cli, ["generate", "--model", "micro", "--observe", str(paths / "tour.yaml"), "--chunks", "6",
                                "--out", str(paths / "m.mp4"), "--quiet"])
    one_line_error(micro, "micro model cannot start from an observed clip")


def test_the_joined_paths_tracking_names_frames_of_the_whole_session():
    from engine.io.trajectory import TrackingError
    from engine.session.observe import joined_tracking

    clip = TrackingError(position=0.3, yaw_deg=2.0, position_frame=5, yaw_frame=7, turn_deg=1.5, step=0.1235)
    after = TrackingError(position=0.1, yaw_deg=80.0, position_frame=3, yaw_frame=12, turn_deg=1.5, step=0.1235)
    joined = joined_tracking(clip, after, offset=33)
    assert (joined.position, joined.position_frame) == (0.3, 5)          # the clip's, at its own frame
    assert (joined.yaw_deg, joined.yaw_frame) == (80.0, 45)              # the exploration's, 33 frames on
    assert (joined.pitch_deg, joined.pitch_frame) == (0.0, None)
