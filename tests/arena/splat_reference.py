"""The forward splat as ``engine.arena.depth_warp.warp`` first did it, kept verbatim as the reference.

One Python pass per footprint offset, every (pair, source pixel) at full size, a z-buffer in three
scatters, every field dense; the composite dense over the sources. ``depth_warp.warp`` and ``composite``
(on the pixels that reach the view only, kept sparse) must give exactly what these give:
tests/arena/test_depth_warp.py's parity tests compare them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.arena.source_rank import choose, quality_cost
from engine.arena.warp import _basis

NEAR = 0.05             # world units: target-space points nearer than this are dropped (behind the camera)
Z_TOLERANCE = 0.02      # relative: splats within this of a pixel's nearest depth are the same surface


@dataclass(frozen=True)
class Warped:
    """Sources warped into targets, per pair: ``[B, F, S, ...]`` (F targets, S sources)."""

    frames: torch.Tensor        # [B, F, S, 3, H, W] (the sources' dtype; 0 where not valid)
    valid: torch.Tensor         # [B, F, S, H, W] bool
    depth: torch.Tensor         # [B, F, S, H, W] z-depth in the target camera (inf: sky or not valid)
    src_dist: torch.Tensor      # [B, F, S, H, W] source camera -> point, world units (inf: sky / not valid)
    dst_dist: torch.Tensor      # [B, F, S, H, W] target camera -> point
    angle: torch.Tensor         # [B, F, S, H, W] radians between the source's and the target's rays
    footprint: torch.Tensor     # [B, F, S, H, W] target pixels one source pixel covers (area)


def pixel_rays(cam: torch.Tensor, height: int, width: int, hfov: float) -> torch.Tensor:
    """World ray directions ``[..., H, W, 3]`` of every pixel centre of cameras ``[..., 4]``, with a
    forward component of exactly 1 (so a point at z-depth d is the eye plus d times its ray)."""
    tan_h = math.tan(math.radians(hfov) / 2)
    tan_v = tan_h * height / width
    dev, dt = cam.device, torch.float32
    u = ((torch.arange(width, device=dev, dtype=dt) + 0.5) / width * 2 - 1) * tan_h          # [W]
    v = (1 - (torch.arange(height, device=dev, dtype=dt) + 0.5) / height * 2) * tan_v         # [H]
    f, r, up = (x[..., None, None, :] for x in _basis(cam.float()))                          # [..., 1, 1, 3]
    return f + r * u[None, :, None] + up * v[:, None, None]


def _eye(cam: torch.Tensor) -> torch.Tensor:
    """Eye positions ``[..., 3]`` (x, 0, z) of cameras ``[..., 4]``: every eye is at the same height."""
    cam = cam.float()
    return torch.stack([cam[..., 0], torch.zeros_like(cam[..., 0]), cam[..., 1]], -1)


def _project(depth: torch.Tensor, src_cam: torch.Tensor, dst_cam: torch.Tensor, hfov: float):
    """Every source pixel in every target: pixel position ``[B, F, S, H, W, 2]`` (column, row; pixel
    centres at integers), target z-depth, whether it is in front, and the point's offsets from both eyes."""
    h, w = depth.shape[-2:]
    tan_h = math.tan(math.radians(hfov) / 2)
    tan_v = tan_h * h / w
    rays = pixel_rays(src_cam, h, w, hfov)[:, None]                                          # [B, 1, S, H, W, 3]
    d = depth.float()[:, None, ..., None]                                                     # [B, 1, S, H, W, 1]
    finite = torch.isfinite(d)
    from_src = torch.where(finite, d * rays, rays)                                            # sky: a direction
    offset = (_eye(src_cam)[:, None, :] - _eye(dst_cam)[:, :, None])[..., None, None, :]      # [B, F, S, 1, 1, 3]
    q = torch.where(finite, offset + from_src, from_src)                                      # [B, F, S, H, W, 3]
    f, r, up = (x[:, :, None, None, None, :] for x in _basis(dst_cam.float()))                # [B, F, 1, 1, 1, 3]
    zt = (q * f).sum(-1)
    front = torch.where(finite[..., 0], zt > NEAR, zt > 1e-6)
    safe = zt.clamp_min(1e-6)
    col = ((q * r).sum(-1) / safe / tan_h + 1) * w / 2 - 0.5
    row = (1 - (q * up).sum(-1) / safe / tan_v) * h / 2 - 0.5
    pos = torch.stack([col, row], -1)
    return pos, torch.where(finite[..., 0], zt, torch.full_like(zt, float("inf"))), front, q, from_src


