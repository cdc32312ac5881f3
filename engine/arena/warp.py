"""The arena model's pixel warp: a past frame re-projected to another camera's view, pixel for pixel.

Owns the geometry of the warp source the model's output can take pixels from (``ArenaModelConfig.warp``).
A camera turning on the spot sees the same rays in a new arrangement: each pixel's ray (the renderer's
pinhole camera: ``engine.arena.render.camera_rays``, yaw and pitch in degrees, ``hfov`` across the
width) is looked up in the source camera's image, whatever the depth of what it hits. So a rotation is
warped exactly; a translation is not (the warp ignores it: near walls move more than far ones), and the
model's per-pixel gate decides where the warped pixel is right. Sampling is **nearest**: a pixel is a
copy of one source pixel, never a blend, so a frame warped again and again keeps its edges (a bilinear
warp would blur a little at every fractional shift). A pixel whose ray leaves the source image (or points
behind it) is not valid.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _basis(cam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward, right and up vectors ``[..., 3]`` of cameras ``[..., 4]`` (x, z, yaw, pitch degrees)."""
    ys, ps = torch.deg2rad(cam[..., 2]), torch.deg2rad(cam[..., 3])
    cy, sy, cp, sp = ys.cos(), ys.sin(), ps.cos(), ps.sin()
    forward = torch.stack([sy * cp, sp, -cy * cp], -1)
    right = torch.stack([cy, torch.zeros_like(cy), sy], -1)
    up = torch.stack([-sy * sp, cp, cy * sp], -1)
    return forward, right, up


def warp_grid(src_cam: torch.Tensor, dst_cam: torch.Tensor, height: int, width: int,
              hfov: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``grid_sample`` coordinates ``[..., H, W, 2]`` in the source image of every pixel of the
    destination cameras, and which are valid ``[..., H, W]``; ``src_cam`` broadcasts against ``dst_cam``."""
    tan_h = math.tan(math.radians(hfov) / 2)
    tan_v = tan_h * height / width
    dev, dt = dst_cam.device, torch.float32
    u = ((torch.arange(width, device=dev, dtype=dt) + 0.5) / width * 2 - 1) * tan_h          # [W]
    v = (1 - (torch.arange(height, device=dev, dtype=dt) + 0.5) / height * 2) * tan_v         # [H]
    f, r, up = (x[..., None, None, :] for x in _basis(dst_cam.float()))                      # [..., 1, 1, 3]
    rays = f + r * u[None, :, None] + up * v[:, None, None]                                   # [..., H, W, 3]
    sf, sr, su = (x[..., None, None, :] for x in _basis(src_cam.float()))
    depth = (rays * sf).sum(-1)
    x = (rays * sr).sum(-1) / depth.clamp_min(1e-6) / tan_h
    y = -(rays * su).sum(-1) / depth.clamp_min(1e-6) / tan_v
    valid = (depth > 1e-6) & (x.abs() <= 1) & (y.abs() <= 1)
    return torch.stack([x, y], -1), valid


def warp_frames(src: torch.Tensor, src_cam: torch.Tensor, dst_cam: torch.Tensor,
                hfov: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``src [B, 3, H, W]`` seen by cameras ``dst_cam [B, F, 4]`` from ``src_cam [B, 4]``: warped frames
    ``[B, F, 3, H, W]`` and valid pixels ``[B, F, H, W]`` (nearest sampling, see the module docstring)."""
    b, n = dst_cam.shape[:2]
    h, w = src.shape[-2:]
    grid, valid = warp_grid(src_cam[:, None], dst_cam, h, w, hfov)                           # [B, F, H, W, 2]
    frames = src[:, None].expand(b, n, *src.shape[1:]).reshape(b * n, *src.shape[1:])
    out = F.grid_sample(frames.float(), grid.reshape(b * n, h, w, 2), mode="nearest", padding_mode="border",
                        align_corners=False)
    return out.reshape(b, n, *src.shape[1:]).to(src.dtype), valid
