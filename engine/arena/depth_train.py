"""Head-only training of the arena model's conv depth head (``engine.arena.depth_net``), and its export.

``python3 -m engine.arena.depth_train --out DIR [--steps N] [--base W]`` trains the head of a model whose
other weights come from ``W`` (default: the packaged weights) and stay frozen; ``--export FILE`` writes the
base weights plus the trained head as one fp16 safetensors file (``depth_head``, ``depth_kind="conv"``).

Each step's batch is a pure function of (seed, step), so a run is deterministic and resumable (``DIR/
depth.pt`` every ``--save-every`` steps and at the end; a second call with the same ``DIR`` goes on from it):

* ``poses`` free random poses in random training arenas (seeds below ``TRAIN_ARENAS``): the true frame
  (what an observed chunk stores) and its true depth (``engine.arena.render.depth``, the target); half of
  them degraded (``degrade``: blur, haze toward a blocky mean, noise), as generated frames at new places are;
* one training episode of ``chunks`` chunks through the frozen model at t = 1 (the sampler's one step, the
  true frames as context): its x0, the very frames a generated chunk's depth is read from, each degraded
  further with probability one half.

Loss (``relative_error``): the L1 error of log inverse depth on surfaces (about abs-rel), and on the sky
(true inverse depth 0) how far the prediction's log is above half ``SKY_INVERSE``; averaged over pixels. Logged per step to ``DIR/depth.log.jsonl`` (loss over the sharp and the generated frames).
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
import torch.nn.functional as F
from safetensors.torch import save_file

from engine.arena.data import TRAIN_ARENAS, training_episode
from engine.arena.depth_reproject import SKY_INVERSE
from engine.arena.model import ArenaDiT
from engine.arena.render import depth, render
from engine.arena.train import _truncate_log
from engine.arena.weights import config_of, load_state_dict, packaged_weights_path, read_metadata
from engine.arena.world import Arena

CHECKPOINT = "depth.pt"
LOG = "depth.log.jsonl"


@dataclass(frozen=True)
class DepthRecipe:
    steps: int = 3000
    poses: int = 12             # free random poses a step
    chunks: int = 3             # chunks of the step's episode through the frozen model (0: none)
    lr: float = 3e-3
    warmup: int = 50
    seed: int = 0
    pitch_range: float = 30.0   # degrees: half of the poses look level, the rest up to this far up or down


def base_model(base: Path) -> ArenaDiT:
    """The frozen model of ``base``'s weights with a fresh conv depth head (seeded)."""
    cfg = dataclasses.replace(config_of(base), depth_head=True, depth_kind="conv", reproject_depth=False)
    torch.manual_seed(0)
    model = ArenaDiT(cfg)
    own = {k: v for k, v in load_state_dict(base, config_of(base)).items()
           if not k.startswith(("depth_out.", "depth_net."))}
    result = model.load_state_dict(own, strict=False)
    assert all(k.startswith("depth_net.") for k in result.missing_keys), result.missing_keys
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("depth_net."))
    return model.eval()


def random_pose(arena: Arena, rng: np.random.Generator, pitch_range: float) -> tuple[float, float, float, float]:
    """A free camera pose (x, z, yaw, pitch) in ``arena`` (world units, degrees)."""
    n = arena.cfg.cells
    while True:
        gx, gz = rng.uniform(1, n - 1, size=2)
        if not arena.blocked(gx, gz):
            break
    x, z = arena.to_world(gx, gz)
    pitch = 0.0 if rng.random() < 0.5 else float(rng.uniform(-pitch_range, pitch_range))
    return float(x), float(z), float(rng.uniform(0, 360)), pitch


