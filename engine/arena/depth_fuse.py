"""Observed frames seen from one place agree on depth: each direction's distance fused over every frame that sees it.

Owns the fusion of the depth of observed context frames before re-projection with depth
(``engine.arena.depth_reproject``). Frames seen from one camera position (within ``SAME_PLACE`` units:
the look-around at a session's start is a whole turn on one spot) see each direction along the same ray
from the same eye, so they must agree on its distance; the depth head reads each frame on its own, and
where it reads a wall a few per cent nearer in one frame than in the next, the two frames splat the same
wall to two places in a moved view and the z-buffer picks between them pixel by pixel. Here every such
frame's pixel takes the distance the frames of its place agree on for its direction: the mean of their
estimates within ``AGREE`` of the median (each frame looked up at the nearest pixel of the direction: a
rotation between frames, exact, no depth needed), so all of them move a surface to one place.

Measured (three held-out arenas, the 24 frames of a look-around with the packaged observed-frame head,
moved into 24 views 1–4 units off it, PSNR on the reached pixels): 24.08 dB with each frame's own depth,
25.17 dB with the median alone, **25.79 dB** with the mean of the estimates within 10 % of it (3 %: 25.47,
20 %: 25.78); the renderer's depth 26.36.

Generated frames keep their own depth: they are not the world's, and two of them need not agree.
"""
from __future__ import annotations

import math

import torch

from engine.arena.depth_warp import pixel_rays
from engine.arena.warp import _basis

SAME_PLACE = 1e-3   # world units: cameras this close see along the same rays (a turn on one spot)
AGREE = 0.1         # relative: the estimates within this of their median are averaged


def fuse_observed(z_depth: torch.Tensor, observed: torch.Tensor, cam: torch.Tensor, hfov: float) -> torch.Tensor:
    """z-depth ``[B, S, H, W]`` (``inf``: sky) of context frames seen from ``cam [B, S, 4]`` with every
    ``observed [B, S]`` frame's depth replaced by the median distance of each pixel's direction over the
    observed frames of its place (module docstring); other frames, and an observed frame alone at its
    place, unchanged."""
    out = z_depth.clone()
    for b in range(z_depth.shape[0]):
        ids = observed[b].nonzero().squeeze(1)
        if len(ids) < 2:
            continue
        out[b, ids] = _fuse_frames(z_depth[b, ids].float(), cam[b, ids].float(), hfov).to(out.dtype)
    return out


def _fuse_frames(z: torch.Tensor, cam: torch.Tensor, hfov: float) -> torch.Tensor:
    """``_fuse`` of frames ``z [S, H, W]`` seen from ``cam [S, 4]``, each with the others of its place."""
    s, h, w = z.shape
    tan_h = math.tan(math.radians(hfov) / 2)
    tan_v = tan_h * h / w
    rays = pixel_rays(cam, h, w, hfov)                                                   # [S, H, W, 3]
    norm = rays.norm(dim=-1)
    dist = (z * norm).reshape(-1)                                                        # [S*H*W]
    forward, right, up = _basis(cam)                                                     # [S, 3]
    same = torch.cdist(cam[:, :2], cam[:, :2]) <= SAME_PLACE                             # [S(i), S(j)]
    a = torch.einsum("ihwc,jc->ijhw", rays, forward)                                     # [S, S, H, W]
    u = torch.einsum("ihwc,jc->ijhw", rays, right) / a.clamp_min(1e-6)
    v = torch.einsum("ihwc,jc->ijhw", rays, up) / a.clamp_min(1e-6)
    col = ((u / tan_h + 1) / 2 * w - 0.5).round()
    row = ((1 - v / tan_v) / 2 * h - 0.5).round()
    seen = (a > 1e-6) & (col >= 0) & (col < w) & (row >= 0) & (row < h) & same[:, :, None, None]
    j = torch.arange(s)[None, :, None, None]
    at = (j * (h * w) + row.clamp(0, h - 1).long() * w + col.clamp(0, w - 1).long()).reshape(-1)
    estimate = torch.where(seen, dist[at].view(s, s, h, w), torch.full_like(a, math.nan))
    median = torch.nanmedian(estimate, dim=1).values[:, None]                            # [S, 1, H, W]
    agree = torch.isfinite(estimate) & ((estimate - median).abs() <= AGREE * median)     # nan, sky: False
    count = agree.sum(1)
    mean = torch.where(agree, estimate, torch.zeros_like(estimate)).sum(1) / count.clamp_min(1)
    fused = torch.where(count > 0, mean, median[:, 0])                                   # sky: the median's inf
    alone = (same.sum(1) == 1)[:, None, None]                                            # no other frame there
    return torch.where(torch.isnan(fused) | alone, z, fused / norm)


__all__ = ["SAME_PLACE", "fuse_observed"]
