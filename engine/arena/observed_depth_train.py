"""Head-only training of the arena model's observed-frame depth head (``ArenaModelConfig.observed_depth``), its
held-out check and its export.

``python3 -m engine.arena.observed_depth_train --out DIR [--steps N] [--base W]`` trains a wider conv depth
head (``--width``, default ``engine.arena.depth_net.OBSERVED_WIDTH``) for observed chunks only; every other weight of ``W``
(default: the packaged weights with the conv depth head) stays frozen. Observed frames are the world's true
frames, sharp, so the batches are sharp true frames only: ``poses`` free random poses in random training
arenas (seeds below ``TRAIN_ARENAS``; pitch as ``engine.arena.depth_train``), no degradation, no model
frames. The loss is ``depth_train.relative_error``'s. The head starts as the base's conv head widened
(``widened``: the base head's channels as they are, the new channels' inputs seeded, their outputs zero), so
step 0 predicts exactly what the base head predicts and training only has to improve on it.

Each step's batch is a pure function of (seed, step): deterministic and resumable (``DIR/observed-depth.pt``
every ``--save-every`` steps and at the end, plus the head alone as ``DIR/head-<step>.pt`` for picking the best;
a second call with the same ``DIR`` goes on). ``--eval`` prints the held-out abs-rel (``held_out``: arenas
from ``HELD_OUT_BASE``, never trained on) of the base head and of every saved head; ``--export FILE
[--head H]`` writes the base weights plus the head (default: the checkpoint's) as one fp16 safetensors file.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from engine.arena.data import TRAIN_ARENAS
from engine.arena.depth_net import OBSERVED_WIDTH, DepthNet
from engine.arena.depth_reproject import z_depth
from engine.arena.depth_train import log_step, random_pose, relative_error
from engine.arena.model import ArenaDiT
from engine.arena.render import depth, render
from engine.arena.train import _truncate_log
from engine.arena.weights import config_of, load_state_dict, packaged_depth_weights_path, read_metadata
from engine.arena.world import Arena

CHECKPOINT = "observed-depth.pt"
LOG = "observed-depth.log.jsonl"
HELD_OUT_BASE = TRAIN_ARENAS + 3000     # as scripts/depth_walk_check.py's arenas


@dataclass(frozen=True)
class ObservedDepthRecipe:
    steps: int = 2000
    poses: int = 12             # sharp true frames a step
    lr: float = 1e-3
    warmup: int = 30
    seed: int = 0
    pitch_range: float = 30.0   # degrees: half of the poses look level, the rest up to this far up or down
    width: int = OBSERVED_WIDTH  # the observed head's channels (``ArenaModelConfig.observed_depth``)


def widened(small: DepthNet, width: int, seed: int) -> DepthNet:
    """A ``width``-wide ``DepthNet`` that computes exactly what ``small`` does: its channels are ``small``'s,
    the new channels read seeded weights and are read by nothing yet (their weights into old channels 0)."""
    torch.manual_seed(seed)
    wide = DepthNet(small.cfg, width)
    old = dict(small.state_dict())
    with torch.no_grad():
        for key, w in wide.state_dict().items():
            o = old[key]
            if key.endswith("bias"):
                w[:o.shape[0]] = o
                continue
            w[:o.shape[0], o.shape[1]:] = 0
            w[:o.shape[0], :o.shape[1]] = o
    return wide


def base_model(base: Path, seed: int = 0, width: int = OBSERVED_WIDTH) -> ArenaDiT:
    """The frozen model of ``base``'s weights (a conv depth head) with a ``width``-wide observed head widened
    from its conv head."""
    cfg0 = config_of(base)
    if not (cfg0.depth_head and cfg0.depth_kind == "conv"):
        raise ValueError(f"{base}: the observed head starts from a conv depth head; this file has none")
    cfg = dataclasses.replace(cfg0, observed_depth=width, reproject_depth=False)
    torch.manual_seed(0)
    model = ArenaDiT(cfg)
    own = {k: v for k, v in load_state_dict(base, cfg0).items() if not k.startswith("observed_depth_net.")}
    result = model.load_state_dict(own, strict=False)
    assert all(k.startswith("observed_depth_net.") for k in result.missing_keys), result.missing_keys
    model.observed_depth_net = widened(model.depth_net, width, seed)
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("observed_depth_net."))
    return model.eval()


def sharp_frames(cfg, seeds: np.ndarray | range, rng: np.random.Generator, pitch_range: float):
    """One free random pose per arena seed: true frames ``[N, 3, H, W]``, cameras ``[N, 4]``, true inverse
    depth ``[N, H, W]``."""
    frames, cams, inv = [], [], []
    for s in seeds:
        arena = Arena.generate(int(s))
        pose = random_pose(arena, rng, pitch_range)
        frames.append(torch.from_numpy(render(arena, *pose, cfg.height, cfg.width, cfg.hfov)))
        inv.append(torch.from_numpy(1.0 / depth(arena, *pose, cfg.height, cfg.width, cfg.hfov)))
        cams.append(torch.tensor(pose, dtype=torch.float32))
    return torch.stack(frames), torch.stack(cams), torch.stack(inv).float()


def batch(cfg, r: ObservedDepthRecipe, step: int):
    """Step ``step``'s sharp true frames, cameras and true inverse depth (a pure function of seed, step)."""
    rng = np.random.default_rng([r.seed, step, 2])
    return sharp_frames(cfg, rng.integers(0, TRAIN_ARENAS, size=r.poses), rng, r.pitch_range)


