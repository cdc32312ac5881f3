"""The arena world and its exact renderer: determinism, geometry, collisions, revisit detection."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.arena.episodes import KINDS, make_episode, revisit_frames
from engine.arena.render import render
from engine.arena.world import Arena, ArenaConfig

H, W = 48, 80


def test_same_seed_same_world_same_frame():
    a, b = Arena.generate(5), Arena.generate(5)
    assert np.array_equal(a.solid, b.solid) and np.array_equal(a.colour, b.colour)
    f1 = render(a, 0.3, -0.7, 33.0, 5.0, H, W)
    f2 = render(b, 0.3, -0.7, 33.0, 5.0, H, W)
    assert f1.dtype == np.float32 and f1.shape == (3, H, W)
    assert np.array_equal(f1, f2)
    assert not np.array_equal(f1, render(Arena.generate(6), 0.3, -0.7, 33.0, 5.0, H, W))
    assert f1.min() >= -1 and f1.max() <= 1


def test_spawn_area_is_free_and_walls_surround():
    for seed in range(20):
        a = Arena.generate(seed)
        n, c = a.cfg.cells, a.cfg.cells // 2
        assert a.solid[0].all() and a.solid[-1].all() and a.solid[:, 0].all() and a.solid[:, -1].all()
        r = a.cfg.spawn_clear
        assert not a.solid[c - r:c + r + 1, c - r:c + r + 1].any()
        assert not a.blocked(*a.spawn)


def _red_wall_world(distance_cells: float) -> tuple[Arena, float]:
    """An empty, fog-free arena whose walls are plain red; the camera stands ``distance_cells`` from the
    north wall's face (grid z = 1), facing it (yaw 0 looks along -z)."""
    cfg = ArenaConfig(pillar_fraction=0.0, fog_distance=1e9)
    a = Arena.generate(0, cfg)
    a.texture[:] = -1                      # no pattern: the cell's plain colour
    a.colour[:] = (1.0, 0.0, 0.0)
    return a, (1.0 + distance_cells - a.spawn[1]) * cfg.cell_size


@pytest.mark.parametrize("d", [1.5, 2.5, 4.0])
def test_wall_straight_ahead_spans_the_expected_rows(d):
    """Row r shows the wall exactly when its ray, at horizontal distance d, is between floor and top."""
    a, z = _red_wall_world(d)
    frame = render(a, 0.0, z, 0.0, 0.0, H, W)
    column = frame[:, :, W // 2].T                                    # [H, 3]
    is_red = np.all(np.abs(column - np.array([1.0, -1.0, -1.0])) < 1e-5, axis=1)
    slope = (1 - (np.arange(H) + 0.5) / H * 2) * math.tan(math.radians(45)) * H / W
    height = a.cfg.eye_height + slope * d
    expected = (height >= 0) & (height <= a.cfg.wall_height)
    assert np.array_equal(is_red, expected), (np.nonzero(is_red)[0], np.nonzero(expected)[0])
    assert 0 < expected.sum() < H                                     # the wall neither fills nor misses the view
    nearer = render(a, 0.0, z - a.cfg.cell_size * 0.5, 0.0, 0.0, H, W)[:, :, W // 2].T
    assert np.all(np.abs(nearer - np.array([1.0, -1.0, -1.0])) < 1e-5, axis=1).sum() > expected.sum()


def test_turning_moves_the_view_the_right_way():
    """yaw > 0 turns right: what was right of centre moves towards the centre."""
    a = Arena.generate(11)
    f0 = render(a, 0.0, 0.0, 0.0, 0.0, H, W)
    f1 = render(a, 0.0, 0.0, 22.5, 0.0, H, W)      # a quarter of the 90-degree view
    shift = W // 4
    err_right = np.abs(f1[:, :, :W - shift] - f0[:, :, shift:]).mean()
    err_left = np.abs(f1[:, :, shift:] - f0[:, :, :W - shift]).mean()
    assert err_right < err_left


def test_walking_into_a_wall_is_clamped_and_reported():
    a = Arena.generate(2)
    x = np.linspace(0.0, 0.0, 200)
    z = np.linspace(0.0, -100.0, 200)                 # straight north, far through the wall
    cx, cz, clamped = a.clamp_path(x, z)
    assert clamped.any() and not clamped[:5].any()
    gx, gz = a.to_grid(cx, cz)
    assert all(not a.blocked(float(u), float(v)) for u, v in zip(gx, gz))
    assert cz.min() > -a.cfg.cells * a.cfg.cell_size / 2


@pytest.mark.parametrize("kind", KINDS)
def test_episodes_stay_in_free_space(kind):
    rng = np.random.default_rng(0)
    ep = make_episode(3, kind, 141, rng)
    a = Arena.generate(3)
    gx, gz = a.to_grid(ep.poses[:, 0], ep.poses[:, 2])
    assert ep.poses.shape == (142, 7) and ep.keyboard.shape == (141, 4)
    assert all(not a.blocked(float(u), float(v)) for u, v in zip(gx, gz))


def test_revisit_frames_find_returns_only():
    yaw = np.array([0, 0, 0, 30, 60, 90, 60, 30, 0, 0, 0, 0], dtype=float)
    pitch = np.zeros_like(yaw)
    xz = np.zeros((len(yaw), 2))
    got = revisit_frames(yaw, pitch, xz, frames_per_chunk=3)
    # frames 8..11 are back at yaw 0, held in chunk 0; frame 7 (yaw 30) matches frame 3 only one chunk earlier
    assert got.tolist() == [False] * 8 + [True] * 4
