"""An arena session's look around (``engine.session.look_around``): its chunks are observed — the world's
rendered truth, flagged in the log, marked in the MP4, stored and retrieved like any other — and a run
stopped inside it or after it resumes to the uninterrupted bytes without looking around again;
``--look-around 0`` is the session without it, a path given by ``--observe`` replaces it, and a value
that cannot make a full turn is one line."""
from __future__ import annotations

import json

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from engine.io.trajectory import load_trajectory
from engine.model.registry import model_spec
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.session.observe import mark_share, session_path
from engine.runtime.telemetry import read_log
from tests_support import one_line_error, resumed_equals_uninterrupted
from worldpager_cli.main import cli

WALK = "segments:\n  - keys: [w]\n    frames: 20\n  - camera: right\n    frames: 30\n"
CHUNKS = 5
LOOK = 3           # chunks: 33 video frames
LOOK_FRAMES = 33


@pytest.fixture
def walk(tmp_path):
    (tmp_path / "walk.yaml").write_text(WALK)
    return tmp_path


def _cfg(tmp, name, **extra):
    flags = {"model": "arena", "chunks": CHUNKS, "look_around": LOOK, "trajectory": tmp / "walk.yaml",
             "out": tmp / f"{name}.mp4", "save_every": 0,
             "memory": {"pool_slots": 4, "late_prefetch": "wait",    # bytes compared: whatever the machine's speed
                        "spill": tmp / f"{name}.spill"}}
    return resolve_session_config(None, {**flags, **extra})


def _frames(path):
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def _observed_flags(log):
    return [bool(r.get("observed")) for r in read_log(log) if r["type"] == "chunk"]


def test_the_look_around_is_observed_truth_marked_logged_and_remembered(walk):
    cfg = _cfg(walk, "s")
    outputs = {}
    session = Session(cfg, on_output=lambda chunk, latents: outputs.__setitem__(chunk, latents.clone()))
    assert session.run().status == "done"
    records = read_log(cfg.log_path)
    assert records[0]["observed"]["chunks"] == LOOK and "a look around" in records[0]["observed"]["source"]
    assert _observed_flags(cfg.log_path) == [True] * LOOK + [False] * (CHUNKS - LOOK)
    for c in range(LOOK):                                  # the renderer's truth of the turn
        assert torch.equal(outputs[c][0], session.model.truth(c))
    assert not torch.equal(outputs[LOOK][0], session.model.truth(LOOK))
    frames = _frames(cfg.out)
    assert all(mark_share(f) > 0.9 for f in frames[:LOOK_FRAMES])
    assert all(mark_share(f) < 0.5 for f in frames[LOOK_FRAMES:])
    chunks = [r for r in records if r["type"] == "chunk"]
    assert any(c in r.get("memory", []) for r in chunks[LOOK:] for c in range(LOOK))   # retrieved later
    # the walk follows from the start view: its poses are the file's, LOOK_FRAMES frames later
    path = session_path(cfg, model_spec(cfg)).trajectory
    alone = load_trajectory(walk / "walk.yaml", "universal", frames=path.frames - LOOK_FRAMES)
    q = np.sign(np.sum(path.poses[LOOK_FRAMES:, 3:] * alone.poses[:, 3:], axis=1, keepdims=True))
    assert np.allclose(path.poses[LOOK_FRAMES:, :3], alone.poses[:, :3], atol=1e-9)
    assert np.allclose(path.poses[LOOK_FRAMES:, 3:] * q, alone.poses[:, 3:], atol=1e-6)


def test_without_it_the_session_is_its_trajectory_alone(walk):
    cfg = _cfg(walk, "off", look_around=0)
    path = session_path(cfg, model_spec(cfg))
    alone = load_trajectory(walk / "walk.yaml", "universal", frames=path.trajectory.frames)
    assert path.observed_chunks == 0 and np.array_equal(path.trajectory.poses, alone.poses)
    assert torch.equal(path.trajectory.actions.keyboard, alone.actions.keyboard)
    assert torch.equal(path.trajectory.actions.mouse, alone.actions.mouse)
    assert Session(cfg).run().status == "done"
    assert read_log(cfg.log_path)[0]["observed"] is None
    assert _observed_flags(cfg.log_path) == [False] * CHUNKS
    assert all(mark_share(f) < 0.5 for f in _frames(cfg.out))


def test_an_observed_clip_replaces_it(walk):
    cfg = _cfg(walk, "clip", observe=walk / "walk.yaml", trajectory=None)
    path = session_path(cfg, model_spec(cfg))
    assert path.observed_chunks == 4 and "walk.yaml" in path.observed   # the clip's 50 frames: 4 chunks


@pytest.mark.parametrize("stop_after", [1, 3])
def test_a_run_stopped_inside_or_after_it_resumes_without_looking_around_again(walk, stop_after):
    whole = _cfg(walk, "whole")
    cut = _cfg(walk, "cut", save_every=1, keep_savepoints=8)
    sp = resumed_equals_uninterrupted(whole, cut, stop_after)
    assert sp.chunk == stop_after + 1
    assert json.loads(cut.config_path.read_text())["look_around"] == LOOK   # the config records it
    assert _observed_flags(cut.log_path) == [True] * LOOK + [False] * (CHUNKS - LOOK)


def test_a_fork_after_it_asks_for_none_of_its_own(walk):
    from engine.session.fork import prepare_fork

    parent = _cfg(walk, "parent", save_every=1, keep_savepoints=8)
    assert Session(parent).run().status == "done"
    fork = prepare_fork(parent.out, LOOK + 1, walk / "walk.yaml", walk / "branch.mp4", chunks=CHUNKS + 1)
    try:
        assert fork.cfg.look_around == 0
        path = session_path(fork.staged_config(), model_spec(fork.cfg))
        assert path.observed_chunks == 0                    # the parent's whole path, its turn included
        parent_path = session_path(parent, model_spec(parent)).trajectory
        frames = fork.savepoint.facts["frames_total"]
        assert torch.equal(path.trajectory.actions.mouse[:frames], parent_path.actions.mouse[:frames])
    finally:
        fork.discard()


@pytest.mark.parametrize("value", ["1", "2", "-1", "x"])
def test_a_look_around_too_short_for_a_full_turn_is_refused(walk, value):
    result = CliRunner().invoke(cli, ["generate", "--look-around", value, "--chunks", "6",
                                      "--out", str(walk / "bad.mp4")])
    one_line_error(result, "--look-around", code=2 if value in ("-1", "x") else 1)   # a usage error: 2
    assert not (walk / "bad.mp4").exists()


def test_a_run_from_before_the_look_around_resumes_along_its_own_path(walk):
    """Its config has no ``look_around`` key: it had none, and none is added when it is resumed."""
    from engine.settings.overlay import write_resolved_config
    from engine.session.resume import run_config

    cfg = _cfg(walk, "old")
    write_resolved_config(cfg, cfg.config_path)
    data = json.loads(cfg.config_path.read_text())
    del data["look_around"]
    cfg.config_path.write_text(json.dumps(data))
    assert run_config(cfg.out).look_around == 0
