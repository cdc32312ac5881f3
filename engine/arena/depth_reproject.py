"""Re-projection with predicted depth at inference: the depth layer of the store and the composite into x0.

Owns what ``ArenaModelConfig.reproject_depth`` (a session's ``--arena-reproject-depth``) adds to the arena
model's output: every frame the model makes or is shown leaves its inverse depth (predicted by the depth
head; never the renderer's) beside its pixels, and a generated frame takes, per pixel, the best context
frame's pixel moved into its view with that depth, from any distance (``engine.arena.depth_warp``: forward
splatting with a z-buffer; ``engine.arena.source_rank``: the front surface, observed before generated,
the better view, the earlier frame). Pixels no source covers keep the model's x0.

**The depth layer.** One more layer of the ``KVLayout`` (after the copy layer), written with every chunk's
clean pass, so the depth travels with the chunk through every tier and format of the store (quantised like
any layer: int4/int8 per token and 64-channel value group, fp16 scale and zero point; the disk tier). A
token's value holds ``DEPTH`` — its patch's ``patch**2`` inverse depths (1 / world units, sky 0), one value
group, so int4 keeps 16 levels between the patch's nearest and farthest point — then ``KIND``, a group all
equal to the frame's kind (0 observed, 1 generated: a constant group is stored exactly), then zeros; the
keys are zero (the layer is never attended). Its cost is one layer's: for the arena model (180 tokens x 192
channels of keys and values a chunk) 37,504 B a chunk at int4 and 72,064 B at int8, +20% over the five other
layers (187,520 B and 360,320 B).
"""
from __future__ import annotations

import math

import torch

from engine.arena import fog
from engine.arena.config import ArenaModelConfig
from engine.arena.depth_fuse import SAME_PLACE, fuse_observed
from engine.arena.depth_warp import composite, warp
from engine.arena.patches import patchify, unpatchify
from engine.arena.reproject import reproject
from engine.arena.source_rank import GENERATED, OBSERVED

SAMPLE = "bilinear"  # how a moved source pixel is read (engine.arena.depth_warp.warp's ``sample``)
FUSE = True        # observed frames seen from one place share one depth per direction (engine.arena.depth_fuse)
FOG = True         # moved pixels change their fog from the source's distance to the target's (engine.arena.fog)
SKY_INVERSE = 1e-2   # inverse depth below this (farther than 100 world units, past any arena wall): sky
__all__ = ["OBSERVED", "GENERATED", "pack", "unpack", "z_depth", "reproject_with_depth", "moved_inverse_depth",
           "same_place_radius", "same_place"]


