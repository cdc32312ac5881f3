"""The fog transfer of re-projection with depth (engine.arena.fog): the horizon read from the frames, and
moved pixels nearer the truth with it than without."""
from __future__ import annotations

import math

import torch

import engine.arena.depth_reproject as depth_reproject
from engine.arena import fog
from engine.arena.config import ArenaModelConfig
from engine.arena.render import depth, render
from engine.arena.world import Arena
from moved_views import reached_psnr

CFG = ArenaModelConfig()
ARENA = 1003007                        # a held-out arena
LOOK = [(0.0, 0.0, float(y), 0.0) for y in range(0, 360, 30)]


def _frames(arena, cams):
    frames = torch.stack([torch.from_numpy(render(arena, *c, CFG.height, CFG.width, CFG.hfov)) for c in cams])
    z = torch.stack([torch.from_numpy(depth(arena, *c, CFG.height, CFG.width, CFG.hfov)) for c in cams])
    return frames[None], z[None], torch.tensor(cams)[None]


def test_the_horizon_is_read_from_the_sky_alone():
    arena = Arena.generate(ARENA)
    frames, z, cams = _frames(arena, LOOK)
    observed = torch.ones(1, len(LOOK), dtype=torch.bool)
    got = fog.horizon(frames, torch.isinf(z), observed, cams, CFG.hfov)
    want = torch.tensor(arena.sky_horizon, dtype=torch.float32) * 2 - 1
    assert got is not None and torch.allclose(got[0], want, atol=1e-3)
    # walls read as sky by a poor depth (one for every ten sky pixels) do not move it much
    poor = torch.isinf(z).clone()
    walls = torch.isfinite(z).flatten().nonzero().squeeze(1)
    pick = walls[torch.randperm(len(walls), generator=torch.Generator().manual_seed(0))[:int(poor.sum()) // 10]]
    poor.view(-1)[pick] = True
    got = fog.horizon(frames, poor, observed, cams, CFG.hfov)
    assert got is not None and (got[0] - want).abs().max() < 0.05
    assert fog.horizon(frames, torch.zeros_like(poor), observed, cams, CFG.hfov) is None   # no sky: no fit


def test_pixels_moved_nearer_take_the_targets_fog(monkeypatch):
    arena = Arena.generate(ARENA)
    frames, z, cams = _frames(arena, LOOK)
    inv = torch.where(torch.isinf(z), torch.zeros_like(z), z.reciprocal())
    targets = [(2.5 * math.cos(a), 2.5 * math.sin(a), float(y), 0.0) for a, y in ((0.3, 10), (2.0, 200), (4.0, 290))]
    scores = {}
    for on in (False, True):
        monkeypatch.setattr(depth_reproject, "FOG", on)
        scores[on] = reached_psnr(arena, frames, inv, cams, targets)
    assert scores[True] > scores[False] + 0.3, scores
