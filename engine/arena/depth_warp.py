"""Re-projection with depth: source frames moved into a target camera's view from anywhere (geometry only).

Owns the warp of frames ``[B, S, 3, H, W]`` with their z-depth ``[B, S, H, W]`` (world units along each
camera's forward axis, ``inf`` for sky: ``engine.arena.render.depth``'s convention) from their cameras
``[B, S, 4]`` into target cameras ``[B, F, 4]`` (x, z, yaw, pitch degrees: ``engine.arena.warp._basis``
and ``render.camera_rays``). Every camera's eye is at the arena's one eye height, so heights cancel and
points are kept relative to the eye plane. At inference the depth is the model's own prediction
(``engine.arena.depth_reproject``); the renderer's depth is ground truth that inference must never read.

**Forward splatting with a z-buffer**, not backward warping: a backward warp looks each target pixel up
in the source and needs the *target's* depth, which the generator does not have before it has made the
frame; a forward splat needs only the sources' depth (remembered with their pixels). Each source pixel
is unprojected with its depth to a world point (sky: a direction, moved by the rotation only, exact),
projected into the target camera, and written to the target pixels its footprint covers: the nearest
pixel always, and up to ``spread`` pixels further where the source pixel, magnified (the target stands
nearer or sees the surface less obliquely), covers them (the footprint is the spacing of its projected
neighbours, the smaller one on each side so that a depth edge does not smear). Where several source pixels land on one
target pixel the nearest surface wins (the z-buffer: a near wall occludes a far one), and among pixels
of that surface (within ``Z_TOLERANCE``) the one whose projection is nearest the pixel's centre. Points
behind the target camera (or nearer than ``NEAR``) and outside its view are dropped; target pixels no
source pixel reaches (disocclusions, the view beyond the source's) are holes: not valid.

**Sampling** (``sample``): ``nearest`` copies the winning source pixel; ``bilinear`` reads the winner's
source at the point the target pixel's centre falls on (the gap between the centre and the winner's
projection, mapped back through its neighbour steps: within one source pixel), from the four taps around
it that lie on the winner's surface (source depth within ``TAP_TOLERANCE``; sky with sky), so a wall seen
nearer than its source saw it is interpolated, not blocky, and a near edge never bleeds into a far wall.
Which pixels are reached, and every measure, are the same either way; only the colours differ. Measured
with true depth (six held-out arenas, five moves of 0.5–1 unit and turns): 25.27 dB on the reached
pixels nearest, 26.72 bilinear; in a walking session with the depth head (``scripts/depth_walk_check.py``,
frames moved from the observed view) 23.26 -> 24.17 dB.

``warp`` gives one warped image per (target, source) pair with its validity, depth in the target and
what ``engine.arena.source_rank`` ranks sources by; ``composite`` picks one source per pixel.

**Cost.** Only the projection and the neighbour steps run over every (pair, source pixel); the rest runs
on the source pixels whose nearest target pixel is within ``spread`` of the view (a source turned away
from the target costs no more), their splats are listed in one pass over the offsets (the footprint
test is separable: per axis, then crossed), the z-buffer's ties (nearest the centre, then the first) are
one scatter of a packed key, and what wins is kept sparse: one entry per target pixel reached, the dense
``[B, F, S, ...]`` views made only when asked for. Per target the small operations are the cheap kinds
(float pairs moved as one int64, gathers from index tables instead of long divisions, 0 / 1 products
instead of selects); the bilinear offset and its inputs are made for the pixels read only. The result
is exactly the plain form's, one Python pass per offset over every pixel at full size
(``tests/arena/splat_reference.py``, compared field by field in ``tests/arena/test_depth_warp.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

from engine.arena.source_rank import choose_among, quality_cost
from engine.arena.warp import _basis

NEAR = 0.05             # world units: target-space points nearer than this are dropped (behind the camera)
Z_TOLERANCE = 0.02      # relative: splats within this of a pixel's nearest depth are the same surface
SAMPLES = ("nearest", "bilinear")
SUB_SNAP = 1e-3        # source pixels: a sampling point nearer its pixel's centre is the centre (a copy)
TAP_TOLERANCE = 0.3     # relative: a bilinear tap of the same surface as the winning source pixel


@dataclass(frozen=True)
class Warped:
    """Sources warped into targets, per pair ``[B, F, S, ...]`` (F targets, S sources), kept sparse: the
    target pixels some source pixel reached and, per such pixel, what the winning one brings. The dense
    views (``frames``, ``valid``, ``depth``, ...) are made on first use."""

    shape: tuple[int, int, int, int, int]   # (B, F, S, H, W)
    hit: torch.Tensor           # [V] flat indices over [B, F, S, H, W] of the valid target pixels, ascending
    src_at: torch.Tensor        # [V] flat index over [B, S, H, W] of the source pixel each one shows
    hit_source: torch.Tensor    # [V] which source (of S) each one is of
    hit_cell: torch.Tensor      # [V] flat index over [B, F, H, W] of its target pixel
    steps_from: tuple           # per target: positions, neighbour steps and which of them each winner is
    sources: tuple              # (frames [B, S, C, H, W], z-depth [B, S, H, W], sample): read on demand
    hit_depth: torch.Tensor     # [V] z-depth in the target camera (inf: sky)
    hit_src_dist: torch.Tensor  # [V] source camera -> point, world units (inf: sky)
    hit_dst_dist: torch.Tensor  # [V] target camera -> point
    hit_angle: torch.Tensor     # [V] radians between the source's and the target's rays (0: sky)
    hit_footprint: torch.Tensor  # [V] target pixels one source pixel covers (area)

    def colours_of(self, index: torch.Tensor) -> torch.Tensor:
        """``[N, C]`` colours (the sources' dtype) of the valid target pixels ``index`` (into ``hit``), read
        as ``sample`` says: only those are read (``composite`` reads one per target pixel, not one per pair)."""
        frames, depth, sample = self.sources
        if len(index) == 0:                                                    # nothing asked: nothing made
            return frames.new_zeros(0, frames.shape[2])
        at = _at(self.src_at, index)
        if sample == "bilinear":
            return _bilinear(frames, depth, at, self.sub_of(index))
        b, s, c, h, w = frames.shape
        return _at(frames.permute(0, 1, 3, 4, 2).reshape(b * s * h * w, c), at)

    def sub_of(self, index: torch.Tensor) -> torch.Tensor:
        """``[N, 2]``: where in its winning source pixel the centre of each valid target pixel ``index``
        (into ``hit``) falls (bilinear reading; made for those only)."""
        w = self.shape[-1]
        return _source_offset(_at(self.hit_cell, index) % (self.shape[-2] * w),
                              *(_at_pairs(x, index) for x in self.steps), w)

    @cached_property
    def steps(self) -> tuple:
        """``[V, 2]`` x 3: each winner's projection and its neighbour steps (``sub``'s inputs)."""
        return tuple(torch.cat(x) for x in zip(*((_at_pairs(pos, at), _at_pairs(sx, won), _at_pairs(sy, won))
                                                 for pos, sx, sy, at, won in self.steps_from)))

    @cached_property
    def sub(self) -> torch.Tensor:
        """``[V, 2]``: where in its winning source pixel each valid target pixel's centre falls."""
        return self.sub_of(torch.arange(len(self.hit), device=self.hit.device))

    @cached_property
    def colours(self) -> torch.Tensor:
        """``[V, C]``: every valid target pixel's colour."""
        return self.colours_of(torch.arange(len(self.hit), device=self.hit.device))

    def _dense(self, values: torch.Tensor, fill: float) -> torch.Tensor:
        out = torch.full((math.prod(self.shape), *values.shape[1:]), fill, dtype=values.dtype,
                         device=values.device)
        return out.index_put_((self.hit,), values).view(*self.shape, *values.shape[1:])

    @cached_property
    def frames(self) -> torch.Tensor:
        """``[B, F, S, C, H, W]``, 0 where not valid."""
        return self._dense(self.colours, 0.0).permute(0, 1, 2, 5, 3, 4)

    @cached_property
    def valid(self) -> torch.Tensor:
        """``[B, F, S, H, W]`` bool."""
        return self._dense(torch.ones_like(self.hit, dtype=torch.bool), False)

    @cached_property
    def depth(self) -> torch.Tensor:
        """``[B, F, S, H, W]`` z-depth in the target camera (inf: sky or not valid)."""
        return self._dense(self.hit_depth, math.inf)

    @cached_property
    def src_dist(self) -> torch.Tensor:
        """``[B, F, S, H, W]`` source camera -> point (inf: sky or not valid)."""
        return self._dense(self.hit_src_dist, math.inf)

    @cached_property
    def dst_dist(self) -> torch.Tensor:
        """``[B, F, S, H, W]`` target camera -> point (inf: sky or not valid)."""
        return self._dense(self.hit_dst_dist, math.inf)

    @cached_property
    def angle(self) -> torch.Tensor:
        """``[B, F, S, H, W]`` radians between the rays (inf: not valid)."""
        return self._dense(self.hit_angle, math.inf)

    @cached_property
    def footprint(self) -> torch.Tensor:
        """``[B, F, S, H, W]`` target pixels one source pixel covers (inf: not valid)."""
        return self._dense(self.hit_footprint, math.inf)


