"""The parity runner's ``act`` control derivation (``engine.model.parity.lingbot_camera.camera_rows``)
against an independent computation written from the fixture README's words.

An ``act`` case is built from the ``cam_tiny`` fixture's poses and intrinsics plus seeded WASD actions:
the expected control tensor takes the official ray directions stored in ``cam.plucker`` (channels 3-5:
with ``act`` the rays lose their origin) and lays the actions of video frames 0, 4, 8, ... into channels
3*64 + 64*a + 8*dy + dx, element by element. A case whose actions are read one video frame late must fail.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from engine.model.parity import lingbot as parity_lingbot
from engine.model.parity.fixture import DEFAULT_TOLERANCE
from engine.model.parity.lingbot_camera import camera_rows
from tests.parity.test_lingbot_parity import FIXTURE, lingbot_parity_dir

STRIDE = 8


def _cam_fixture() -> parity_lingbot.Case:
    path = lingbot_parity_dir() / FIXTURE
    if not path.is_file():
        pytest.skip(f"LingBot parity fixtures not found at {path.parent}")
    return parity_lingbot.Case.open(path)


def _expected_embedding(directions: np.ndarray, actions: np.ndarray, first: int) -> np.ndarray:
    """Written from the README: channel 64*c + 8*dy + dx holds ray channel c at pixel (8i+dy, 8j+dx);
    the 4 action channels follow the 3 direction channels, one value per latent frame for every pixel."""
    frames, height, width, _ = directions.shape
    lat_h, lat_w = height // STRIDE, width // STRIDE
    out = np.zeros((1, 7 * STRIDE * STRIDE, frames, lat_h, lat_w), dtype=np.float32)
    for c in range(3):
        for dy in range(STRIDE):
            for dx in range(STRIDE):
                out[0, 64 * c + 8 * dy + dx] = directions[:, dy::STRIDE, dx::STRIDE, c]
    for f in range(frames):
        row = actions[first + 4 * f]                       # video frame 4f: picked, not interpolated
        for a in range(4):
            out[0, 64 * (3 + a):64 * (4 + a), f] = row[a]
    return out


def _act_case(tmp_path: Path, cam: parity_lingbot.Case, first: int) -> Path:
    fx = cam.fx
    config = dict(fx.json("config"), control_type="act")
    actions = np.random.default_rng(7).integers(0, 2, size=(50, 4)).astype(np.int32)   # as action.npy
    directions = fx.tensor("cam.plucker")[..., 3:].numpy()
    tensors = {"inputs.poses_c2w": fx.tensor("inputs.poses_c2w"), "inputs.intrinsics": fx.tensor("inputs.intrinsics"),
               "inputs.action": torch.from_numpy(actions),
               "cam.wasd_action": torch.from_numpy(actions[first::4][:12].astype(np.float32)),
               **{k: fx.tensor(k) for k in ("cam.Ks", "cam.c2ws_interpolated", "cam.c2ws_relative")},
               "cam.plucker": torch.from_numpy(np.ascontiguousarray(directions)),
               "cam.embedding": torch.from_numpy(_expected_embedding(directions, actions, first))}
    path = tmp_path / f"act_{first}.safetensors"
    save_file(tensors, str(path), metadata={"config": json.dumps(config), "settings": fx.metadata["settings"]})
    return path


def test_act_control_follows_the_official_rule(tmp_path):
    cam = _cam_fixture()
    case = parity_lingbot.Case.open(_act_case(tmp_path, cam, first=0))
    assert case.cfg.control_dim == 7 and case.cfg.control_in_features == 7 * 64 * 4
    rows = dict(camera_rows(case.fx, case.shape, case.cfg.control_type))
    assert set(rows) >= {"cam.embedding", "cam.plucker", "cam.Ks", "cam.c2ws_relative", "cam.wasd_action"}
    assert all(err < DEFAULT_TOLERANCE for err in rows.values()), rows


def test_actions_read_one_frame_late_fail(tmp_path):
    cam = _cam_fixture()
    case = parity_lingbot.Case.open(_act_case(tmp_path, cam, first=1))
    rows = dict(camera_rows(case.fx, case.shape, case.cfg.control_type))
    assert rows["cam.embedding"] > 0.1 and rows["cam.wasd_action"] > 0.1