def _neighbour_step(pos: torch.Tensor, ok: torch.Tensor, axis: int) -> torch.Tensor:
    """Per source pixel, the target-space step ``[..., H, W, 2]`` to its neighbour along source ``axis``
    (-2 rows, -1 columns): the shorter of the two sides (a depth edge on one side does not count), zero
    where neither neighbour is usable."""
    p = pos.masked_fill(~ok[..., None], float("nan"))
    dim = axis - 1                                                                            # pos has a trailing 2
    n = p.shape[dim]
    ahead = torch.cat([p.narrow(dim, 1, n - 1) - p.narrow(dim, 0, n - 1),
                       torch.full_like(p.narrow(dim, 0, 1), float("nan"))], dim)
    behind = torch.cat([torch.full_like(p.narrow(dim, 0, 1), float("nan")),
                        p.narrow(dim, 1, n - 1) - p.narrow(dim, 0, n - 1)], dim)
    la, lb = (x.norm(dim=-1).nan_to_num(float("inf")) for x in (ahead, behind))
    step = torch.where((la <= lb)[..., None], ahead, behind)
    return step.nan_to_num(0.0)


def _footprint(pos: torch.Tensor, ok: torch.Tensor, spread: int):
    """Half extents ``[..., H, W, 2]`` of each source pixel's footprint in the target (at least half a
    pixel, at most ``spread`` + 0.5) and its area in target pixels (1 where unknown)."""
    sx, sy = _neighbour_step(pos, ok, -1), _neighbour_step(pos, ok, -2)
    half = 0.5 * (sx.abs() + sy.abs())
    half = half.clamp(0.5, spread + 0.5)
    area = (sx[..., 0] * sy[..., 1] - sx[..., 1] * sy[..., 0]).abs()
    known = (sx.abs().sum(-1) > 0) & (sy.abs().sum(-1) > 0)
    return half, torch.where(known, area, torch.ones_like(area))


def _zbuffer(target: torch.Tensor, z: torch.Tensor, centre: torch.Tensor, size: int) -> torch.Tensor:
    """The winning candidate per target pixel (``len(target)`` where none): nearest surface, then (among
    candidates within ``Z_TOLERANCE`` of it) the one nearest the pixel's centre, then the first."""
    n = len(target)
    zbuf = torch.full((size,), float("inf"), device=z.device).scatter_reduce(0, target, z, "amin")
    nearest = zbuf[target]
    front = (z <= nearest * (1 + Z_TOLERANCE)) | torch.isinf(nearest)
    dist = centre.masked_fill(~front, float("inf"))
    best = torch.full((size,), float("inf"), device=z.device).scatter_reduce(0, target, dist, "amin")
    win = front & (dist == best[target])
    ids = torch.arange(n, device=z.device)
    return torch.full((size,), n, device=z.device).scatter_reduce(0, target[win], ids[win], "amin")


def _candidates(pos, half, ok, zt, spread: int, shape):
    """Every (source pixel, target pixel) splat: flat target index over all pairs, target depth, squared
    distance of the projection from the pixel's centre, and the source pixel (flat ``H * W`` index)."""
    b, f, s, h, w = shape
    base = pos.round()
    image = torch.arange(b * f * s, device=pos.device).view(b, f, s, 1, 1) * (h * w)        # [B, F, S, 1, 1]
    src_index = torch.arange(h * w, device=pos.device).view(1, 1, 1, h, w)
    out = []
    for dy in range(-spread, spread + 1):
        for dx in range(-spread, spread + 1):
            tc, tr = base[..., 0] + dx, base[..., 1] + dy
            gap_c, gap_r = (tc - pos[..., 0]).abs(), (tr - pos[..., 1]).abs()
            keep = ok & (gap_c <= half[..., 0]) & (gap_r <= half[..., 1])
            keep &= (tc >= 0) & (tc < w) & (tr >= 0) & (tr < h)
            target = image + tr.clamp(0, h - 1).long() * w + tc.clamp(0, w - 1).long()
            out.append((target[keep], zt[keep], (gap_c ** 2 + gap_r ** 2)[keep],
                        src_index.expand_as(keep)[keep]))
    return (torch.cat(x) for x in zip(*out))


