"""``lingbot-tiny-act``: the ``act`` control (ray directions + W, A, S, D) in sessions.

The control the session streams chunk by chunk equals the official whole-run ``act`` preparation
(poses resampled, made relative, directions-only rays, the keys of video frames 0, 4, 8, ...), the
keys do reach it, and a pose folder with ``action.npy`` runs end to end through the store (with the
official sink, ``--official-sink``)."""
from __future__ import annotations

import subprocess

import av
import numpy as np
import torch

from engine.config import SessionConfig
from engine.io.trajectory import load_trajectory
from engine.io.trajectory.packaged import packaged_trajectory
from engine.io.trajectory.pose_folder import ACTIONS, export_pose_folder
from engine.model.lingbot.act import act_embedding, latent_actions
from engine.model.lingbot.loop import camera_condition, run_shape
from engine.model.lingbot.pipeline import opencv_c2w
from engine.model.registry import build_world_model, model_spec
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER

CHUNKS = 3


def _act_model(tmp_path, trajectory):
    cfg = SessionConfig(model="lingbot-tiny-act", chunks=CHUNKS, out=tmp_path / "x.mp4")
    spec = model_spec(cfg)
    traj = load_trajectory(trajectory, "universal", spec.grid.frames_total(CHUNKS))
    return build_world_model(cfg, torch.zeros(1, 3, *spec.image_size), traj, torch.device("cpu"), torch.float32)


def _folder_with_keys(tmp_path):
    """orbit.csv's poses with seeded W, A, S, D key states in action.npy."""
    source = load_trajectory(packaged_trajectory("orbit.csv"), "universal", 33)
    folder = tmp_path / "act"
    export_pose_folder(folder, source.poses, None)
    np.save(folder / ACTIONS, np.random.default_rng(3).integers(0, 2, size=(33, 4)).astype(np.int32))
    return folder


def test_streamed_act_control_equals_the_official_whole_run(tmp_path):
    folder = _folder_with_keys(tmp_path)
    model = _act_model(tmp_path, folder)
    m, frames = model.cfg, model.trajectory.frames
    assert m.dit.control_dim == 7 and frames == 33
    shape = run_shape(frames, frames, m.latent_height, m.latent_width, m.dit, m.settings)
    fx, fy, cx, cy = (float(v) for v in np.load(folder / "intrinsics.npy")[0])
    official = camera_condition(opencv_c2w(model.trajectory.poses), torch.tensor([[fx, fy, cx, cy]] * frames), shape)
    keys = latent_actions(np.load(folder / ACTIONS), shape.frame_num, shape.lat_f)
    expected = act_embedding(official.rays[..., 3:], keys)
    streamed = torch.cat([model.control(chunk) for chunk in range(shape.chunks)], dim=2)
    assert streamed.shape == expected.shape == (1, 7 * 64, 9, 12, 20)
    assert torch.allclose(streamed, expected, atol=1e-4, rtol=0)
    assert streamed[0, 3 * 64:].std() > 0.3                 # the seeded keys differ between latent frames


def test_trajectory_keys_drive_act_without_action_npy(tmp_path):
    model = _act_model(tmp_path, packaged_trajectory("revisit_loop.yaml"))
    assert model.trajectory.key_states is None
    control = model.control(0)                               # frames 0, 4, 8 of the YAML's universal keys
    keys = model.trajectory.actions.keyboard[[0, 4, 8]][:, [0, 2, 1, 3]]
    assert torch.equal(control[0, 3 * 64::64, :, 0, 0].T, keys)


def test_act_session_runs_end_to_end(tmp_path):
    folder = _folder_with_keys(tmp_path)
    proc = subprocess.run(WORLDPAGER + ["generate", "--model", "lingbot-tiny-act", "--chunks", str(CHUNKS),
                                        "--trajectory", str(folder), "--pool-slots", "2", "--late-prefetch", "wait",
                                        "--official-sink", "--spill", str(tmp_path / "spill"), "--out", str(tmp_path / "a.mp4"), "--quiet"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE_S)
    assert proc.returncode == 0, proc.stderr
    with av.open(str(tmp_path / "a.mp4")) as c:
        assert sum(1 for _ in c.decode(video=0)) == 9 + 12 * (CHUNKS - 1)
    records = read_log(tmp_path / "a.log.jsonl")
    assert records[0]["config"]["model"] == "lingbot-tiny-act" and records[-1]["status"] == "done"
    assert records[0]["config"]["memory"]["official_sink"] is True
