"""Re-projection from memory: the arena model's frames take the pixels of context frames seen from the same place.

Owns the last step of the arena model's output at inference (``ArenaModelConfig.reproject``, a radius in
world units; 0 turns it off). The copy layer holds the pixels of every context frame (memory and window,
as stored: int4 in the memory), and the pipeline knows each one's camera (``ChunkInputs.ctx_cam``). A
camera turning on the spot sees the same rays in a new arrangement, so a context frame whose camera
stood within ``radius`` of a generated frame's is warped to that frame's view pixel for pixel
(``engine.arena.warp``: exact for a turn whatever the depth, nearest sampling, so copied edges stay
edges); every pixel some such frame sees takes its value, the rest keep the model's x0.

Which source a pixel takes when several see it: the cheapest, ``cost = distance + TURN_COST * turn``
(world units; ``turn`` the yaw plus pitch difference in degrees), ties to the earlier context frame. A
source seen from the very same pose is copied exactly (its warp is the identity), which is how a return
to an observed view brings back the observed pixels rather than a re-imagined haze; a source a few
degrees off is warped with at most a rounding of a pixel. What it does not do: move content seen from
another place (a translation needs depth, which the model does not have), so a walk's frames are the
model's own until the camera is back where it has been.

Why at inference and not trained: the one-step x0 regressor averages what it cannot know, and what the
memory holds from the same place is not uncertain; the composite then goes through the clean pass like
any x0, so the memory stores what the video shows. Measured in docs/quality.md ("Long sessions").
"""
from __future__ import annotations

import torch

from engine.arena.warp import warp_frames

TURN_COST = 0.01        # world units a degree of turn costs when ranking sources (10 degrees ~ 0.1 units)


def source_cost(ctx_cam: torch.Tensor, cam: torch.Tensor, radius: float) -> torch.Tensor:
    """Per (context frame, target frame) the ranking cost ``[B, S, F]`` (inf beyond ``radius``) of
    context cameras ``ctx_cam [B, S, 4]`` for target cameras ``cam [B, F, 4]`` (x, z, yaw, pitch)."""
    src, dst = ctx_cam[:, :, None].float(), cam[:, None].float()
    dist = torch.hypot(src[..., 0] - dst[..., 0], src[..., 1] - dst[..., 1])
    turn = ((src[..., 2] - dst[..., 2] + 180.0) % 360.0 - 180.0).abs() + (src[..., 3] - dst[..., 3]).abs()
    order = torch.arange(src.shape[1], device=src.device, dtype=torch.float32)[None, :, None]
    cost = dist + TURN_COST * turn + 1e-6 * order                       # ties: the earlier context frame
    return cost.masked_fill(dist > radius, float("inf"))


def reproject(x0: torch.Tensor, ctx_frames: torch.Tensor, ctx_cam: torch.Tensor, cam: torch.Tensor,
              radius: float, hfov: float, preferred: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``x0 [B, F, 3, H, W]`` with every pixel a context frame ``ctx_frames [B, S, 3, H, W]`` (cameras
    ``ctx_cam [B, S, 4]``) sees from within ``radius`` of its frame's camera (``cam [B, F, 4]``) replaced
    by the cheapest such frame's warped pixel; returns it and the replaced pixels ``[B, F, H, W]``.
    ``preferred [B, S]`` (bool): frames that win a pixel whenever one of them sees it (the cheapest of
    them), whatever the others cost: the same as a second call over them alone, without warping twice."""
    b, f = cam.shape[:2]
    cost = source_cost(ctx_cam, cam, radius)                            # [B, S, F]
    out = x0.clone()
    hit = torch.zeros(b, f, *x0.shape[-2:], dtype=torch.bool, device=x0.device)
    for row in range(b):
        for frame in range(f):
            sources = torch.isfinite(cost[row, :, frame]).nonzero(as_tuple=True)[0]       # [n]
            if len(sources) == 0:
                continue
            warped, valid = warp_frames(ctx_frames[row, sources], ctx_cam[row, sources].float(),
                                        cam[row, frame].float().expand(len(sources), 1, -1), hfov)
            warped, valid = warped[:, 0], valid[:, 0]                    # [n, 3, H, W], [n, H, W]
            pixel_cost = cost[row, sources, frame][:, None, None].masked_fill(~valid, float("inf"))
            best, pick = pixel_cost.min(0)                               # [H, W]
            if preferred is not None:
                first = pixel_cost.masked_fill(~preferred[row, sources][:, None, None], float("inf"))
                first_best, first_pick = first.min(0)
                wins = torch.isfinite(first_best)
                best, pick = torch.where(wins, first_best, best), torch.where(wins, first_pick, pick)
            seen = torch.isfinite(best)
            chosen = warped.gather(0, pick[None, None].expand(1, 3, *pick.shape))[0]   # [3, H, W]
            out[row, frame] = torch.where(seen[None], chosen.to(out.dtype), out[row, frame])
            hit[row, frame] = seen
    return out, hit
