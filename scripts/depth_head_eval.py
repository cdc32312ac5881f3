"""How well a depth head predicts depth: ``python3 scripts/depth_head_eval.py WEIGHTS [--episodes N]``.

Held-out arenas (seeds from ``TRAIN_ARENAS + 2000``, never trained on), every episode kind in turn, each
episode's chunks after the first scored against the renderer's true depth in the two passes inference
reads the head in: **generated** (t = 1, pure noise in: the sampler's one step, what a generated chunk
stores) and **observed** (t = 0, the true frames in: what an observed chunk stores); the conv head
(``depth_kind="conv"``) reads the generated pass's x0 and the observed true frames. Context: the true
frames (an upper bound for a session, whose context is its own output). Figures pooled over pixels:
abs-rel (|z - z*| / z* over pixels whose true depth is finite), the share of those within 25 %
(max(z / z*, z* / z) < 1.25), RMSE of z in world units (both with the
prediction's z capped at 100 units), RMSE of inverse depth, and sky agreement (inverse depth below
``SKY_INVERSE`` on both or neither). Prints a table and a last line of JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.arena.data import TRAIN_ARENAS, episode_tensors, stack  # noqa: E402
from engine.arena.depth_reproject import SKY_INVERSE  # noqa: E402
from engine.arena.episodes import KINDS, make_episode  # noqa: E402
from engine.arena.patches import unpatchify  # noqa: E402
from engine.arena.weights import load_model  # noqa: E402

ARENA_BASE = TRAIN_ARENAS + 2000
CHUNKS = 6


def _scores(pred_inv: torch.Tensor, true_z: torch.Tensor, acc: dict) -> None:
    finite = torch.isfinite(true_z)
    z = pred_inv.clamp_min(1.0 / 100.0).reciprocal()
    acc["absrel"] += float(((z - true_z).abs() / true_z)[finite].sum())
    acc["within"] += int((torch.maximum(z / true_z, true_z / z) < 1.25)[finite].sum())
    acc["se_z"] += float(((z - true_z) ** 2)[finite].sum())
    acc["n_finite"] += int(finite.sum())
    true_inv = true_z.reciprocal()
    acc["se_inv"] += float(((pred_inv - true_inv) ** 2).sum())
    acc["sky_agree"] += int(((pred_inv < SKY_INVERSE) == ~finite).sum())
    acc["n"] += true_z.numel()


def _predicted(model, eps, noisy: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The head's inverse depth ``[1, C, F, H, W]`` in the pass at flow time ``t`` (the conv head reads that
    pass's x0, or the true frames at t = 0, as inference does)."""
    cfg = model.cfg
    args = (eps.actions, eps.cam, torch.zeros(1, dtype=torch.long), eps.ctx_ids, eps.mem_shift)
    with torch.no_grad():
        if cfg.depth_kind == "conv":
            x0 = eps.frames if float(t.max()) == 0.0 else model.train_forward(eps.frames, noisy, t, *args).clamp(-1, 1)
            return model.frame_depth(x0.flatten(1, 2), eps.cam.flatten(1, 2)).unflatten(1, (CHUNKS, -1))
        parts: dict = {}
        model.train_candidates(eps.frames, noisy, t, *args, parts)
    inv = parts["inv_depth"].unflatten(0, (1, CHUNKS)).unflatten(2, (cfg.frames_per_chunk, -1))
    return unpatchify(torch.cat([inv] * 3, -1), cfg.patch, cfg.height, cfg.width)[:, :, :, 0]


def evaluate(weights: Path, episodes: int) -> dict:
    model = load_model(weights)
    cfg = model.cfg
    assert cfg.depth_head, f"{weights} has no depth head"
    out = {}
    for mode, t_value in (("generated", 1.0), ("observed", 0.0)):
        acc = dict.fromkeys(("absrel", "within", "se_z", "se_inv", "n_finite", "n", "sky_agree"), 0.0)
        for e in range(episodes):
            rng = np.random.default_rng([7, e])
            seed = ARENA_BASE + e
            frames = cfg.video_grid().frames_total(CHUNKS)
            ep = make_episode(seed, KINDS[e % len(KINDS)], frames, rng)
            eps = episode_tensors(ep, cfg, CHUNKS, 3, with_depth=True)
            eps = stack([eps])
            gen = torch.Generator().manual_seed(e)
            noisy = torch.randn(eps.frames.shape, generator=gen) if t_value == 1.0 else eps.frames
            t = torch.full(eps.frames.shape[:2], t_value)
            inv = _predicted(model, eps, noisy, t)
            _scores(inv[:, 1:].float(), eps.depth[:, 1:].float(), acc)
        out[mode] = {"abs_rel": acc["absrel"] / acc["n_finite"], "rmse_z": (acc["se_z"] / acc["n_finite"]) ** 0.5,
                     "rmse_inv": (acc["se_inv"] / acc["n"]) ** 0.5, "sky_agree": acc["sky_agree"] / acc["n"],
                     "within_25pct": acc["within"] / acc["n_finite"]}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("weights", type=Path)
    ap.add_argument("--episodes", type=int, default=10)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    res = evaluate(a.weights, a.episodes)
    print(f"{'pass':<10} {'abs-rel':>8} {'< 25 %':>7} {'RMSE z':>8} {'RMSE 1/z':>9} {'sky agree':>10}")
    for mode, r in res.items():
        print(f"{mode:<10} {r['abs_rel']:8.3f} {r['within_25pct']:7.3f} {r['rmse_z']:8.3f} {r['rmse_inv']:9.4f} "
              f"{r['sky_agree']:10.3f}")
    print(json.dumps({"weights": str(a.weights), "episodes": a.episodes, **res}))


if __name__ == "__main__":
    main()
