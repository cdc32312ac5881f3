"""``worldpager arena truth LOG``: the ground truth of an arena session, rendered from its log.

A 3-chunk session of the default arena model, and a 9-chunk one that walks into a wall (clamped frames)
with a save point at chunk 4 that a branch is forked from on another path. Their truths have the
sessions' frame counts; a truth frame is the arena's render at the session model's own pose (checked
against a render made here, up to video compression, and against a wrong pose); the pose CSV holds the
clamped poses the session's model used (rebuilt through the model registry), and loads back as a pose
trajectory; a fork's truth follows the parent before the fork and the branch after it; a killed run's log
gives the truth of what it wrote. Each error is one line that leaves nothing under --out.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from engine.arena.render import render
from engine.arena.weights import config_of, packaged_weights_path
from engine.arena.world import Arena
from engine.geometry import poses_euler
from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.quality.metrics import psnr
from engine.model.registry import build_world_model, model_spec
from engine.session.observe import session_path
from engine.session.resume import run_config
from tests_support import one_line_error
from worldpager_cli.main import cli

WALK = "segments:\n  - keys: [w]\n    frames: 200\n"     # straight ahead from the spawn point, into a wall


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def truth(log: Path, out: Path, *extra):
    result = run("arena", "truth", log, "--out", out, *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1]), result


def decoded(path: Path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def as_model_pixels(rgb: np.ndarray) -> torch.Tensor:
    """uint8 [..., H, W, 3] -> float [..., 3, H, W] in [-1, 1] (the metrics' range)."""
    return torch.from_numpy(rgb).movedim(-1, -3).float() / 127.5 - 1


def model_camera(mp4: Path) -> np.ndarray:
    """The clamped poses the session's model had: its config, its path, the registry's model."""
    cfg = run_config(mp4)
    return build_world_model(cfg, None, session_path(cfg, model_spec(cfg)).trajectory, torch.device("cpu"),
                             torch.float32).camera_poses()


def csv_rows(path: Path) -> tuple[list[str], np.ndarray]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], np.array(rows[1:], dtype=np.float64)


def rendered(pose: np.ndarray, yaw_offset: float = 0.0) -> np.ndarray:
    """The arena's view at ``pose``, made here: rendered, rounded, each pixel repeated 4 x 4."""
    m = config_of(packaged_weights_path())
    x, _, z, yaw, pitch, _ = poses_euler(pose)
    frame = render(Arena.generate(1000017), x, z, yaw + yaw_offset, pitch, m.height, m.width, m.hfov)
    rgb = np.round((np.clip(frame, -1, 1) + 1) * 127.5).astype(np.uint8).transpose(1, 2, 0)
    return np.repeat(np.repeat(rgb, m.upscale, axis=0), m.upscale, axis=1)


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("truth")
    result = run("generate", "--chunks", "3", "--save-every", "0", "--quiet", "--out", tmp / "a.mp4")
    assert result.exit_code == 0, result.output
    return tmp


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("walk")
    (tmp / "walk.yaml").write_text(WALK, encoding="utf-8")
    result = run("generate", "--chunks", "9", "--store", "window", "--save-every", "4", "--keep-savepoints", "4",
                 "--trajectory", tmp / "walk.yaml", "--look-around", "0", "--quiet", "--out", tmp / "w.mp4")
    assert result.exit_code == 0, result.output
    return tmp


def test_truth_has_the_sessions_frames_and_frame_0_is_the_render_at_its_first_pose(session):
    out = session / "t.mp4"
    summary, result = truth(session / "a.log.jsonl", out)
    lines = result.output.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("wrote the truth of ")
    assert summary["out"] == str(out) and summary["poses"] == str(session / "t.poses.csv")
    assert (summary["model"], summary["arena_seed"]) == ("arena", 1000017)
    frames, video = decoded(out), decoded(session / "a.mp4")
    assert summary["frames"] == len(frames) == len(video) == 33
    assert frames.shape == video.shape
    poses = model_camera(session / "a.mp4")
    at_pose = psnr(as_model_pixels(frames[0]), as_model_pixels(rendered(poses[0]))).item()
    wrong = psnr(as_model_pixels(frames[0]), as_model_pixels(rendered(poses[0], yaw_offset=90.0))).item()
    assert at_pose > 35.0 and wrong < at_pose - 15.0, (at_pose, wrong)
    score = psnr(as_model_pixels(video), as_model_pixels(frames))      # the session scored against it
    assert score.shape == (33,) and torch.isfinite(score.mean())
    assert not [p.name for p in session.iterdir() if p.name.startswith(".")]     # no temporaries left