def degrade(frames: torch.Tensor, gen: torch.Generator, patch: int = 8) -> torch.Tensor:
    """Frames ``[N, 3, H, W]`` as a generated frame at a new place looks: blurred (sigma 0.3-2 px), hazed
    toward their ``patch``-blocky mean (0-50%), with noise (0-0.08)."""
    n = frames.shape[0]
    out = []
    for i in range(n):
        u = torch.rand(3, generator=gen)
        sigma = 0.3 + 1.7 * float(u[0])
        r = torch.arange(-3, 4, dtype=frames.dtype)
        k = torch.exp(-r ** 2 / (2 * sigma ** 2))
        k = k / k.sum()
        x = frames[i:i + 1]
        x = F.conv2d(F.pad(x, (3, 3, 0, 0), mode="replicate"), k.view(1, 1, 1, 7).repeat(3, 1, 1, 1), groups=3)
        x = F.conv2d(F.pad(x, (0, 0, 3, 3), mode="replicate"), k.view(1, 1, 7, 1).repeat(3, 1, 1, 1), groups=3)
        blocky = F.interpolate(F.avg_pool2d(x, patch), scale_factor=patch, mode="nearest")
        x = x + 0.5 * float(u[1]) * (blocky - x)
        x = x + 0.08 * float(u[2]) * torch.randn(x.shape, generator=gen)
        out.append(x.clamp(-1, 1))
    return torch.cat(out)


def batch(model: ArenaDiT, r: DepthRecipe, step: int) -> dict[str, torch.Tensor]:
    """Step ``step``'s frames ``[N, 3, H, W]``, cameras ``[N, 4]``, true inverse depth ``[N, H, W]`` and
    which frames came from the model ``[N]`` (bool)."""
    cfg = model.cfg
    rng = np.random.default_rng([r.seed, step, 1])
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
    frames, cams, inv = [], [], []
    for _ in range(r.poses):
        arena = Arena.generate(int(rng.integers(0, TRAIN_ARENAS)))
        pose = random_pose(arena, rng, r.pitch_range)
        frames.append(torch.from_numpy(render(arena, *pose, cfg.height, cfg.width, cfg.hfov)))
        inv.append(torch.from_numpy(1.0 / depth(arena, *pose, cfg.height, cfg.width, cfg.hfov)))
        cams.append(torch.tensor(pose, dtype=torch.float32))
    frames, cams, inv = torch.stack(frames), torch.stack(cams), torch.stack(inv)
    half = r.poses // 2
    frames = torch.cat([frames[:half], degrade(frames[half:], gen)])
    generated = torch.zeros(r.poses, dtype=torch.bool)
    if r.chunks > 0:
        eps = training_episode(r.seed + 1, step, 0, cfg, r.chunks, 3, with_depth=True)
        with torch.no_grad():
            noisy = torch.randn(eps.frames.shape, generator=gen)
            x0 = model.train_forward(eps.frames[None], noisy[None], torch.ones(1, r.chunks), eps.actions[None],
                                     eps.cam[None], torch.zeros(1, dtype=torch.long), eps.ctx_ids[None],
                                     eps.mem_shift[None])[0].flatten(0, 1).clamp(-1, 1)
        pick = torch.rand(x0.shape[0], generator=gen) < 0.5
        x0 = torch.where(pick[:, None, None, None], degrade(x0, gen), x0)
        frames = torch.cat([frames, x0])
        cams = torch.cat([cams, eps.cam.flatten(0, 1)])
        inv = torch.cat([inv, eps.depth.flatten(0, 1).reciprocal()])
        generated = torch.cat([generated, torch.ones(x0.shape[0], dtype=torch.bool)])
    return {"frames": frames, "cam": cams, "inv": inv.float(), "generated": generated}