def held_out(net: DepthNet, frames: int = 96, seed: int = 0) -> dict[str, float]:
    """abs-rel of z-depth (``|z - z_true| / z_true``, at most 10, over every pixel with a surface) of ``net`` on sharp
    frames of held-out arenas (one pose in each of ``frames`` arenas from ``HELD_OUT_BASE``)."""
    cfg = net.cfg
    rng = np.random.default_rng([seed, 7])
    f, cams, inv = sharp_frames(cfg, range(HELD_OUT_BASE, HELD_OUT_BASE + frames), rng, 30.0)
    with torch.no_grad():
        pred = net(f, cams)
    zt = 1.0 / inv
    fin = torch.isfinite(zt)
    rel = ((z_depth(pred) - zt).abs() / zt)[fin].clamp(max=10)      # a surface read as sky counts 10
    return {"mean": round(float(rel.mean()), 4), "median": round(float(rel.median()), 4),
            "p90": round(float(rel.quantile(0.9)), 4), "over5": round(float((rel > 0.05).float().mean()), 3)}


def _lr(r: ObservedDepthRecipe, step: int) -> float:
    if step < r.warmup:
        return r.lr * (step + 1) / r.warmup
    return r.lr * 0.5 * (1 + math.cos(math.pi * (step - r.warmup) / max(1, r.steps - r.warmup)))


def train(out: Path, r: ObservedDepthRecipe, base: Path | None = None, save_every: int = 50,
          quiet: bool = False) -> Path:
    """Train (or go on training) the observed head into ``out``; returns the checkpoint's path."""
    base = Path(base) if base is not None else packaged_depth_weights_path()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    model = base_model(base, r.seed, r.width)
    net = model.observed_depth_net
    params = list(net.parameters())
    opt = torch.optim.AdamW(params, lr=r.lr, weight_decay=1e-4)
    ckpt, step, wall = out / CHECKPOINT, 0, 0.0
    if ckpt.exists():
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
        net.load_state_dict(state["net"])
        opt.load_state_dict(state["opt"])
        step, wall = int(state["step"]), float(state["wall_s"])
    _truncate_log(out / LOG, step)          # steps a killed run made after its checkpoint are redone
    t0 = time.perf_counter() - wall
    while step < r.steps:
        frames, cams, inv = batch(model.cfg, r, step)
        for g in opt.param_groups:
            g["lr"] = _lr(r, step)
        loss = relative_error(net(frames, cams), inv).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        row = {"step": step, "loss": round(float(loss.detach()), 5), "wall_s": round(time.perf_counter() - t0, 1)}
        log_step(out / LOG, row, quiet)
        if step % save_every == 0 or step == r.steps:
            _save(out, net, opt, step, time.perf_counter() - t0, r, base)
    return ckpt