def test_pose_csv_holds_the_clamped_poses_and_loads_back(walk):
    header = json.loads((walk / "w.log.jsonl").read_text().splitlines()[0])
    assert any("clamped at walls" in note for note in header["notes"]), header["notes"]
    summary, _ = truth(walk / "w.log.jsonl", walk / "wt.mp4", "--poses", walk / "poses.csv")
    columns, rows = csv_rows(walk / "poses.csv")
    poses = model_camera(walk / "w.mp4")
    assert columns == ["frame", "x", "y", "z", "yaw", "pitch"]
    assert summary["frames"] == len(rows) == len(decoded(walk / "wt.mp4")) == len(poses) == 105
    assert np.array_equal(rows[:, 0], np.arange(105))
    assert np.array_equal(rows[:, 1:], poses_euler(poses)[:, :5])
    back = load_trajectory(walk / "poses.csv", "universal", frames=105)
    assert back.frames == 105
    assert np.allclose(back.poses, poses, atol=1e-6)


def test_a_forks_truth_follows_the_parent_then_the_branch(walk):
    result = run("fork", walk / "w.mp4", "--at", "4", "--trajectory", packaged_trajectory("yaw.yaml"),
                 "--out", walk / "b.mp4", "--chunks", "6", "--quiet")
    assert result.exit_code == 0, result.output
    fork_frame = [json.loads(line) for line in (walk / "b.log.jsonl").read_text().splitlines()
                  if '"type":"fork"' in line][-1]["frames_total"]
    summary, _ = truth(walk / "b.log.jsonl", walk / "bt.mp4")
    _, rows = csv_rows(walk / "bt.poses.csv")
    parent, branch = poses_euler(model_camera(walk / "w.mp4")), poses_euler(model_camera(walk / "b.mp4"))
    assert summary["frames"] == len(rows) == len(decoded(walk / "b.mp4")) == 69
    assert np.array_equal(rows[:fork_frame, 1:], parent[:fork_frame, :5])
    assert np.array_equal(rows[fork_frame:, 1:], branch[fork_frame:69, :5])
    assert not np.allclose(rows[fork_frame:, 1:], parent[fork_frame:69, :5])     # the branch went elsewhere


def test_a_killed_runs_truth_is_that_of_what_it_wrote(session, tmp_path):
    lines = (session / "a.log.jsonl").read_text().splitlines()
    chunks = [i for i, line in enumerate(lines) if '"type":"chunk"' in line]
    cut = tmp_path / "cut.log.jsonl"     # no summary, the last chunk's line half-written
    cut.write_text("\n".join(lines[:chunks[-1]]) + "\n" + lines[chunks[-1]][:40], encoding="utf-8")
    summary, _ = truth(cut, tmp_path / "t.mp4")
    assert summary["frames"] == len(decoded(tmp_path / "t.mp4")) == 21


def _edited_log(session: Path, target: Path, **config) -> Path:
    """A copy of the session's log whose header's config has ``config``'s values."""
    lines = (session / "a.log.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["config"].update(config)
    target.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    return target


def _nothing_written(directory: Path) -> None:
    assert not [p.name for p in directory.iterdir() if p.name.startswith(("t.", ".t."))]


def test_errors_are_one_line_and_write_nothing(session, tmp_path):
    out = tmp_path / "t.mp4"
    one_line_error(run("arena", "truth", tmp_path / "none.log.jsonl", "--out", out), "log not found")
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    one_line_error(run("arena", "truth", tmp_path / "notes.txt", "--out", out), "is not a session log")
    mg2 = _edited_log(session, tmp_path / "mg2.log.jsonl", model="mg2-universal")
    one_line_error(run("arena", "truth", mg2, "--out", out),
                   f"{mg2} is a session of mg2-universal; truth is rendered for the arena model only")
    moved = _edited_log(session, tmp_path / "moved.log.jsonl", trajectory=str(tmp_path / "gone.yaml"))
    one_line_error(run("arena", "truth", moved, "--out", out), f"its trajectory {tmp_path / 'gone.yaml'} no longer exists")
    _nothing_written(tmp_path)
    log, mp4 = session / "a.log.jsonl", session / "a.mp4"
    before = (mp4.read_bytes(), log.read_bytes())
    one_line_error(run("arena", "truth", log, "--out", mp4), "is the session's own MP4")
    one_line_error(run("arena", "truth", log, "--out", log), "is the session's own log")
    one_line_error(run("arena", "truth", log, "--out", out, "--poses", log), "is the session's own log")
    one_line_error(run("arena", "truth", log, "--out", tmp_path / "no" / "t.mp4"), "does not exist")
    assert (mp4.read_bytes(), log.read_bytes()) == before
    _nothing_written(tmp_path)


def test_a_failure_while_writing_leaves_the_earlier_truth_as_it_was(session, tmp_path, monkeypatch):
    out = tmp_path / "t.mp4"
    truth(session / "a.log.jsonl", out)
    kept = (out.read_bytes(), (tmp_path / "t.poses.csv").read_bytes())

    def fail(*args, **kwargs):
        raise OSError("the renderer stopped")
    monkeypatch.setattr("engine.arena.truth.render_latents", fail)
    result = run("arena", "truth", session / "a.log.jsonl", "--out", out)
    assert result.exit_code != 0
    assert (out.read_bytes(), (tmp_path / "t.poses.csv").read_bytes()) == kept
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
