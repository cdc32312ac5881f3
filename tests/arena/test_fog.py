"""The fog transfer of re-projection with depth (engine.arena.fog): the horizon read from the frames, and
moved pixels nearer the truth with it than without."""
from __future__ import annotations

import math

import torch

import engine.arena.depth_reproject as depth_reproject
from engine.arena import fog
from engine.arena.config import ArenaModelConfig
from engine.arena.render import depth, render
from engine.arena.source_rank import OBSERVED
from engine.arena.world import Arena

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


def test_pixels_moved_nearer_take_the_targets_fog():
    arena = Arena.generate(ARENA)
    frames, z, cams = _frames(arena, LOOK)
    kind = torch.full((1, len(LOOK)), OBSERVED)
    time = torch.arange(len(LOOK))[None]
    inv = torch.where(torch.isinf(z), torch.zeros_like(z), z.reciprocal())
    targets = [(2.5 * math.cos(a), 2.5 * math.sin(a), float(y), 0.0) for a, y in ((0.3, 10), (2.0, 200), (4.0, 290))]
    errors = {}
    for on in (False, True):
        depth_reproject.FOG, saved = on, depth_reproject.FOG
        try:
            total, count = 0.0, 0
            for t in targets:
                truth = torch.from_numpy(render(arena, *t, CFG.height, CFG.width, CFG.hfov))
                x0 = torch.zeros(1, 1, 3, CFG.height, CFG.width)
                out, hit, _ = depth_reproject.reproject_with_depth(x0, frames, inv, kind, time, cams,
                                                                   torch.tensor([t])[None], CFG.hfov)
                err = ((out[0, 0] - truth) ** 2).mean(0)[hit[0, 0]]
                total, count = total + float(err.sum()), count + err.numel()
        finally:
            depth_reproject.FOG = saved
        errors[on] = 10 * math.log10(4 / (total / count))
    assert errors[True] > errors[False] + 0.3, errors