def pack(inv_depth: torch.Tensor, kind: int, cfg: ArenaModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The depth layer's (K, V) ``[B, F*N, heads, head_dim]`` of a chunk's inverse depth ``[B, F, H, W]``
    made (``kind``) ``OBSERVED`` or ``GENERATED``."""
    p2 = cfg.patch * cfg.patch
    depth = patchify(inv_depth[:, :, None].float(), cfg.patch).flatten(1, 2)        # [B, F*N, p*p]
    kinds = torch.full_like(depth, float(kind))
    rest = torch.zeros(*depth.shape[:-1], cfg.dim - 2 * p2, dtype=depth.dtype, device=depth.device)
    v = torch.cat([depth, kinds, rest], -1).unflatten(-1, (cfg.heads, cfg.head_dim))
    return torch.zeros_like(v), v


def unpack(v: torch.Tensor, cfg: ArenaModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse depth ``[B, S, H, W]`` and kind ``[B, S]`` (long) of the context frames whose depth-layer
    values are ``v [B, S*N, heads, head_dim]``."""
    p2 = cfg.patch * cfg.patch
    flat = v.flatten(-2).float().unflatten(1, (-1, cfg.tokens_per_frame))             # [B, S, N, C]
    depth = flat[..., :p2]
    inv = unpatchify(torch.cat([depth] * 3, -1), cfg.patch, cfg.height, cfg.width)[:, :, 0]
    kind = (flat[..., p2:2 * p2].mean((-1, -2)) > 0.5).long()
    return inv, kind


def z_depth(inv_depth: torch.Tensor) -> torch.Tensor:
    """World-unit z-depth (``inf``: sky) of inverse depths."""
    return torch.where(inv_depth > SKY_INVERSE, inv_depth.clamp_min(SKY_INVERSE).reciprocal(),
                       torch.full_like(inv_depth, math.inf))


def reproject_with_depth(x0: torch.Tensor, frames: torch.Tensor, inv_depth: torch.Tensor, kind: torch.Tensor,
                         time: torch.Tensor, ctx_cam: torch.Tensor, cam: torch.Tensor,
                         hfov: float, radius: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x0 [B, F, 3, H, W]`` with every pixel some context frame (``frames [B, S, 3, H, W]``, their inverse
    depth ``[B, S, H, W]``, ``kind`` and latent-frame ``time [B, S]``, cameras ``ctx_cam [B, S, 4]``) sees
    from the cameras ``cam [B, F, 4]`` replaced by the winning source's pixel; then, with ``radius`` > 0,
    ``same_place`` over it (in one pass: the splat's colours are read only where the rotation-only pass
    leaves the pixel to it). Returns it, the splat's pixels ``[B, F, H, W]`` and their z-depth in the target
    (``inf`` elsewhere). Run in inference mode (its many small ops ~10 % faster), its results cloned out of it."""
    with torch.inference_mode():
        got = _reproject_with_depth(x0, frames, inv_depth, kind, time, ctx_cam, cam, hfov, radius)
    return tuple(x.clone() for x in got)


def _reproject_with_depth(x0, frames, inv_depth, kind, time, ctx_cam, cam, hfov: float, radius: float):
    z = z_depth(inv_depth)
    if FUSE:                                                # observed frames of one place: one depth per direction
        z = fuse_observed(z, kind == OBSERVED, ctx_cam, hfov)
    horizon = fog.horizon(frames, inv_depth <= SKY_INVERSE, kind == OBSERVED, ctx_cam, hfov) if FOG else None
    sources = frames.float()
    if horizon is not None:                                 # each pixel's own distance travels with its colour
        reach = fog.distance(z, ctx_cam, hfov)
        sources = torch.cat([sources, reach.where(torch.isfinite(reach), torch.zeros_like(reach))[:, :, None]], 2)
    warped = warp(sources, z, ctx_cam.float(), cam.float(), hfov, sample=SAMPLE)
    turned, seen = (reproject(x0, frames, ctx_cam, cam, radius, hfov, preferred=kind == OBSERVED) if radius > 0
                    else (None, None))
    moved, hit, depth, _ = composite(warped, kind, time, read=None if seen is None else ~seen)
    if horizon is not None:
        moved = fog.transfer(moved[:, :, :3], moved[:, :, 3], depth, cam, horizon, hfov)
    out = torch.where(hit[:, :, None], moved.to(x0.dtype), x0)
    if seen is not None:     # as ``same_place(out, ...)``: its pixels where it sees, the splat's elsewhere
        out = torch.where(seen[:, :, None], turned, out)
    return out, hit, depth


def same_place_radius(reproject: float) -> float:
    """The rotation-only pass's radius with depth: the session's ``reproject`` (0: off) capped at
    ``SAME_PLACE``. Rotation alone is exact only for frames seen from the very same place; from 0.05–0.15
    units off it misplaces near surfaces that the splat, with depth, places (measured: the look-around moved
    0.13 units, three held-out arenas, 24.98 dB with the 0.15 radius, 28.09 with the splat alone; 0.05
    units: 27.58 against 28.04). At the same place it keeps what it was for: an observed view exactly, a
    turn on the spot showing its first visit."""
    return min(reproject, SAME_PLACE) if reproject > 0 else 0.0


def moved_inverse_depth(hit: torch.Tensor, depth: torch.Tensor, dtype: torch.dtype, head) -> torch.Tensor:
    """A chunk's inverse depth ``[B, F, H, W]`` after the splat: ``1 / depth`` where it moved a pixel
    (``hit``), elsewhere the depth head's, ``head(need)`` run on the frames ``need [B, F]`` (bool) that
    have such pixels only (a frame the splat covers whole needs no head; the head is per frame)."""
    inv = depth.reciprocal().to(dtype)
    need = ~hit.flatten(2).all(-1)
    if need.any():
        inv[need] = torch.where(hit[need], inv[need], head(need).to(dtype))
    return inv


def same_place(out: torch.Tensor, frames: torch.Tensor, kind: torch.Tensor, ctx_cam: torch.Tensor,
               cam: torch.Tensor, radius: float, hfov: float) -> torch.Tensor:
    """After the splat: context frames seen from within ``radius`` of a target camera are warped in by
    rotation alone (``engine.arena.reproject``: exact for a turn, no splat's footprint or holes) — first
    any frame, so that a return to a place the session generated shows its first visit again (without
    it, a return splats other sources with other holes and matches its first visit at 24 dB, against 39
    with the rotation-only memory), then the observed ones over it (an observation beats the session's own
    frame of the same place)."""
    return reproject(out, frames, ctx_cam, cam, radius, hfov, preferred=kind == OBSERVED)[0]
