"""LingBot-World-Fast camera utilities: properties that hold for any pose list (no fixture needed)."""
from __future__ import annotations

import math

import pytest
import torch

from engine.errors import InputError
from engine.model.lingbot import camera


def _pose(yaw: float, t: tuple[float, float, float]) -> torch.Tensor:
    c, s = math.cos(yaw), math.sin(yaw)
    m = torch.eye(4)
    m[:3, :3] = torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    m[:3, 3] = torch.tensor(t)
    return m


def test_interpolation_hits_the_source_poses_and_halves_the_angle():
    poses = torch.stack([_pose(0.0, (0, 0, 0)), _pose(1.0, (2, 0, 0)), _pose(2.9, (2, 4, 0))])
    src = torch.arange(3, dtype=torch.float64)
    at_sources = camera.interpolate_poses(poses, src, src)
    assert torch.allclose(at_sources, poses, atol=1e-6)
    half = camera.interpolate_poses(poses, src, torch.tensor([0.5, 1.5], dtype=torch.float64))
    assert torch.allclose(half[0], _pose(0.5, (1, 0, 0)), atol=1e-6)
    assert torch.allclose(half[1], _pose(1.95, (2, 2, 0)), atol=1e-6)


def test_interpolation_refuses_positions_outside_the_poses():
    poses = torch.stack([_pose(0.0, (0, 0, 0)), _pose(0.1, (1, 0, 0))])
    with pytest.raises(InputError):
        camera.interpolate_poses(poses, torch.arange(2, dtype=torch.float64),
                                 torch.tensor([1.5], dtype=torch.float64))


def test_relative_poses_are_frame_to_frame_steps_with_unit_largest_translation():
    poses = torch.stack([_pose(0.3, (5, 5, 5)), _pose(0.5, (6, 5, 5)), _pose(0.9, (6, 8, 5))])
    rel = camera.relative_poses(poses)
    assert torch.allclose(rel[0], torch.eye(4))
    assert torch.allclose(rel[:, :3, 3].norm(dim=-1).max(), torch.tensor(1.0))
    raw = camera.relative_poses(poses, normalize=False)
    assert torch.allclose(raw[2], torch.linalg.inv(poses[1]) @ poses[2], atol=1e-5)
    glob = camera.relative_poses(poses, framewise=False, normalize=False)
    assert torch.allclose(glob[2], torch.linalg.inv(poses[0]) @ poses[2], atol=1e-5)


def test_rays_of_the_identity_pose_point_through_the_pixels():
    ks = torch.tensor([[4.0, 4.0, 2.0, 2.0]])
    rays = camera.plucker_rays(torch.eye(4)[None], ks, 4, 4)
    assert rays.shape == (1, 4, 4, 6)
    assert torch.equal(rays[..., :3], torch.zeros(1, 4, 4, 3))
    d = rays[0, 1, 3, 3:]                       # pixel centre (3.5, 1.5): ((3.5-2)/4, (1.5-2)/4, 1)
    expected = torch.tensor([0.375, -0.125, 1.0])
    assert torch.allclose(d, expected / expected.norm())


def test_control_embedding_channel_rule():
    frames, h, w, ch, s = 2, 16, 24, 6, 8
    rays = torch.randn(frames, h, w, ch)
    emb = camera.control_embedding(rays, s)
    assert emb.shape == (1, ch * s * s, frames, h // s, w // s)
    c, dy, dx, f, i, j = 4, 3, 5, 1, 1, 2
    assert emb[0, s * s * c + s * dy + dx, f, i, j] == rays[f, s * i + dy, s * j + dx, c]


def test_intrinsics_scale_then_crop():
    ks = torch.tensor([[480.0, 470.0, 400.0, 250.0]])
    out = camera.transform_intrinsics(ks, (480, 832), (96, 160), (80, 144))
    expected = torch.tensor([[480 * 160 / 832, 470 * 96 / 480, 400 * 160 / 832 - 8, 250 * 96 / 480 - 8]])
    assert torch.allclose(out, expected)
