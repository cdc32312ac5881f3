"""Procedural arenas: a walled grid world drawn from a seed (numpy only).

Owns the world a camera walks in and its geometry:

* ``Arena.generate(seed, cfg)`` — a ``cells x cells`` grid with walls all round and a few pillars
  (never in the spawn area, the middle ``spawn_clear`` cells), every wall cell painted in one of a small
  per-arena palette of bold colours with one of five large-scale textures; floor and sky tints; fog. The
  same seed gives the same arena on every machine.
* World <-> grid coordinates. The camera's world frame is the project's (``engine.geometry``
  convention: +y up, yaw 0 looks along -z, yaw > 0 turns right); the session's origin is the arena's
  spawn point, one grid cell is ``cell_size`` world units, and the eye is ``eye_height`` cells above the
  floor whatever the trajectory's y (the arena has one floor).
* ``clamp_path`` — walking is physical: a step that would enter a wall (within ``radius`` cells) keeps
  the camera where it was on that axis (sliding along walls), and every clamped frame is reported.
"""
from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np

TEXTURES = ("stripes", "bands", "checker", "border", "diamond")


@dataclass(frozen=True)
class ArenaConfig:
    """Shape of a generated arena (grid cells; world units only through ``cell_size``)."""

    cells: int = 12                  # grid side, outer walls included
    cell_size: float = 2.0           # world units per cell
    pillar_fraction: float = 0.10    # of the inner cells
    spawn_clear: int = 2             # cells around the spawn point kept free of pillars
    palette_size: int = 5            # bold colours per arena
    wall_height: float = 2.5         # cells
    eye_height: float = 0.5         # cells
    fog_distance: float = 14.0       # cells: where fog has taken 1 - 1/e of the colour
    radius: float = 0.2              # cells: how close the camera may come to a wall


