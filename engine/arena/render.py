"""The exact renderer: the true frame of an arena for any camera pose (vectorised numpy ray casting).

Owns ``render(arena, x, z, yaw, pitch, height, width, hfov)``: one ray per pixel through the pinhole
camera of the project's convention (yaw 0 looks along world -z, yaw > 0 turns right, pitch > 0 looks
up; the horizontal field of view is ``hfov`` degrees and the vertical follows from the aspect). Each
ray walks the grid with a 2-D DDA on its horizontal part until it enters a solid cell; the hit is a wall
if its height is between the floor and the wall top, the floor if the ray reaches the floor first, the
sky otherwise. Walls carry their cell's colour and texture (face-relative coordinates, so a texture
is fixed to the wall), the floor a cell-sized checker, the sky a gradient; everything but the sky fades
into the horizon colour with distance (fog). Same pose, same frame, bit for bit.

Also owns ``depth(...)``: the same rays' z-depth (distance along the camera's forward axis, world units;
the sky is ``inf``), the training target of a depth head and the oracle of the depth warp's tests
(``engine.arena.depth_warp``). It is ground truth: nothing at inference may read it.

Frames are float32 ``[3, H, W]`` in [-1, 1] (the model's pixel range).
"""
from __future__ import annotations

import math

import numpy as np

from engine.arena.world import TEXTURES, Arena


def camera_rays(yaw: float, pitch: float, height: int, width: int, hfov: float) -> np.ndarray:
    """World-space ray directions ``[3, H, W]`` (x, y, z; not normalised) of every pixel centre."""
    ys, ps = math.radians(yaw), math.radians(pitch)
    forward = np.array([math.sin(ys) * math.cos(ps), math.sin(ps), -math.cos(ys) * math.cos(ps)])
    right = np.array([math.cos(ys), 0.0, math.sin(ys)])
    up = np.array([-math.sin(ys) * math.sin(ps), math.cos(ps), math.cos(ys) * math.sin(ps)])
    tan_h = math.tan(math.radians(hfov) / 2)
    tan_v = tan_h * height / width
    u = ((np.arange(width) + 0.5) / width * 2 - 1) * tan_h                  # [W] left -> right
    v = (1 - (np.arange(height) + 0.5) / height * 2) * tan_v                # [H] top -> bottom
    return (forward[:, None, None] + right[:, None, None] * u[None, None, :]
            + up[:, None, None] * v[None, :, None])


def _dda(arena: Arena, gx: float, gz: float, dx: np.ndarray, dz: np.ndarray):
    """First solid cell along each horizontal ray: ray parameter, side (0 = x face), cell indices."""
    n = arena.cfg.cells
    ix = np.full(dx.shape, int(math.floor(gx)), dtype=np.int64)
    iz = np.full(dz.shape, int(math.floor(gz)), dtype=np.int64)
    with np.errstate(divide="ignore"):
        delta_x = np.where(dx == 0, np.inf, np.abs(1.0 / dx))
        delta_z = np.where(dz == 0, np.inf, np.abs(1.0 / dz))
    step_x = np.where(dx < 0, -1, 1)
    step_z = np.where(dz < 0, -1, 1)
    side_x = np.where(dx < 0, (gx - ix) * delta_x, (ix + 1.0 - gx) * delta_x)
    side_z = np.where(dz < 0, (gz - iz) * delta_z, (iz + 1.0 - gz) * delta_z)
    hit_s = np.full(dx.shape, np.inf)
    side = np.zeros(dx.shape, dtype=np.int8)
    active = np.ones(dx.shape, dtype=bool)
    for _ in range(2 * n + 2):
        go_x = active & (side_x < side_z)
        go_z = active & ~go_x
        s_now = np.where(go_x, side_x, side_z)
        ix = np.where(go_x, ix + step_x, ix)
        iz = np.where(go_z, iz + step_z, iz)
        side_x = np.where(go_x, side_x + delta_x, side_x)
        side_z = np.where(go_z, side_z + delta_z, side_z)
        ixc, izc = np.clip(ix, 0, n - 1), np.clip(iz, 0, n - 1)
        hit = active & arena.solid[ixc, izc]
        hit_s = np.where(hit, s_now, hit_s)
        side = np.where(hit & go_x, 0, np.where(hit, 1, side)).astype(np.int8)
        active &= ~hit
        if not active.any():
            break
    return hit_s, side, np.clip(ix, 0, n - 1), np.clip(iz, 0, n - 1)


