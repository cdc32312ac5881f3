"""Test helper: how near the truth a look-around's frames, moved into other views with depth, come."""
from __future__ import annotations

import math

import torch

from engine.arena import depth_reproject
from engine.arena.config import ArenaModelConfig
from engine.arena.render import render
from engine.arena.source_rank import OBSERVED

CFG = ArenaModelConfig()


def reached_psnr(arena, frames: torch.Tensor, inv: torch.Tensor, cams: torch.Tensor, targets) -> float:
    """PSNR (dB), pooled over the pixels the splat reaches, of observed ``frames [1, S, 3, H, W]`` with
    inverse depth ``inv [1, S, H, W]`` seen from ``cams [1, S, 4]`` moved into each target camera."""
    s = frames.shape[1]
    kind, time = torch.full((1, s), OBSERVED), torch.arange(s)[None]
    total, count = 0.0, 0
    for t in targets:
        truth = torch.from_numpy(render(arena, *t, CFG.height, CFG.width, CFG.hfov))
        out, hit, _ = depth_reproject.reproject_with_depth(
            torch.zeros(1, 1, 3, CFG.height, CFG.width), frames, inv, kind, time, cams, torch.tensor([t])[None],
            CFG.hfov)
        err = ((out[0, 0] - truth) ** 2).mean(0)[hit[0, 0]]
        total, count = total + float(err.sum()), count + err.numel()
    return 10 * math.log10(4 / (total / count))
