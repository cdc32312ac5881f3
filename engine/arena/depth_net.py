"""The arena model's convolutional depth head: per-pixel inverse depth from a frame's pixels and its camera.

Owns ``DepthNet`` (``ArenaModelConfig.depth_kind == "conv"``) and the per-pixel camera channels it reads.
The arena's walls all have one height and the eye one height, so a wall's depth in a pixel column follows
from where its foot meets the floor in that column, and the floor's depth from the pixel's ray alone; the
sky is inverse depth 0. The net therefore reads, besides the frame's RGB (the x0 of a generated frame's last
pass, or the observed frame), two channels of the camera (never of the world): ``up`` — the world-vertical
component of the pixel's ray whose forward component is 1 (``sin(pitch) + v cos(pitch)``; the floor's
inverse z-depth is proportional to ``-up``) — and ``flat`` — the ray's horizontal reach along the heading
(``cos(pitch) - v sin(pitch)``; a vertical wall's inverse z-depth in one column is proportional to it).
Layers: a 3x3 stem, a 3x3 conv, vertical convs dilated 1, 2, 4, 8, 16 rows (a receptive field taller than
the frame: a column's floor boundary reaches every row of it), a 3x3 conv mixing neighbouring columns, and
a 1x1 output of log inverse depth (inverse depth in 1 / world units; the sky, at 0, is learnt as far
below ``engine.arena.depth_reproject.SKY_INVERSE``). About 9k parameters at ``WIDTH``; the observed-frame
head (``ArenaModelConfig.observed_depth``, ``engine.arena.observed_depth_train``) is the same net wider.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from engine.arena.config import ArenaModelConfig

IN_CHANNELS = 5          # RGB, up, flat
DILATIONS = (1, 2, 4, 8, 16)
WIDTH = 16               # the head of every frame (generated ones read from the x0)
OBSERVED_WIDTH = 32      # the observed-frame head's default width (``ArenaModelConfig.observed_depth``): few, sharp frames
LOG_MIN, LOG_MAX = -12.0, 3.0   # the output is log inverse depth: from "sky" (6e-6) to 0.05 units away


def camera_channels(cam: torch.Tensor, cfg: ArenaModelConfig) -> torch.Tensor:
    """``up`` and ``flat`` ``[N, 2, H, W]`` of cameras ``cam [N, 4]`` (x, z, yaw, pitch in degrees)."""
    tan_v = math.tan(math.radians(cfg.hfov) / 2) * cfg.height / cfg.width
    v = (1 - (torch.arange(cfg.height, device=cam.device, dtype=torch.float32) + 0.5) / cfg.height * 2) * tan_v
    p = torch.deg2rad(cam[:, 3].float())[:, None]                            # [N, 1]
    up = p.sin() + v[None] * p.cos()                                          # [N, H]
    flat = p.cos() - v[None] * p.sin()
    return torch.stack([up, flat], 1)[..., None].expand(-1, -1, -1, cfg.width)


class DepthNet(nn.Module):
    def __init__(self, cfg: ArenaModelConfig, width: int = WIDTH):
        super().__init__()
        self.cfg = cfg
        self.stem = nn.Conv2d(IN_CHANNELS, width, 3, padding=1)
        self.mix = nn.Conv2d(width, width, 3, padding=1)
        self.vertical = nn.ModuleList(nn.Conv2d(width, width, (3, 1), padding=(d, 0), dilation=(d, 1))
                                      for d in DILATIONS)
        self.across = nn.Conv2d(width, width, 3, padding=1)
        self.out = nn.Conv2d(width, 1, 1)
        nn.init.constant_(self.out.bias, math.log(0.25))

    def forward(self, frames: torch.Tensor, cam: torch.Tensor) -> torch.Tensor:
        """Inverse depth ``[..., H, W]`` of frames ``[..., 3, H, W]`` seen from cameras ``cam [..., 4]``."""
        lead = frames.shape[:-3]
        x = frames.reshape(-1, *frames.shape[-3:])
        geo = camera_channels(cam.reshape(-1, 4), self.cfg).to(x.dtype)
        # channels-last: CPU convolutions of a few channels run 3-6x faster so (with the in-place residuals, measured
        # 8.7 -> 2.4 ms a chunk on one thread)
        h = F.relu(self.stem(torch.cat([x, geo], 1).contiguous(memory_format=torch.channels_last)))
        h = F.relu(self.mix(h))
        grad = torch.is_grad_enabled()
        for conv in self.vertical:      # in place at inference: a fresh tensor per layer costs as much as the conv
            h = h + F.relu(conv(h)) if grad else h.add_(F.relu(conv(h)))
        h = F.relu(self.across(h))
        return self.out(h).clamp(LOG_MIN, LOG_MAX).exp()[:, 0].contiguous().reshape(*lead, *frames.shape[-2:])
