#!/usr/bin/env python3
"""Re-projection with depth, measured against the truth: ``engine.arena.depth_warp`` with the renderer's
true depth on held-out arenas, per distance the camera moved and angle it turned.

For every arena (held-out seeds: ``engine.arena.evaluate.EVAL_ARENA_BASE`` on) and every random source
pose in free space, a target pose ``distance`` world units away in a random direction (in free space too)
and turned by ``turn`` degrees; the source's true frame and depth are warped to the target and compared
with the target's true frame on the pixels the warp fills. Per row: pairs, coverage (share of the
target's pixels filled), PSNR pooled over the filled pixels, the share of filled pixels within 0.1 of
the truth on every channel, the median relative error of the warped depth, and the rotation-only warp
(``engine.arena.warp``, what inference uses today) on the same pairs for comparison. Then the cost per
target frame on this CPU (median of the timed warps, one source; and four sources composited,
``depth_warp.composite``). PSNR "exact" where every filled pixel is the truth's. Prints a table and a last line of JSON.

    python3 scripts/depth_warp_check.py --arenas 4 --poses 6 --threads 1
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np
import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.depth_warp import composite, warp
from engine.arena.evaluate import EVAL_ARENA_BASE
from engine.arena.render import depth, render
from engine.arena.warp import warp_frames
from engine.arena.world import Arena

ROWS = ((0.0, 0.0), (0.0, 15.0), (0.0, 30.0), (0.2, 0.0), (0.5, 0.0), (1.0, 0.0), (2.0, 0.0), (1.0, 30.0))


def _free_pose(arena: Arena, rng: np.random.Generator) -> tuple[float, float] | None:
    """A random world (x, z) where a camera may stand, or None after a few misses."""
    for _ in range(100):
        gx, gz = rng.uniform(1, arena.cfg.cells - 1, size=2)
        if not arena.blocked(gx, gz):
            x, z = arena.to_world(gx, gz)
            return float(x), float(z)
    return None


def _target(arena, rng, src, distance, turn):
    for _ in range(50):
        heading = rng.uniform(0, 2 * math.pi)
        x, z = src[0] + distance * math.sin(heading), src[1] - distance * math.cos(heading)
        gx, gz = arena.to_grid(x, z)
        if not arena.blocked(float(gx), float(gz)):
            return (x, z, src[2] + turn * rng.choice((-1, 1)), src[3])
    return None


def _pairs(args, cfg):
    """(arena, source pose, target pose, row index) for every measured pair."""
    for index in range(args.arenas):
        arena = Arena.generate(EVAL_ARENA_BASE + index)
        rng = np.random.default_rng([index, 0xD3])
        for _ in range(args.poses):
            where = _free_pose(arena, rng)
            if where is None:
                continue
            src = (*where, float(rng.uniform(-180, 180)), float(rng.uniform(-10, 10)))
            for row, (distance, turn) in enumerate(ROWS):
                dst = _target(arena, rng, src, distance, turn)
                if dst is not None:
                    yield arena, src, dst, row


def _view(arena, pose, cfg):
    frame = torch.from_numpy(render(arena, *pose, cfg.height, cfg.width, cfg.hfov))
    return frame, torch.from_numpy(depth(arena, *pose, cfg.height, cfg.width, cfg.hfov))


def measure(args) -> tuple[list[dict], float]:
    cfg = ArenaModelConfig()
    acc = [dict(pairs=0, pixels=0, filled=0, sq=0.0, close=0, dz=[], rot_filled=0, rot_sq=0.0) for _ in ROWS]
    costs = []
    for arena, src, dst, row in _pairs(args, cfg):
        (fa, da), (fb, db) = _view(arena, src, cfg), _view(arena, dst, cfg)
        a_cam, b_cam = torch.tensor([[src]], dtype=torch.float32), torch.tensor([[dst]], dtype=torch.float32)
        began = time.perf_counter()
        out = warp(fa[None, None], da[None, None], a_cam, b_cam, cfg.hfov, spread=args.spread)
        costs.append(time.perf_counter() - began)
        ok = out.valid[0, 0, 0]
        err = (out.frames[0, 0, 0] - fb)[:, ok]                                        # [3, N]
        both = ok & torch.isfinite(db) & torch.isfinite(out.depth[0, 0, 0])
        rot, rot_ok = warp_frames(fa[None], a_cam[:, 0], b_cam, cfg.hfov)
        rot_err = (rot[0, 0] - fb)[:, rot_ok[0, 0]]
        a = acc[row]
        a["pairs"] += 1
        a["pixels"] += ok.numel()
        a["filled"] += int(ok.sum())
        a["sq"] += float((err ** 2).sum())
        a["close"] += int((err.abs().amax(0) < 0.1).sum())
        a["dz"] += ((out.depth[0, 0, 0] - db).abs() / db)[both].tolist()
        a["rot_filled"] += int(rot_ok.sum())
        a["rot_sq"] += float((rot_err ** 2).sum())
    return [_summary(dist, turn, a) for (dist, turn), a in zip(ROWS, acc)], statistics.median(costs)


def _psnr(sq: float, n: int) -> float | None:
    """Pooled PSNR (dB, pixel range [-1, 1]) of ``n`` pixels; None where exact (or no pixel)."""
    return round(10 * math.log10(4 / (sq / (3 * n))), 2) if n and sq > 0 else None


def composite_cost(sources: int, targets: int) -> float:
    """Seconds per target frame to warp ``sources`` true views into ``targets`` cameras and pick one
    source per pixel (``depth_warp.composite``), median of 5."""
    cfg = ArenaModelConfig()
    arena = Arena.generate(EVAL_ARENA_BASE)
    poses = [(0.3 * i, -0.2 * i, 20.0 * i, 0.0) for i in range(sources)]
    views = [_view(arena, p, cfg) for p in poses]
    frames = torch.stack([v[0] for v in views])[None]
    depths = torch.stack([v[1] for v in views])[None]
    src_cam = torch.tensor([poses], dtype=torch.float32)
    dst_cam = torch.tensor([[(0.1 * i, 0.1, 10.0 * i, 0.0) for i in range(targets)]], dtype=torch.float32)
    kind, age = torch.zeros(1, sources, dtype=torch.long), torch.arange(sources)[None]
    times = []
    for _ in range(5):
        began = time.perf_counter()
        composite(warp(frames, depths, src_cam, dst_cam, cfg.hfov), kind, age)
        times.append((time.perf_counter() - began) / targets)
    return statistics.median(times)


def _fmt(x) -> str:
    return "exact" if x is None else f"{x:.2f}"


def _summary(distance: float, turn: float, a: dict) -> dict:
    n = max(a["pixels"], 1)
    return {"distance": distance, "turn": turn, "pairs": a["pairs"],
            "coverage": round(a["filled"] / n, 3), "psnr": _psnr(a["sq"], a["filled"]),
            "close": round(a["close"] / max(a["filled"], 1), 3),
            "depth_rel_err": round(statistics.median(a["dz"]), 4) if a["dz"] else None,
            "rot_coverage": round(a["rot_filled"] / n, 3), "rot_psnr": _psnr(a["rot_sq"], a["rot_filled"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arenas", type=int, default=4, help="held-out arenas")
    parser.add_argument("--poses", type=int, default=6, help="source poses per arena")
    parser.add_argument("--spread", type=int, default=1, help="depth_warp.warp's spread")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for the timed warps")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows, cost = measure(args)
    print(f"{'moved':>6} {'turn':>5} {'pairs':>5} {'cover':>6} {'PSNR':>6} {'<0.1':>6} {'dz rel':>7} "
          f"{'rot cover':>9} {'rot PSNR':>8}")
    for r in rows:
        print(f"{r['distance']:>6.1f} {r['turn']:>5.0f} {r['pairs']:>5} {r['coverage']:>6.3f} {_fmt(r['psnr']):>6} "
              f"{r['close']:>6.3f} {r['depth_rel_err'] if r['depth_rel_err'] is not None else '-':>7} "
              f"{r['rot_coverage']:>9.3f} {_fmt(r['rot_psnr']):>8}")
    many = composite_cost(4, 3)
    threads = torch.get_num_threads()
    print(f"cost: {cost * 1e3:.1f} ms per target frame from one source; {many * 1e3:.1f} ms per target frame "
          f"from 4 sources composited (medians, {threads} CPU threads)")
    print(json.dumps({"rows": rows, "ms_per_frame": round(cost * 1e3, 2),
                      "ms_per_frame_4_sources": round(many * 1e3, 2), "threads": threads,
                      "arenas": args.arenas, "poses": args.poses, "spread": args.spread}))


if __name__ == "__main__":
    main()
