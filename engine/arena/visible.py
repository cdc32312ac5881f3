"""Which wall faces a camera sees: the surfaces of an arena frame, for scoring (numpy only).

Owns ``visible_faces(arena, cam, columns)``: for each camera (x, z, yaw in world units and degrees),
one horizontal ray per column of a reduced-resolution frame (``columns`` across the field of view,
the pixel centres of ``engine.arena.render.camera_rays`` at pitch 0), walked through the grid with the
renderer's own DDA (``engine.arena.render._dda``). A ray's hit is a **face**: the solid cell it enters
and the side it enters by (``face_id``: cell, x or z face, from which direction). The arena is walled
all round and its walls are taller than the eye, so every horizontal ray ends on a face; a camera
with pitch still sees the faces its columns see at pitch 0 (the floor and sky carry no surface of
their own: a floor cell's colour is its checker, the sky is the same everywhere).
"""
from __future__ import annotations

import numpy as np

from engine.arena.render import _dda, camera_rays
from engine.arena.world import Arena

COLUMNS = 40            # rays across the field of view (the model's frame is 80 pixels wide)
PARTS = 4               # surfaces a face is cut into along its width (half a world unit each)


def face_id(arena: Arena, ix: np.ndarray, iz: np.ndarray, side: np.ndarray, forward: np.ndarray,
            part: np.ndarray) -> np.ndarray:
    """One integer per surface: cell (ix, iz), ``side`` (0: an x face, 1: a z face), whether the ray
    entering it travelled towards + on that axis (``forward``) and the ``part`` of the face it hit."""
    n = arena.cfg.cells
    face = ((ix * n + iz) * 2 + side.astype(np.int64)) * 2 + forward.astype(np.int64)
    return face * PARTS + part.astype(np.int64)


def visible_faces(arena: Arena, cam: np.ndarray, columns: int = COLUMNS, hfov: float = 90.0) -> np.ndarray:
    """``[F, columns]`` face ids seen by the cameras ``cam`` ``[F, >=3]`` (x, z, yaw, ...) left to right."""
    out = np.empty((len(cam), columns), dtype=np.int64)
    for f, (x, z, yaw) in enumerate(np.asarray(cam, dtype=np.float64)[:, :3]):
        rays = camera_rays(float(yaw), 0.0, 1, columns, hfov)[:, 0, :]             # [3, columns]
        dx, dz = rays[0], rays[2]
        gx, gz = (float(c) for c in arena.to_grid(x, z))
        hit, side, ix, iz = _dda(arena, gx, gz, dx, dz)
        along = np.where(side == 0, gz + dz * hit, gx + dx * hit)                 # grid units along the face
        part = np.clip(np.floor((along - np.floor(along)) * PARTS), 0, PARTS - 1)
        out[f] = face_id(arena, ix, iz, side, np.where(side == 0, dx > 0, dz > 0), part)
    return out