def warp(frames: torch.Tensor, depth: torch.Tensor, src_cam: torch.Tensor, dst_cam: torch.Tensor,
         hfov: float, spread: int = 1) -> Warped:
    """Sources ``frames [B, S, 3, H, W]`` with z-depth ``depth [B, S, H, W]`` seen from ``src_cam
    [B, S, 4]``, forward-splatted into every target camera ``dst_cam [B, F, 4]`` (module docstring);
    ``spread`` bounds how many pixels a magnified source pixel reaches past its nearest (0: nearest only)."""
    b, s, c, h, w = frames.shape
    f = dst_cam.shape[1]
    shape = (b, f, s, h, w)
    pos, zt, front, q, from_src = _project(depth, src_cam, dst_cam, hfov)                    # [B, F, S, H, W, ..]
    ok = front & torch.isfinite(pos).all(-1)
    half, area = _footprint(pos, ok, spread)
    pos = pos.masked_fill(~ok[..., None], 0.0)
    target, z, centre, source = _candidates(pos, half, ok, zt, spread, shape)
    win = _zbuffer(target, z, centre, b * f * s * h * w)                                     # [B*F*S*H*W]
    valid = win < len(target)
    src_pix = torch.zeros_like(win)
    src_pix[valid] = source[win[valid]]
    # the measures of every (pair, source pixel), looked up at each target pixel's winner
    at = torch.arange(b * f * s * h * w, device=frames.device) // (h * w) * (h * w) + src_pix
    finite = torch.isfinite(depth.float())[:, None].expand(shape)
    inf = torch.full(shape, float("inf"), device=frames.device)
    cos = (q * from_src).sum(-1) / (q.norm(dim=-1) * from_src.norm(dim=-1)).clamp_min(1e-12)

    def pick(x: torch.Tensor) -> torch.Tensor:
        x = x.expand(shape).reshape(-1)[at]
        return torch.where(valid, x, float("inf")).view(shape)
    return Warped(_colours(frames, valid, src_pix, shape), valid.view(shape), pick(zt),
                  pick(torch.where(finite, from_src.norm(dim=-1), inf)),
                  pick(torch.where(finite, q.norm(dim=-1), inf)),
                  pick(torch.where(finite, cos.clamp(-1, 1).acos(), torch.zeros_like(inf))), pick(area))


def _colours(frames: torch.Tensor, valid: torch.Tensor, src_pix: torch.Tensor, shape) -> torch.Tensor:
    """The winning source pixels' colours ``[B, F, S, C, H, W]`` (0 where not valid)."""
    b, f, s, h, w = shape
    c = frames.shape[2]
    pair = torch.arange(b * f * s * h * w, device=frames.device) // (h * w)                 # flat (b, f, s)
    src_img = pair // (f * s) * s + pair % s                                                 # flat (b, s)
    colours = frames.reshape(b * s, c, h * w)[src_img, :, src_pix]                          # [N, C]
    colours = torch.where(valid[:, None], colours, torch.zeros_like(colours))
    return colours.view(b, f, s, h, w, c).permute(0, 1, 2, 5, 3, 4)




def composite(warped, kind: torch.Tensor, time: torch.Tensor):
    """One source per target pixel, dense over the sources (``engine.arena.source_rank.choose``)."""
    quality = quality_cost(warped.src_dist, warped.dst_dist, warped.angle, warped.footprint)
    pick, hit = choose(warped.depth, warped.valid, kind[:, None, :, None, None], quality,
                       time[:, None, :, None, None], dim=2)
    frames = warped.frames.gather(2, pick[:, :, None, None].expand(-1, -1, 1, warped.frames.shape[3], -1, -1))
    depth = warped.depth.gather(2, pick[:, :, None]).squeeze(2)
    return frames.squeeze(2), hit, depth.masked_fill(~hit, float("inf")), pick