def _save(out: Path, net: DepthNet, opt, step: int, wall: float, r: ObservedDepthRecipe, base: Path) -> None:
    head = {"net": net.state_dict(), "step": step, "wall_s": wall, "recipe": dataclasses.asdict(r), "base": str(base)}
    torch.save(head, out / f"head-{step}.pt")
    tmp = (out / CHECKPOINT).with_suffix(".tmp")
    torch.save({**head, "opt": opt.state_dict()}, tmp)
    tmp.replace(out / CHECKPOINT)


def evaluate(out: Path, base: Path | None = None, frames: int = 96) -> list[dict]:
    """Held-out abs-rel of the base's conv head and of every head saved in ``out``, by step."""
    base = Path(base) if base is not None else packaged_depth_weights_path()
    model = base_model(base)
    rows = [{"head": "base", **held_out(model.depth_net, frames)}]
    for path in sorted(out.glob("head-*.pt"), key=lambda p: int(p.stem.split("-")[1])):
        rows.append({"head": path.name, **held_out(_head(path, model.cfg), frames)})
    return rows


def _head(path: Path, cfg) -> DepthNet:
    state = torch.load(path, map_location="cpu", weights_only=True)
    net = DepthNet(cfg, state["recipe"].get("width", OBSERVED_WIDTH))
    net.load_state_dict(state["net"])
    return net


def export(head: Path, out: Path, base: Path | None = None) -> Path:
    """The base weights plus the observed head of ``head`` (a checkpoint or a ``head-<step>.pt``) as one fp16
    safetensors file (metadata: the config with ``observed_depth``, and the head's training figures)."""
    base = Path(base) if base is not None else packaged_depth_weights_path()
    state = torch.load(head, map_location="cpu", weights_only=True)
    width = state["recipe"].get("width", OBSERVED_WIDTH)
    model = base_model(base, width=width)
    model.observed_depth_net.load_state_dict(state["net"])
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    meta = {**read_metadata(base), "config": json.dumps(dataclasses.asdict(model.cfg)),
            "observed_depth_head": f"conv width {width}, head-only on sharp true frames: {state['step']} "
                                   f"steps, {state['wall_s']:.0f} s (engine.arena.observed_depth_train, "
                                   f"recipe {json.dumps(state['recipe'])})"}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="train the arena model's observed-frame depth head (head only)")
    ap.add_argument("--out", type=Path, required=True, help="checkpoint directory (resumed when it has one)")
    ap.add_argument("--base", type=Path, default=None, help="weights with a conv depth head (default: packaged)")
    ap.add_argument("--steps", type=int, default=ObservedDepthRecipe.steps)
    ap.add_argument("--poses", type=int, default=ObservedDepthRecipe.poses)
    ap.add_argument("--lr", type=float, default=ObservedDepthRecipe.lr)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=OBSERVED_WIDTH, help="the observed head's channels")
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--no-train", action="store_true", help="only --eval / --export")
    ap.add_argument("--eval", action="store_true", help="print the held-out abs-rel of the base and saved heads")
    ap.add_argument("--export", type=Path, default=None, help="write base + observed head as fp16 safetensors")
    ap.add_argument("--head", type=Path, default=None, help="the head to export (default: the checkpoint's)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    r = ObservedDepthRecipe(steps=a.steps, poses=a.poses, lr=a.lr, seed=a.seed, width=a.width)
    if not a.no_train:
        train(a.out, r, a.base, a.save_every, a.quiet)
    if a.eval:
        for row in evaluate(a.out, a.base):
            print(json.dumps(row), flush=True)
    if a.export is not None:
        export(a.head or a.out / CHECKPOINT, a.export, a.base)


if __name__ == "__main__":
    main()