def _at(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[index]`` for a 1-D long ``index`` along dim 0: the same gather, 3x faster on CPU than
    advanced indexing (measured 85 -> 25 us for 40k of 46k floats, 288 -> 93 us for pairs)."""
    return values.index_select(0, index)


def _at_pairs(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``_at`` of float32 pairs ``[N, 2]`` (contiguous), each moved as one int64: the same bits, 3x faster
    than rows of two (measured 54 -> 18 us for 20k of 46k)."""
    return _at(values.view(torch.int64).view(-1), index).view(values.dtype).view(-1, 2)


@lru_cache(maxsize=4)
def _image_tables(s: int, h: int, w: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per flat index over ``[S, H, W]``: its image and its pixel (``i // (H*W)``, ``i % (H*W)``), read by a
    gather where a long division would cost 10x as much (a few sizes a process: 2 x 8 bytes a pixel each)."""
    i = torch.arange(s * h * w, device=device)
    return i // (h * w), i % (h * w)


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


def _project(from_src, finite: torch.Tensor, src_cam: torch.Tensor, dst_cam: torch.Tensor, hfov: float,
             solid: torch.Tensor | None = None):
    """Every source pixel (offsets ``from_src`` from its eye: ``(x, y, z)`` components ``[S, H, W]``, sky
    a direction where not ``finite``) of cameras ``src_cam [S, 4]`` in one target camera ``dst_cam [4]``:
    pixel position ``[S, H, W, 2]`` (column, row; pixel centres at integers; NaN where not usable: behind
    the camera) and target z-depth (inf: sky). ``solid``: ``finite`` as 0 / 1 floats (made if not given).
    Componentwise, each dot product summed x, y, z in that order: a right vector's y is 0 and every
    eye's height is the same, so those terms are left out (they add zeros). The eyes' offset is added
    where finite as ``solid`` times it (1 * x is x, and x + 0 is x): a select costs five products."""
    h, w = finite.shape[-2:]
    tan_h = math.tan(math.radians(hfov) / 2)
    tan_v = tan_h * h / w
    solid = finite.float() if solid is None else solid
    src, dst = src_cam.float()[:, None, None], dst_cam.float()
    q = (from_src[0] + solid * (src[..., 0] - dst[0]),                                        # [S, H, W]
         from_src[1],
         from_src[2] + solid * (src[..., 1] - dst[1]))
    f, r, up = (x[0] for x in _basis(dst[None]))                                              # [3] each
    zt, col, row, tmp = q[0] * f[0], q[0] * r[0], q[0] * up[0], torch.empty_like(q[0])
    zt += torch.mul(q[1], f[1], out=tmp)
    zt += torch.mul(q[2], f[2], out=tmp)
    ok = zt > NEAR                                                     # NEAR > 1e-6: a finite point's test,
    ok |= (zt > 1e-6) & ~finite                                       # then sky's (a direction) where not finite
    safe = zt.clamp_min(1e-6)
    col += torch.mul(q[2], r[2], out=tmp)
    col /= safe
    col /= tan_h
    col += 1
    col *= w
    col /= 2
    col -= 0.5
    row += torch.mul(q[1], up[1], out=tmp)
    row += torch.mul(q[2], up[2], out=tmp)
    row /= safe
    row /= tan_v
    row = torch.sub(1, row, out=row)
    row *= h
    row /= 2
    row -= 0.5
    ok &= torch.isfinite(col)
    ok &= torch.isfinite(row)
    pos = torch.view_as_real(torch.complex(col, row))          # [S, H, W, 2] (a complex pair: 10x a stack's speed)
    _pairs(pos).masked_fill_(~ok[..., None], _NAN_PAIR)
    return pos, zt.masked_fill_(~finite, float("inf"))


_NAN_PAIR = torch.tensor([math.nan, math.nan]).view(torch.int64).item()   # two float32 NaNs as one int64


def _pairs(p: torch.Tensor) -> torch.Tensor:
    """``[..., 2]`` float32 (contiguous pairs) seen as ``[..., 1]`` int64: a pair selected, filled or copied
    as one element (bit for bit), not two strided ones."""
    return p.view(torch.int64)


def _neighbour_step(p: torch.Tensor, axis: int) -> torch.Tensor:
    """Per source pixel, the target-space step ``[..., H, W, 2]`` to its neighbour along source ``axis``
    (-2 rows, -1 columns) of the positions ``p`` (NaN where not usable): the shorter of the two sides (a
    depth edge on one side does not count; the one ahead where equal), zero where neither neighbour is
    usable."""
    dim = axis - 1                                                                            # p has a trailing 2
    n = p.shape[dim]
    if n < 2:                                                                                 # no neighbours
        return torch.zeros_like(p)
    step = p.diff(dim=dim)                                                                    # [..., n - 1, .., 2]
    length = step.norm(dim=-1).nan_to_num_(float("inf"))
    step.nan_to_num_(0.0)
    out = torch.empty_like(p)
    out.narrow(dim, 0, 1).copy_(step.narrow(dim, 0, 1))                                      # only one side
    out.narrow(dim, n - 1, 1).copy_(step.narrow(dim, n - 2, 1))
    ahead = length.narrow(dim + 1, 1, n - 2) <= length.narrow(dim + 1, 0, n - 2)
    pairs = _pairs(step)
    torch.where(ahead[..., None], pairs.narrow(dim, 1, n - 2), pairs.narrow(dim, 0, n - 2),
                out=_pairs(out).narrow(dim, 1, n - 2))
    return out


def _footprint(p: torch.Tensor, idx: torch.Tensor, spread: int, tables):
    """Half extents ``[M, 2]`` of the footprints in the target of the source pixels ``idx`` (flat; ``p``:
    their positions, NaN where not usable) (at least half a pixel, at most ``spread`` + 0.5) and their
    areas ``[M]`` in target pixels (1 where unknown)."""
    n = p[0].numel() // 2                                                                     # pixels a source
    source = _at(tables[0], idx)
    alive = torch.bincount(source, minlength=len(p)) > 0                                      # sources reaching
    if not alive.all():                                                  # the steps of only those: the same
        p, idx = p[alive], _at(alive.cumsum(0) - 1, source) * n + _at(tables[1], idx)
    sx, sy = (_at_pairs(_neighbour_step(p, axis).view(-1, 2), idx) for axis in (-1, -2))
    half = (0.5 * (sx.abs() + sy.abs())).clamp(0.5, spread + 0.5)
    area = (sx[:, 0] * sy[:, 1] - sx[:, 1] * sy[:, 0]).abs()
    known = ((sx[:, 0] != 0) | (sx[:, 1] != 0)) & ((sy[:, 0] != 0) | (sy[:, 1] != 0))
    return half, area.masked_fill_(~known, 1.0), sx, sy


def _reaching(p: torch.Tensor, spread: int, h: int, w: int) -> torch.Tensor:
    """Flat indices (ascending) of the source pixels (positions ``p``, NaN where not usable) whose nearest
    target pixel lies within ``spread`` of the view: only these can write any target pixel."""
    col, row = p[..., 0].round(), p[..., 1].round()
    reach = (col >= -spread) & (col <= w - 1 + spread) & (row >= -spread) & (row <= h - 1 + spread)
    return reach.view(-1).nonzero().squeeze(1)


def _axis_keep(p: torch.Tensor, half: torch.Tensor, spread: int, size: int):
    """Along one target axis, per offset ``-spread..spread`` of the nearest pixel and per source pixel
    ``[K, M]``: the target coordinate (long), the squared distance of the projection from it and whether
    the footprint covers it inside the view."""
    offsets = torch.arange(-spread, spread + 1, device=p.device, dtype=p.dtype)[:, None]   # [K, 1]
    t = p.round()[None] + offsets
    gap = (t - p[None]).abs()
    return t.int(), gap ** 2, (gap <= half[None]) & (t >= 0) & (t < size)        # int32: a pixel index is small


def _candidates(p: torch.Tensor, half: torch.Tensor, idx: torch.Tensor, spread: int, h: int, w: int, image):
    """Every (source pixel, target pixel) splat of the source pixels ``idx`` (flat over ``[S, H, W]``;
    positions ``p [M, 2]``, footprints' half extents ``half [M, 2]``): flat target index, squared distance
    of the projection from the pixel's centre and which of ``idx`` it comes from. Ordered by offset (row,
    then column) and then source pixel."""
    k, m = 2 * spread + 1, len(idx)
    tc, gc, kc = _axis_keep(p[:, 0], half[:, 0], spread, w)                                    # [K, M]
    tr, gr, kr = _axis_keep(p[:, 1], half[:, 1], spread, h)
    flat = (kr[:, None] & kc[None]).view(-1).nonzero().squeeze(1).int()      # [n]: (dy, dx, m); int32: 2x faster
    col = flat % (k * m)                                                                      # (dx, m)
    source = col % m
    row = flat // (k * m) * m + source                                                        # (dy, m)
    image = _at(image, idx) * (h * w)                                                          # of idx: first pixel
    target = _at(image, source) + _at(tr.view(-1), row) * w + _at(tc.view(-1), col)
    centre = _at(gc.view(-1), col) + _at(gr.view(-1), row)
    return target, centre, source


def _zbuffer(target: torch.Tensor, z: torch.Tensor, centre: torch.Tensor, size: int) -> torch.Tensor:
    """The winning candidate per target pixel ``[size]`` (-1 where none): nearest surface, then (among
    candidates within ``Z_TOLERANCE`` of it) the one nearest the pixel's centre, then the first. The last
    two in one scatter: ``centre`` (non-negative float32, whose bits order as its values) and the
    candidate's index packed into one int64 key."""
    zbuf = torch.full((size,), float("inf"), device=z.device).scatter_reduce(0, target, z, "amin")
    nearest = _at(zbuf, target)
    front = (z <= nearest * (1 + Z_TOLERANCE)) | torch.isinf(nearest)
    none = torch.iinfo(torch.int64).max
    assert len(target) < 1 << 32, "candidate index must fit the key's low 32 bits"
    key = (centre.view(torch.int32).long() << 32) | torch.arange(len(target), device=z.device)
    key = key.masked_fill(~front, none)
    best = torch.full((size,), none, device=z.device).scatter_reduce(0, target, key, "amin")
    return (best & 0xFFFFFFFF).masked_fill_(best == none, -1)


def warp(frames: torch.Tensor, depth: torch.Tensor, src_cam: torch.Tensor, dst_cam: torch.Tensor,
         hfov: float, spread: int = 1, sample: str = "nearest") -> Warped:
    """Sources ``frames [B, S, 3, H, W]`` with z-depth ``depth [B, S, H, W]`` seen from ``src_cam
    [B, S, 4]``, forward-splatted into every target camera ``dst_cam [B, F, 4]`` (module docstring);
    ``spread`` bounds how many pixels a magnified source pixel reaches past its nearest (0: nearest only).
    One target at a time: its temporaries stay small (no fresh pages for each). ``sample``: how colours are
    read (module docstring); they are read when asked for (``Warped.colours_of``)."""
    if sample not in SAMPLES:
        raise ValueError(f"sample must be one of {SAMPLES}, got {sample!r}")
    b, s, _, h, w = frames.shape
    f = dst_cam.shape[1]
    rays = pixel_rays(src_cam, h, w, hfov)                                                    # [B, S, H, W, 3]
    d = depth.float()[..., None]
    finite = torch.isfinite(d)
    from_src = d.masked_fill(~finite, 1.0) * rays                                             # sky: a direction
    planes = from_src.permute(4, 0, 1, 2, 3).contiguous()                                     # [3, B, S, H, W]
    norm = from_src.norm(dim=-1)                                                              # [B, S, H, W]
    finite = finite[..., 0]
    tables = _image_tables(s, h, w, frames.device)
    solid = finite.float()
    parts, steps_from = [], []
    for g in range(b * f):
        bi, fi = divmod(g, f)
        sources = (tuple(planes[:, bi]), from_src[bi].view(-1, 3), norm[bi].view(-1), finite[bi], solid[bi])
        hit, at, source, pixel, steps, *values = _warp_target(sources, src_cam[bi], dst_cam[bi, fi], hfov, spread,
                                                              tables)
        parts.append((hit + g * (s * h * w), at + bi * (s * h * w), source, pixel + g * (h * w), *values))
        steps_from.append(steps)
    hit, src_at, source, cell, *values = (torch.cat(x) for x in zip(*parts))
    return Warped((b, f, s, h, w), hit, src_at, source, cell, tuple(steps_from), (frames, depth, sample), *values)


def _warp_target(sources, src_cam: torch.Tensor, dst_cam: torch.Tensor, hfov: float, spread: int, tables):
    """``warp`` of sources ``[S, ...]`` (their points' offsets from their eyes: components ``[S, H, W]``,
    rows ``[S*H*W, 3]`` and lengths; which are finite ``[S, H, W]``, and as 0 / 1) into one target camera
    ``dst_cam [4]``: the target pixels reached (flat over ``[S, H, W]``, ascending), their source and pixel,
    the source pixel each shows (flat, as they), its projection and neighbour steps and its measures.
    ``tables``: ``_image_tables`` of ``[S, H, W]``."""
    planes, rows, norm, finite, solid = sources
    s, h, w = finite.shape
    pos, zt = _project(planes, finite, src_cam, dst_cam, hfov, solid)                        # [S, H, W, ..]
    idx = _reaching(pos, spread, h, w)                                                        # [M]
    half, area, sx, sy = _footprint(pos, idx, spread, tables)                                 # [M, ..]
    target, centre, source = _candidates(_at_pairs(pos.view(-1, 2), idx), half, idx, spread, h, w, tables[0])
    win = _zbuffer(target, _at(_at(zt.view(-1), idx), source), centre, s * h * w)             # [S*H*W]
    hit = (win >= 0).nonzero().squeeze(1)                                                     # [V] target pixels
    won = _at(source, _at(win, hit))                                    # which of idx each one shows
    at = _at(idx, won)                                             # the source pixel each one shows
    offset = (src_cam.float() - dst_cam.float())[:, :2]                                      # [S, (x, z)]
    offset = torch.stack([offset[:, 0], torch.zeros_like(offset[:, 0]), offset[:, 1]], -1)   # eyes: one height
    return (hit, at, _at(tables[0], hit), _at(tables[1], hit),
            (pos.view(-1, 2), sx, sy, at, won),                                  # the bilinear offset's, on demand
            *_measures(_at(zt.view(-1), at), _at(rows, at), _at(norm, at), _at(finite.view(-1), at),
                       _at(offset, _at(tables[0], at)), _at(area, won)))


def _source_offset(pixel: torch.Tensor, p: torch.Tensor, sx: torch.Tensor, sy: torch.Tensor, w: int) -> torch.Tensor:
    """Where in its source a target pixel's centre falls, relative to the winning source pixel ``[V, 2]``
    (columns, rows; within one pixel): the target-space gap between the pixel (flat ``pixel``) and the
    winner's projection ``p``, mapped back through the winner's neighbour steps ``sx``, ``sy`` (target
    steps per source column and row). Zero where the steps give no inverse (no neighbours), and within ``SUB_SNAP`` of the centre."""
    gap = torch.stack([pixel % w, pixel // w], -1).to(p.dtype) - p                           # [V, 2]
    det = sx[:, 0] * sy[:, 1] - sx[:, 1] * sy[:, 0]
    ok = det.abs() > 1e-6
    safe = torch.where(ok, det, torch.ones_like(det))
    a = (gap[:, 0] * sy[:, 1] - gap[:, 1] * sy[:, 0]) / safe
    b = (sx[:, 0] * gap[:, 1] - sx[:, 1] * gap[:, 0]) / safe
    sub = torch.stack([a, b], -1).clamp(-1, 1)
    sub = torch.where(sub.abs() < SUB_SNAP, torch.zeros_like(sub), sub)        # float32's projection error
    return torch.where(ok[:, None], sub, torch.zeros_like(sub))


def _bilinear(frames: torch.Tensor, depth: torch.Tensor, at: torch.Tensor, sub: torch.Tensor) -> torch.Tensor:
    """Colours ``[V, C]`` of the source pixels ``at`` (flat over ``[B, S, H, W]``) sampled bilinearly at
    ``sub`` pixels from their centres, from the taps of the same surface only (source depth within
    ``Z_TOLERANCE`` of the winner's, sky with sky): a blend never mixes a near edge into a far wall."""
    b, s, c, h, w = frames.shape
    pix = frames.permute(0, 1, 3, 4, 2).reshape(-1, c)
    z = depth.reshape(-1).float()
    image, row, col = at // (h * w), at % (h * w) // w, at % w
    z0 = _at(z, at)
    lo = sub.floor()
    frac = sub - lo
    total = torch.zeros(len(at), c, dtype=pix.dtype, device=pix.device)
    weight = torch.zeros(len(at), dtype=pix.dtype, device=pix.device)
    for dc, dr in ((0, 0), (1, 0), (0, 1), (1, 1)):
        cc = col + lo[:, 0].long() + dc
        rr = row + lo[:, 1].long() + dr
        wt = (frac[:, 0] if dc else 1 - frac[:, 0]) * (frac[:, 1] if dr else 1 - frac[:, 1])
        inside = (cc >= 0) & (cc < w) & (rr >= 0) & (rr < h)
        tap = image * (h * w) + rr.clamp(0, h - 1) * w + cc.clamp(0, w - 1)
        zt = _at(z, tap)
        same = torch.where(torch.isinf(z0), torch.isinf(zt), (zt - z0).abs() <= TAP_TOLERANCE * z0)
        wt = torch.where(inside & same, wt, torch.zeros_like(wt)).to(pix.dtype)
        total += wt[:, None] * _at(pix, tap)
        weight += wt
    own = _at(pix, at)
    return torch.where(weight[:, None] > 1e-6, total / weight.clamp_min(1e-6)[:, None], own)


def _measures(zt, from_src, src_norm, finite, offset, area):
    """Per winner (its target depth ``zt``, its point's offset from its eye ``from_src [V, 3]`` and that
    offset's length, whether finite, the offset ``[V, 3]`` between the eyes, the footprint ``area``):
    target depth, source and target distance (inf for sky), angle (0 for sky) and footprint. The eyes'
    offset is added where finite as a 0 / 1 factor times it, the dot product summed x, y, z in that order."""
    q = from_src + finite[:, None].to(from_src.dtype) * offset                               # [V, 3]
    qn = q.norm(dim=-1)
    dot = q * from_src
    cos = (dot[:, 0] + dot[:, 1] + dot[:, 2]) / (qn * src_norm).clamp_min(1e-12)
    sky = ~finite
    return (zt, src_norm.masked_fill(sky, math.inf), qn.masked_fill_(sky, math.inf),
            cos.clamp_(-1, 1).acos_().masked_fill_(sky, 0.0), area)


def composite(warped: Warped, kind: torch.Tensor, time: torch.Tensor, read: torch.Tensor | None = None):
    """One source per target pixel (``engine.arena.source_rank.choose_among``: as ``choose`` over the
    sources) for sources of ``kind [B, S]`` (``OBSERVED`` / ``GENERATED``) made at latent frame ``time
    [B, S]``: frames ``[B, F, 3, H, W]`` (0 in holes), which pixels any source reaches ``[B, F, H, W]``,
    their depth (inf in holes) and the source index picked ``[B, F, H, W]`` (0 in holes). One target at a
    time, as ``warp`` (its entries are a slice of the sparse list; a pixel's, in the sources' order).
    ``read [B, F, H, W]`` (bool): the pixels whose colours are wanted (the rest stay 0; default: all)."""
    b, f, s, h, w = warped.shape
    n, dev = h * w, warped.hit.device
    bounds = torch.searchsorted(warped.hit, torch.arange(b * f + 1, device=dev) * (s * n)).tolist()
    frames = torch.zeros(b * f * n, warped.sources[0].shape[2], dtype=warped.sources[0].dtype, device=dev)
    hit = torch.zeros(b * f * n, dtype=torch.bool, device=dev)
    depth = torch.full((b * f * n,), math.inf, device=dev)
    pick = torch.zeros(b * f * n, dtype=torch.long, device=dev)
    for g, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        cells, win = _composite_target(warped, lo, hi, g, kind, time)
        wanted, chosen = cells, win
        if read is not None:
            keep = _at(read.reshape(-1)[g * n:(g + 1) * n], cells)
            wanted, chosen = cells[keep], win[keep]
        frames[g * n:(g + 1) * n].index_put_((wanted,), warped.colours_of(chosen))
        hit[g * n:(g + 1) * n].index_put_((cells,), torch.ones_like(cells, dtype=torch.bool))
        depth[g * n:(g + 1) * n].index_put_((cells,), _at(warped.hit_depth, win))
        pick[g * n:(g + 1) * n].index_put_((cells,), _at(warped.hit_source, win))
    c = frames.shape[-1]
    return (frames.view(b, f, h, w, c).permute(0, 1, 4, 2, 3), hit.view(b, f, h, w), depth.view(b, f, h, w),
            pick.view(b, f, h, w))


def _composite_target(warped: Warped, lo: int, hi: int, g: int, kind: torch.Tensor, time: torch.Tensor):
    """``composite`` of target ``g`` (flat over ``[B, F]``; its entries ``lo:hi``): the target pixels some
    source reaches (flat over ``[H, W]``) and the entry (into ``hit``) each one shows."""
    b, f, s, h, w = warped.shape
    source = warped.hit_source[lo:hi]
    src = g // f * s + source                                                                 # flat (b, s)
    quality = quality_cost(warped.hit_src_dist[lo:hi], warped.hit_dst_dist[lo:hi], warped.hit_angle[lo:hi],
                           warped.hit_footprint[lo:hi])
    win = choose_among(warped.hit_cell[lo:hi] - g * (h * w), warped.hit_depth[lo:hi], _at(kind.reshape(-1), src),
                       quality, _at(time.reshape(-1), src), h * w)
    cells = (win >= 0).nonzero().squeeze(1)
    return cells, _at(win, cells) + lo