def _wall_colour(arena: Arena, ix, iz, u, v) -> np.ndarray:
    """Texture of the hit cells at face coordinates (u along the face, v up), ``[N, 3]``."""
    base = arena.colour[ix, iz]
    k = arena.frequency[ix, iz].astype(np.float64)
    tex = arena.texture[ix, iz]
    dark, light = base * 0.42, base * 0.5 + 0.5
    fu, fv = np.floor(u * 2 * k), np.floor(v * 2 * k)
    patterns = {
        "stripes": (fu % 2) == 1,
        "bands": (fv % 2) == 1,
        "checker": ((fu + fv) % 2) == 1,
        "border": (u < 0.12) | (u > 0.88) | (v < 0.12) | (v > 0.88),
    }
    out = base.copy()
    for name, mask in patterns.items():
        sel = (tex == TEXTURES.index(name)) & mask
        out[sel] = dark[sel]
    diamond = (tex == TEXTURES.index("diamond")) & (np.abs(u - 0.5) + np.abs(v - 0.5) < 0.32)
    out[diamond] = light[diamond]
    return out


def render(arena: Arena, x: float, z: float, yaw: float, pitch: float, height: int, width: int,
           hfov: float = 90.0) -> np.ndarray:
    """The true frame ``[3, H, W]`` float32 in [-1, 1] for a camera at world (x, z) (see module docstring)."""
    cfg = arena.cfg
    gx, gz = (float(c) for c in arena.to_grid(x, z))
    rays = camera_rays(yaw, pitch, height, width, hfov).reshape(3, -1)      # [3, N]
    dx, dy, dz = rays
    hit_s, side, ix, iz = _dda(arena, gx, gz, dx, dz)
    eye = cfg.eye_height
    wall_y = eye + dy * hit_s
    with np.errstate(divide="ignore", invalid="ignore"):
        floor_s = np.where(dy < 0, eye / -dy, np.inf)
    is_floor = floor_s < hit_s
    is_wall = ~is_floor & (wall_y <= cfg.wall_height)
    is_sky = ~is_floor & ~is_wall

    colour = np.empty((rays.shape[1], 3), dtype=np.float64)
    # walls: face coordinate along the wall, height up the wall
    w = np.nonzero(is_wall)[0]
    px, pz = gx + dx[w] * hit_s[w], gz + dz[w] * hit_s[w]
    u = np.where(side[w] == 0, pz - np.floor(pz), px - np.floor(px))
    v = np.clip(wall_y[w] / cfg.wall_height, 0.0, 1.0)
    shade = np.where(side[w] == 0, 0.82, 1.0)[:, None]
    colour[w] = _wall_colour(arena, ix[w], iz[w], u, v) * shade
    # floor: a checker of whole cells
    f = np.nonzero(is_floor)[0]
    fx, fz = gx + dx[f] * floor_s[f], gz + dz[f] * floor_s[f]
    colour[f] = arena.floor_tints[((np.floor(fx) + np.floor(fz)) % 2).astype(np.int64)]
    # sky: horizon colour at the horizon, zenith colour above
    s = np.nonzero(is_sky)[0]
    elevation = np.clip(dy[s] / np.hypot(dx[s], dz[s]), 0.0, 1.0)[:, None]
    colour[s] = arena.sky_horizon * (1 - elevation) + arena.sky_zenith * elevation
    # fog on everything that is not sky
    dist = np.where(is_floor, floor_s, hit_s) * np.linalg.norm(rays, axis=0)
    fog = np.where(is_sky, 1.0, np.exp(-np.where(is_sky, 0.0, dist) / cfg.fog_distance))[:, None]
    colour = colour * fog + arena.sky_horizon * (1 - fog)
    frame = colour.T.reshape(3, height, width).astype(np.float32)
    return frame * 2 - 1


def depth(arena: Arena, x: float, z: float, yaw: float, pitch: float, height: int, width: int,
          hfov: float = 90.0) -> np.ndarray:
    """The true z-depth ``[H, W]`` float32 (world units along the camera's forward axis; ``inf`` where
    ``render`` shows sky) of the surface every pixel of ``render`` with the same arguments shows.

    Ground truth, like ``render``: a training target and a test oracle, never an input at inference
    (the generator does not know the world it draws). ``camera_rays`` has a forward component of exactly
    1, so a ray's parameter at the hit is its z-depth in cells; one cell is ``cell_size`` world units."""
    cfg = arena.cfg
    gx, gz = (float(c) for c in arena.to_grid(x, z))
    dx, dy, dz = camera_rays(yaw, pitch, height, width, hfov).reshape(3, -1)   # [N] each
    hit_s, _, _, _ = _dda(arena, gx, gz, dx, dz)
    eye = cfg.eye_height
    with np.errstate(divide="ignore", invalid="ignore"):
        floor_s = np.where(dy < 0, eye / -dy, np.inf)
    is_floor = floor_s < hit_s
    is_wall = ~is_floor & (eye + dy * hit_s <= cfg.wall_height)
    cells = np.where(is_floor, floor_s, np.where(is_wall, hit_s, np.inf))
    return (cells * cfg.cell_size).astype(np.float32).reshape(height, width)