def relative_error(pred: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """Per pixel (the training loss before the mean): ``|log pred - log inv|`` on surfaces (about abs-rel,
    and as costly too far as too near), and on the sky (``inv`` 0) how far ``log pred`` is above
    ``log(SKY_INVERSE / 2)`` (below it the splat reads the pixel as sky)."""
    log_pred = pred.clamp_min(1e-12).log()
    sky = inv <= 0
    surface = (log_pred - inv.clamp_min(1e-12).log()).abs()
    return torch.where(sky, F.relu(log_pred - math.log(SKY_INVERSE / 2)), surface)


def _lr(r: DepthRecipe, step: int) -> float:
    if step < r.warmup:
        return r.lr * (step + 1) / r.warmup
    return r.lr * 0.5 * (1 + math.cos(math.pi * (step - r.warmup) / max(1, r.steps - r.warmup)))


def train(out: Path, r: DepthRecipe, base: Path | None = None, save_every: int = 50, quiet: bool = False) -> Path:
    """Train (or go on training) the head into ``out``; returns the checkpoint's path."""
    base = Path(base) if base is not None else packaged_weights_path()
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    model = base_model(base)
    params = list(model.depth_net.parameters())
    opt = torch.optim.AdamW(params, lr=r.lr, weight_decay=1e-4)
    ckpt, step, wall = out / CHECKPOINT, 0, 0.0
    if ckpt.exists():
        state = torch.load(ckpt, map_location="cpu", weights_only=True)
        model.depth_net.load_state_dict(state["net"])
        opt.load_state_dict(state["opt"])
        step, wall = int(state["step"]), float(state["wall_s"])
    _truncate_log(out / LOG, step)          # steps a killed run made after its checkpoint are redone
    t0 = time.perf_counter() - wall
    while step < r.steps:
        b = batch(model, r, step)
        for g in opt.param_groups:
            g["lr"] = _lr(r, step)
        err = relative_error(model.depth_net(b["frames"], b["cam"]), b["inv"]).mean((-1, -2))   # [N]
        loss = err.mean()
        err = err.detach()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        row = {"step": step, "loss": round(float(loss.detach()), 5), "sharp": round(float(err[~b["generated"]].mean()), 5),
               "wall_s": round(time.perf_counter() - t0, 1)}
        if b["generated"].any():
            row["generated"] = round(float(err[b["generated"]].mean()), 5)
        log_step(out / LOG, row, quiet)
        if step % save_every == 0 or step == r.steps:
            _save(ckpt, model, opt, step, time.perf_counter() - t0, r, base)
    return ckpt


def log_step(log: Path, row: dict, quiet: bool) -> None:
    """Append a step's row to the training log; print every tenth step unless ``quiet``."""
    with open(log, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    if not quiet and row["step"] % 10 == 0:
        print(json.dumps(row), flush=True)


def _save(ckpt: Path, model: ArenaDiT, opt, step: int, wall: float, r: DepthRecipe, base: Path) -> None:
    tmp = ckpt.with_suffix(".tmp")
    torch.save({"net": model.depth_net.state_dict(), "opt": opt.state_dict(), "step": step, "wall_s": wall,
                "recipe": dataclasses.asdict(r), "base": str(base)}, tmp)
    tmp.replace(ckpt)


def export(ckpt: Path, out: Path, base: Path | None = None) -> Path:
    """The base weights plus the checkpoint's head as one fp16 safetensors file (metadata: the config with
    ``depth_head`` and ``depth_kind="conv"``, and the head's training figures)."""
    base = Path(base) if base is not None else packaged_weights_path()
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    model = base_model(base)
    model.depth_net.load_state_dict(state["net"])
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
    meta = {**read_metadata(base), "config": json.dumps(dataclasses.asdict(model.cfg)),
            "depth_head": f"conv, head-only: {state['step']} steps, {state['wall_s']:.0f} s "
                          f"(engine.arena.depth_train, recipe {json.dumps(state['recipe'])})"}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="train the arena model's conv depth head (head only)")
    ap.add_argument("--out", type=Path, required=True, help="run directory (resumed when it has a checkpoint)")
    ap.add_argument("--steps", type=int, default=DepthRecipe.steps)
    ap.add_argument("--poses", type=int, default=DepthRecipe.poses)
    ap.add_argument("--chunks", type=int, default=DepthRecipe.chunks)
    ap.add_argument("--lr", type=float, default=DepthRecipe.lr)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base", type=Path, default=None, help="weights of the frozen model (default: packaged)")
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--export", type=Path, default=None, help="after training: write the weights file here")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    r = DepthRecipe(steps=a.steps, poses=a.poses, chunks=a.chunks, lr=a.lr, seed=a.seed)
    ckpt = train(a.out, r, a.base, a.save_every, a.quiet)
    if a.export is not None:
        export(ckpt, a.export, a.base)


if __name__ == "__main__":
    main()
