"""Which source a re-projected pixel takes when several see it: a pure ranking on tensors.

Owns the order of sources in ``engine.arena.depth_warp.composite``. Per target pixel, among the sources
whose warped pixel is valid there:

1. **What the source is.** Where an observed frame (``OBSERVED``: given to the session, the truth)
   reaches the pixel, only observed frames compete; generated ones (``GENERATED``: the session's own
   output) only where no observed frame reaches it. A session's own haze must never beat an observed view
   of the same place — neither by being sharper-looking nor by its depth: the depth of a generated frame
   is read from a blur (abs-rel 0.59 against 0.03 for observed frames) and a hazy wall read nearer than it
   is would otherwise hide, as a front surface, the observed view of the wall behind it (measured on the
   walking benchmark's 30-s ``onward`` walk: generated sources took 47 % of the pixels at 20.5 dB while
   observed ones gave 24.7 dB; with this rule 4 % and the frames 22.0 -> 23.4 dB). What an observed frame
   hides behind a surface no observed frame saw is the one case it gets wrong.
2. **The front surface.** Among those, only the sources that see the nearest surface at that pixel
   (warped depth within ``DEPTH_TOLERANCE`` of the nearest) compete; a source whose point lies clearly
   behind another's is occluded in the target view (it saw, from its own place, what the target cannot see).
3. **How well it sees the point.** ``quality_cost``: octaves of distance mismatch (a source that stood
   much farther from the point saw it at lower resolution and through more fog than the target does),
   the angle between the source's and the target's viewing rays (a surface seen from another side
   shows another face of its texture and shading), and the footprint (target pixels one source pixel
   covers: above 1 it is magnified, i.e. blurred). Binned in steps of ``QUALITY_STEP`` so that near
   equal views count as equal.
4. **Age: the earlier frame.** Among equal views, the earlier source (smaller ``time``) wins. An
   observed frame is as true early as late, so the choice only needs to be stable: a place once shown
   keeps showing the same pixels (no flicker between equal sources). A generated frame is better early:
   a later one of the same place was made with the earlier one in its context, so it carries at least
   its error plus its own; preferring the newest would let the session copy its own latest copy, a
   feedback loop. (``engine.arena.reproject`` ties to the earlier context frame for the same reasons.)
5. Remaining ties: the lower source index.

``choose`` ranks dense sources ``[..., S, H, W]``; ``choose_among`` the same on a sparse list of the valid
(target pixel, source) entries, as ``composite`` keeps them; both pick the same source.
"""
from __future__ import annotations

import math

import torch

OBSERVED, GENERATED = 0, 1
DEPTH_TOLERANCE = (0.05, 0.05)   # (relative, world units): same surface if within rel * nearest + abs
QUALITY_STEP = 0.25              # quality cost bin: costs in the same bin are equal views
ANGLE_OCTAVE = math.radians(30)  # 30 degrees between viewing rays cost as much as an octave of distance
_KIND_SHIFT, _QUALITY_SHIFT, _QUALITY_MAX = 44, 22, (1 << 21) - 1


def quality_cost(src_dist: torch.Tensor, dst_dist: torch.Tensor, angle: torch.Tensor,
                 footprint: torch.Tensor) -> torch.Tensor:
    """How badly a source sees a target pixel's point (0 = as the target does; same shapes in and out):
    ``|log2(src_dist / dst_dist)| + angle / ANGLE_OCTAVE + max(0, log2(footprint)) / 2``. Distances are
    world units (``inf`` for sky: a direction, seen equally from anywhere), ``angle`` radians,
    ``footprint`` target pixels per source pixel."""
    sky = torch.isinf(src_dist) | torch.isinf(dst_dist)
    ratio = torch.where(sky, torch.ones_like(src_dist), src_dist / dst_dist.clamp_min(1e-6))
    distance = ratio.clamp_min(1e-6).log2().abs()
    magnified = footprint.clamp_min(1.0).log2() / 2                 # per axis: half the area's octaves
    return distance + angle / ANGLE_OCTAVE + magnified