@dataclass
class Arena:
    """One generated world: occupancy, per-cell paint, tints. Arrays are indexed ``[gx, gz]``."""

    seed: int
    cfg: ArenaConfig
    solid: np.ndarray           # [cells, cells] bool
    colour: np.ndarray          # [cells, cells, 3] float32 in [0, 1]
    texture: np.ndarray         # [cells, cells] int8, index into TEXTURES
    frequency: np.ndarray       # [cells, cells] int8, texture repeats per face (1..2)
    floor_tints: np.ndarray     # [2, 3] float32: the checker's two colours
    sky_horizon: np.ndarray     # [3] float32 (also the fog colour)
    sky_zenith: np.ndarray      # [3]
    spawn: np.ndarray           # [2] float64 grid coordinates of the world origin

    @classmethod
    def generate(cls, seed: int, cfg: ArenaConfig = ArenaConfig()) -> "Arena":
        rng = np.random.default_rng([0x41524E41, int(seed)])
        n = cfg.cells
        solid = np.zeros((n, n), dtype=bool)
        solid[0, :] = solid[-1, :] = solid[:, 0] = solid[:, -1] = True
        centre = n // 2
        inner = [(x, z) for x in range(1, n - 1) for z in range(1, n - 1)
                 if max(abs(x - centre), abs(z - centre)) > cfg.spawn_clear]
        picks = rng.choice(len(inner), size=int(round(cfg.pillar_fraction * (n - 2) ** 2)), replace=False)
        for i in picks:
            solid[inner[i]] = True
        hue0 = rng.random()
        palette = np.array([colorsys.hsv_to_rgb((hue0 + i / cfg.palette_size + rng.uniform(-0.04, 0.04)) % 1.0,
                                                rng.uniform(0.55, 0.95), rng.uniform(0.55, 0.95))
                            for i in range(cfg.palette_size)], dtype=np.float32)
        colour = palette[rng.integers(0, cfg.palette_size, size=(n, n))]
        texture = rng.integers(0, len(TEXTURES), size=(n, n)).astype(np.int8)
        frequency = rng.integers(1, 3, size=(n, n)).astype(np.int8)
        floor_hue = rng.random()
        base = np.array(colorsys.hsv_to_rgb(floor_hue, rng.uniform(0.1, 0.4), rng.uniform(0.35, 0.6)))
        floor_tints = np.stack([base, base * rng.uniform(0.55, 0.75)]).astype(np.float32)
        sky_hue = rng.uniform(0.5, 0.7) if rng.random() < 0.7 else rng.random()
        sky_horizon = np.array(colorsys.hsv_to_rgb(sky_hue, rng.uniform(0.1, 0.3), rng.uniform(0.8, 0.95)),
                               dtype=np.float32)
        sky_zenith = np.array(colorsys.hsv_to_rgb(sky_hue, rng.uniform(0.4, 0.8), rng.uniform(0.5, 0.8)),
                              dtype=np.float32)
        spawn = np.array([centre + 0.5, centre + 0.5])
        return cls(int(seed), cfg, solid, colour, texture, frequency, floor_tints, sky_horizon, sky_zenith, spawn)

    # ---- coordinates -------------------------------------------------------------------------------

    def to_grid(self, x, z) -> tuple[np.ndarray, np.ndarray]:
        """World (x, z) -> grid (gx, gz): the world origin is the spawn point, one cell is cell_size."""
        s = self.cfg.cell_size
        return self.spawn[0] + np.asarray(x) / s, self.spawn[1] + np.asarray(z) / s

    def to_world(self, gx, gz) -> tuple[np.ndarray, np.ndarray]:
        s = self.cfg.cell_size
        return (np.asarray(gx) - self.spawn[0]) * s, (np.asarray(gz) - self.spawn[1]) * s

    def blocked(self, gx: float, gz: float) -> bool:
        """Whether a camera at grid (gx, gz) is within ``radius`` of a solid cell (or outside)."""
        r, n = self.cfg.radius, self.cfg.cells
        for x in (gx - r, gx + r):
            for z in (gz - r, gz + r):
                ix, iz = int(np.floor(x)), int(np.floor(z))
                if not (0 <= ix < n and 0 <= iz < n) or self.solid[ix, iz]:
                    return True
        return False

    def clamp_path(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World positions ``[T]`` walked step by step with collisions: a step into a wall keeps the
        previous coordinate on the blocked axis. Returns clamped x, z and a bool mask of clamped frames."""
        if len(np.asarray(x)) == 0:
            return x, z, np.zeros(0, dtype=bool)
        gx, gz = self.to_grid(np.asarray(x, np.float64), np.asarray(z, np.float64))
        out_x, out_z, clamped = self.walk(gx, gz)
        wx, wz = self.to_world(out_x, out_z)
        return wx, wz, clamped

    def walk(self, gx: np.ndarray, gz: np.ndarray, after: tuple[float, float, float, float] | None = None):
        """``clamp_path`` in grid coordinates (gx, gz ``[T]``), returning the clamped grid x, z and the
        mask. ``after`` = (gx, gz, clamped gx, clamped gz) of the frame before the first: a path walked in
        pieces then ends exactly where the whole path walked at once would."""
        out_x, out_z = np.array(gx, dtype=np.float64), np.array(gz, dtype=np.float64)
        clamped = np.zeros(len(out_x), dtype=bool)
        if len(out_x) == 0:
            return out_x, out_z, clamped
        if after is None:
            cx, cz = out_x[0], out_z[0]
            if self.blocked(cx, cz):
                cx, cz = self.spawn
                clamped[0] = True
            out_x[0], out_z[0] = cx, cz
            first, prev_x, prev_z = 1, gx[0], gz[0]
        else:
            first, (prev_x, prev_z, cx, cz) = 0, after
        for t in range(first, len(out_x)):
            nx, nz = cx + (gx[t] - prev_x), cz + (gz[t] - prev_z)
            if self.blocked(nx, nz):
                clamped[t] = True
                if not self.blocked(nx, cz):
                    nz = cz
                elif not self.blocked(cx, nz):
                    nx = cx
                else:
                    nx, nz = cx, cz
            cx, cz = nx, nz
            out_x[t], out_z[t] = cx, cz
            prev_x, prev_z = gx[t], gz[t]
        return out_x, out_z, clamped