def rank_key(kind: torch.Tensor, quality: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
    """The lexicographic ranking key (int64, smaller wins) of (kind, quality bin, time); ``kind`` and
    ``time`` (non-negative integers below 2**22) broadcast against ``quality``."""
    qbin = (quality / QUALITY_STEP).floor().clamp(0, _QUALITY_MAX)
    qbin = torch.where(torch.isnan(qbin), torch.full_like(qbin, _QUALITY_MAX), qbin).long()
    return (kind.long() << _KIND_SHIFT) + (qbin << _QUALITY_SHIFT) + time.long()


def choose(depth: torch.Tensor, valid: torch.Tensor, kind: torch.Tensor, quality: torch.Tensor,
           time: torch.Tensor, dim: int = -3) -> tuple[torch.Tensor, torch.Tensor]:
    """Per target pixel, the index along ``dim`` (the sources) of the winning source and whether any
    source is valid there (see the module docstring). ``depth`` (warped z-depth, ``inf`` for sky),
    ``valid`` and ``quality`` are ``[..., S, H, W]`` with the sources at ``dim``; ``kind`` and ``time``
    broadcast against them (e.g. ``[B, 1, S, 1, 1]``). Returns ``pick`` and ``hit`` ``[..., H, W]``."""
    rel, absolute = DEPTH_TOLERANCE
    kinds = kind.expand_as(quality).long()
    best_kind = kinds.masked_fill(~valid, GENERATED + 1).min(dim, keepdim=True).values
    valid = valid & (kinds == best_kind)                            # observed frames first, where any reaches
    seen = depth.masked_fill(~valid, float("inf"))
    nearest = seen.min(dim, keepdim=True).values
    front = valid & (seen <= nearest * (1 + rel) + absolute)
    front = front | (valid & torch.isinf(nearest))                  # only sky here: every valid source sees it
    key = rank_key(kind, quality, time).expand_as(quality)
    key = key.masked_fill(~front, torch.iinfo(torch.int64).max)
    pick = key.argmin(dim)                                          # first of equal keys: the lower index
    return pick, valid.any(dim)


def choose_among(cell: torch.Tensor, depth: torch.Tensor, kind: torch.Tensor, quality: torch.Tensor,
                 time: torch.Tensor, cells: int) -> torch.Tensor:
    """``choose`` on a sparse list of the valid (target pixel, source) entries ``[V]``: entry ``i`` is at
    target pixel ``cell[i]`` (of ``cells``) with its warped ``depth``, ``kind``, ``quality`` and ``time``;
    within a pixel the entries are listed in the sources' order. Per target pixel ``[cells]``, the index
    of the winning entry (the first of equal keys), -1 where none."""
    rel, absolute = DEPTH_TOLERANCE
    kind = kind.long()
    best_kind = torch.full((cells,), GENERATED + 1, device=depth.device).scatter_reduce(0, cell, kind, "amin")
    rival = kind == best_kind.index_select(0, cell)                 # observed entries first, where any reaches
    seen = depth.masked_fill(~rival, math.inf)
    nearest = torch.full((cells,), math.inf, device=depth.device).scatter_reduce(0, cell, seen, "amin")
    nearest = nearest.index_select(0, cell)                         # a gather: 3x advanced indexing's speed
    front = rival & ((depth <= nearest * (1 + rel) + absolute) | torch.isinf(nearest))
    none = torch.iinfo(torch.int64).max
    key = rank_key(kind, quality, time).masked_fill_(~front, none)
    best = torch.full((cells,), none, device=depth.device).scatter_reduce(0, cell, key, "amin")
    entry = torch.arange(len(cell), device=depth.device)
    first = torch.full((cells,), len(cell), device=depth.device).scatter_reduce(
        0, cell, entry.masked_fill_(key != best.index_select(0, cell), len(cell)), "amin")
    return first.masked_fill_(first == len(cell), -1)
