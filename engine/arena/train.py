"""Training the arena model: ``python -m engine.arena.train --out DIR [--steps N | --minutes M]`` (also
``worldpager train arena``; on a CUDA device ``scripts/device_train.sh``).

Owns the recipe: flow matching with x0 prediction on whole episodes (two streams, see
``engine.arena.model``), episodes drawn on the fly from training arenas (``engine.arena.data``), AdamW
with warm-up and cosine decay, gradient clipping. Deterministic for a seed (data is a function of seed
and step; torch is seeded), on CPU or CUDA. Resumable: ``DIR/last.pt`` (model, optimiser, step) is
written atomically every ``--save-every`` steps and read on start; loss goes to ``DIR/train.log.jsonl``
one line per step; a progress bar shows the moving average. ``--export PATH`` writes the fp16
safetensors the package ships (``engine/arena/weights/arena.safetensors``) with its config and
training figures in the metadata. ``--minutes M`` bounds a run by its own wall time instead of its
steps: the learning rate warms up, holds at its peak, and decays linearly over the last
``DECAY_SHARE`` of the time (the schedule follows the clock, so such a run is not bit-reproducible;
every step's rate is in the log), then the checkpoint is saved. ``--workers N`` renders batches in N
processes (a GPU step is faster than one core renders a big batch); the data is the same.
``--depth-weight X`` (> 0) gives the model the depth head (``ArenaModelConfig.depth_head``) and adds X
times the MSE of its inverse depth against the renderer's true depth (``depth_loss``, logged per step).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import queue
import threading
import time
from pathlib import Path

import torch
from tqdm import tqdm

from engine.arena.codebook import nearest, split
from engine.arena.config import ArenaModelConfig
from engine.arena.data import stack, training_episode
from engine.arena.model import ArenaDiT
from engine.arena.patches import patchify
from engine.files.output_files import check_output_dir, make_output_dir


@dataclasses.dataclass(frozen=True)
class Recipe:
    seed: int = 0
    steps: int = 20000
    batch: int = 4
    chunks: int = 12                  # chunks per training episode
    retrieve_k: int = 3
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 200
    weight_decay: float = 0.01
    clip: float = 1.0
    p_pure_noise: float = 0.5         # share of chunks trained at t = 1 (what one-step sampling sees)
    wta_share: float = 0.05           # several candidates: the weight the losing ones share (relaxed winner-takes-all)
    choice_weight: float = 0.02       # several candidates: weight of the cross-entropy of the winner's choice
    memory_distance: float | None = None   # farthest move of memory keys in latent frames (None: the native table)
    copy_decision: float = 0.0        # weight of the copy gate's cross-entropy against "the hard copy is nearer
                                      # the truth than the generated patch" (what hard_copy decides at inference)
    degrade: float = 0.5              # share of episodes whose clean context is blurred / noised
    self_context: float = 0.5         # share of steps whose context chunks are the model's own predictions
    code_weight: float = 1.0          # a codebook: weight of the cross-entropy of each sub-patch's code (the truth's nearest)
    head_only: bool = False           # train the codebook head alone (every other weight frozen)
    depth_weight: float = 0.0         # a depth head: weight of the MSE of its inverse depth against the renderer's
    clean_share: float = 0.0          # share of chunks trained at t = 0 (given their clean frames: what a depth
                                      # head sees of an observed chunk at inference)


DECAY_SHARE = 0.2              # of a timed run: the last share of its minutes decays the learning rate


def timed_learning_rate(r: Recipe, step: int, elapsed_share: float) -> float:
    """Warm-up by steps, then the peak, then a linear decay to ``min_lr_ratio`` over the time's last share."""
    if step < r.warmup:
        return r.lr * (step + 1) / r.warmup
    decay = min(1.0, max(0.0, (elapsed_share - (1 - DECAY_SHARE)) / DECAY_SHARE))
    return r.lr * (1 - (1 - r.min_lr_ratio) * decay)


def learning_rate(r: Recipe, step: int) -> float:
    if step < r.warmup:
        return r.lr * (step + 1) / r.warmup
    progress = min(1.0, (step - r.warmup) / max(1, r.steps - r.warmup))
    return r.lr * (r.min_lr_ratio + (1 - r.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def flow_times(gen: torch.Generator, shape, r: Recipe) -> torch.Tensor:
    """Per-chunk flow times: t = 1 with probability p_pure_noise, else logit-normal towards high noise."""
    t = torch.sigmoid(torch.randn(shape, generator=gen) * 1.0 + 0.8)
    t = torch.where(torch.rand(shape, generator=gen) < r.p_pure_noise, torch.ones(shape), t)
    if r.clean_share > 0:
        t = torch.where(torch.rand(shape, generator=gen) < r.clean_share, torch.zeros(shape), t)
    return t


def degrade_context(clean: torch.Tensor, gen: torch.Generator, r: Recipe) -> torch.Tensor:
    """What the clean pass sees at inference is the model's own (softer) output, not the truth: blur
    and noise the context chunks (never chunk 0, which inference is given) of some episodes."""
    b = clean.shape[0]
    pick = (torch.rand(b, generator=gen) < r.degrade).view(b, 1, 1, 1, 1, 1)
    flat = clean.flatten(0, 2)
    blurred = torch.nn.functional.avg_pool2d(flat, 3, stride=1, padding=1, count_include_pad=False).view_as(clean)
    amount = torch.rand(b, 1, 1, 1, 1, 1, generator=gen)
    noise = torch.randn(clean.shape, generator=gen) * 0.03 * amount
    soft = clean + amount * (blurred - clean) + noise
    soft[:, 0] = clean[:, 0]
    return torch.where(pick, soft, clean)


def batch_for(r: Recipe, cfg: ArenaModelConfig, step: int):
    eps = stack([training_episode(r.seed, step, i, cfg, r.chunks, r.retrieve_k, r.memory_distance,
                                  with_depth=r.depth_weight > 0) for i in range(r.batch)])
    gen = torch.Generator().manual_seed(r.seed * 1_000_003 + step)
    t = flow_times(gen, (r.batch, r.chunks), r)
    noise = torch.randn(eps.frames.shape, generator=gen)
    tt = t.view(r.batch, r.chunks, 1, 1, 1, 1)
    noisy = (1 - tt) * eps.frames + tt * noise
    context = degrade_context(eps.frames, gen, r)
    top = cfg.rope_table_frames - r.chunks * cfg.frames_per_chunk
    start = torch.randint(0, top // cfg.frames_per_chunk + 1, (r.batch,), generator=gen) * cfg.frames_per_chunk
    return eps, context, noisy, t, start


def self_context(model: ArenaDiT, eps, context, start, gen: torch.Generator) -> torch.Tensor:
    """The context chunks replaced by the model's own one-step predictions (no gradient).

    At inference every chunk after the first is the model's output, never the truth; training on its
    own predictions as context teaches it to live with them instead of drifting. Chunk 0 stays the
    truth (inference is given it). A model with ``hard_copy`` predicts them as inference does (whole
    copied patches): the network runs in eval mode for this pass (it has no dropout or batch norm)."""
    noise = torch.randn(context.shape, generator=gen).to(context.device)
    ones = torch.ones(context.shape[:2], device=context.device)
    was_training = model.training
    with torch.no_grad():
        model.train(not (model.cfg.hard_copy or model.cfg.codebook) and was_training)
        try:
            pred = model.train_forward(context, noise, ones, eps.actions, eps.cam, start, eps.ctx_ids, eps.mem_shift)
        finally:
            model.train(was_training)
    out = pred.clamp(-1, 1)
    out[:, 0] = context[:, 0]
    return out


def loss_of(model: ArenaDiT, eps, context, noisy, t, start, r: Recipe = Recipe(),
            figures: dict | None = None) -> torch.Tensor:
    """MSE on x0 (chunk 0 is given at inference). With several candidates per token: relaxed
    winner-takes-all (the candidate nearest the truth takes ``1 - wta_share`` of the weight) plus the
    cross-entropy of choosing it, so that each candidate is one sharp mode and the choice keeps the likeliest.
    With ``depth_weight`` (a depth head): plus that weight times ``depth_loss``, which goes into
    ``figures["depth_loss"]``."""
    with_depth = r.depth_weight > 0
    parts = {} if r.copy_decision > 0 or model.cfg.codebook or with_depth else None
    cands, logits = model.train_candidates(context, noisy, t, eps.actions, eps.cam, start, eps.ctx_ids, eps.mem_shift,
                                           parts)
    truth = patchify(eps.frames, model.cfg.patch).flatten(2, 3)                # [B, C, T, P]
    err = (cands[:, 1:] - truth[:, 1:, :, None]).pow(2).mean(-1)              # [B, C-1, T, K]
    k = err.shape[-1]
    decision = copy_decision_loss(parts, truth) * r.copy_decision if r.copy_decision > 0 else 0.0
    if model.cfg.codebook:
        decision = decision + r.code_weight * code_loss(model, parts["code_logits"], truth)
    if with_depth:
        d_loss = depth_loss(model, parts["inv_depth"], eps.depth)
        if figures is not None:
            figures["depth_loss"] = float(d_loss.detach())
        decision = decision + r.depth_weight * d_loss
    if k == 1:
        return err.mean() + decision
    win = err.detach().argmin(-1)
    weights = torch.full_like(err, r.wta_share / (k - 1)).scatter_(-1, win[..., None], 1.0 - r.wta_share)
    choice = torch.nn.functional.cross_entropy(logits[:, 1:].reshape(-1, k), win.reshape(-1))
    return (weights * err).sum(-1).mean() + r.choice_weight * choice + decision


def depth_loss(model: ArenaDiT, inv_depth: torch.Tensor, depth: torch.Tensor | None) -> torch.Tensor:
    """MSE of the predicted inverse depth ``[B * C, T, patch**2]`` against the renderer's true depth
    ``[B, C, F, H, W]`` (world units; sky, at infinity, is inverse depth 0) on the chunks after the first.
    Inverse depth keeps the target bounded (the eye is never nearer a surface than the wall margin) and
    makes the sky an ordinary value."""
    assert model.cfg.depth_head and depth is not None, "a depth weight needs the depth head and the episodes' depth"
    b, c = depth.shape[:2]
    target = patchify(depth.reciprocal()[:, :, :, None], model.cfg.patch).flatten(2, 3)     # [B, C, T, p*p]
    pred = inv_depth.unflatten(0, (b, c))
    return (pred[:, 1:] - target[:, 1:]).pow(2).mean()


def code_loss(model: ArenaDiT, code_logits: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of every sub-patch's code logits against the code nearest the truth (chunks after the first)."""
    cfg = model.cfg
    b, c = truth.shape[:2]
    logits = code_logits.unflatten(0, (b, c))[:, 1:]                           # [B, C-1, T, S * codes]
    target = nearest(split(truth[:, 1:], cfg), model.codes)                    # [B, C-1, T, S]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.codebook), target.reshape(-1))


def copy_decision_loss(parts: dict, truth: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the copy gate against the hard decision's best answer: copy where the patch a hard
    copy fetches is nearer the truth than the nearest generated candidate (chunks after the first, rows
    with context)."""
    b, c = truth.shape[:2]
    gen = parts["gen"].unflatten(0, (b, c))[:, 1:]                            # [B, C-1, T, K, P]
    hard = parts["hard"].unflatten(0, (b, c))[:, 1:]                          # [B, C-1, T, P]
    gate = parts["gate"].unflatten(0, (b, c))[:, 1:, :, 0]                    # [B, C-1, T]
    t = truth[:, 1:]
    target = ((hard - t).pow(2).mean(-1) < (gen - t[..., None, :]).pow(2).mean(-1).min(-1).values).float()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(gate, target, reduction="none")
    if parts["has"] is not None:
        has = parts["has"].unflatten(0, (b, c))[:, 1:, 0, 0].float()[..., None]   # [B, C-1, 1]
        return (loss * has).sum() / (has.sum() * loss.shape[-1]).clamp_min(1)
    return loss.mean()


def _batch_in_worker(args):
    torch.set_num_threads(1)
    return batch_for(*args)


class Prefetcher:
    """Builds the next batches on a background thread (rendering overlaps the optimiser step); with
    ``workers`` > 0 the thread hands the rendering to that many processes, in step order."""

    def __init__(self, r: Recipe, cfg: ArenaModelConfig, first_step: int, depth: int = 2, workers: int = 0):
        self.q: queue.Queue = queue.Queue(maxsize=max(depth, workers))
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.workers = workers
        self.thread = threading.Thread(target=self._run, args=(r, cfg, first_step), daemon=True)
        self.thread.start()

    def _run(self, r, cfg, step):
        torch.set_num_threads(1)   # per thread: the model's OpenMP team keeps both cores to itself
        try:
            if self.workers:
                self._run_pool(r, cfg, step)
                return
            while not self._stop.is_set() and step < r.steps:
                self.q.put(batch_for(r, cfg, step))
                step += 1
        except BaseException as exc:   # reported by get(), never swallowed
            self.error = exc
            self.q.put(None)

    def _run_pool(self, r, cfg, step):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ahead: list = []
        with ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            while not self._stop.is_set() and (step < r.steps or ahead):
                while step < r.steps and len(ahead) < 2 * self.workers:
                    ahead.append(pool.submit(_batch_in_worker, (r, cfg, step)))
                    step += 1
                self.q.put(ahead.pop(0).result())
            for f in ahead:
                f.cancel()

    def get(self):
        item = self.q.get()
        if item is None:
            raise RuntimeError(f"batch preparation failed: {self.error!r}") from self.error
        return item

    def close(self):
        """Stop, and take what the thread is putting so that it sees the stop (and shuts its pool down)."""
        self._stop.set()
        while self.thread.is_alive():
            try:
                self.q.get(timeout=0.1)
            except queue.Empty:
                pass


def save_checkpoint(path: Path, model, opt, step: int, r: Recipe, cfg: ArenaModelConfig, extra: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "recipe": dataclasses.asdict(r), "config": dataclasses.asdict(cfg), **extra}, tmp)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


# What training writes in its directory: the checkpoint and the log, and the names they are rewritten under.
TRAIN_FILES = ("last.pt", "last.tmp", "train.log.jsonl", "train.log.tmp")


TIMED_STEPS = 3   # after this many steps of a run, it says how long a step takes and the rest will


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def expected_time_line(per_step_s: float, steps_left: int, budget_s: float | None) -> str:
    """What the first steps of a run say about the rest: a step's time, and the steps left's (or the budget's)."""
    line = f"arena: {per_step_s:.2f} s a step over the first {TIMED_STEPS}; {steps_left} steps to go: about " \
           f"{_duration(per_step_s * steps_left)}"
    if budget_s is not None and per_step_s * steps_left > budget_s:
        line += f" (--minutes stops it after {_duration(budget_s)}, near step {int(budget_s / per_step_s)} of them)"
    return line


def train(out: Path, r: Recipe, cfg: ArenaModelConfig, device: str = "cpu", save_every: int = 50,
          init: Path | None = None, quiet: bool = False, budget_s: float | None = None, workers: int = 0) -> dict:
    """Train until ``r.steps`` (or ``budget_s`` seconds of this run's wall time) and save ``out/last.pt``."""
    make_output_dir(out, "--out", TRAIN_FILES)   # before anything is built: no FIFO or device among them
    torch.manual_seed(r.seed)
    model = ArenaDiT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=r.lr, weight_decay=r.weight_decay, betas=(0.9, 0.99))
    ckpt_path = out / "last.pt"
    step, wall, avg = 0, 0.0, None
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, wall, avg = state["step"], state.get("wall_s", 0.0), state.get("avg_loss")
    elif init is not None:
        from engine.arena.weights import init_from
        init_from(model, init, torch.Generator().manual_seed(r.seed))
    elif cfg.codebook:   # a new model's codes: fitted on training renders
        model.init_new_parts(["code_head.weight"])
    if r.head_only:   # only the codebook (or depth) head learns (AdamW skips weights without gradients)
        head = "depth_out." if r.depth_weight > 0 else "code_head."
        for name, param in model.named_parameters():
            param.requires_grad_(name.startswith(head))
    log_path = out / "train.log.jsonl"
    _truncate_log(log_path, step)
    log = open(log_path, "a", buffering=1)
    pre = Prefetcher(r, cfg, step, workers=workers)
    bar = tqdm(total=r.steps, initial=step, disable=quiet, desc="arena", unit="step")
    began, made = time.perf_counter(), 0
    try:
        while step < r.steps:
            if budget_s is not None and time.perf_counter() - began >= budget_s:
                break
            t0 = time.perf_counter()
            eps, context, noisy, t, start = pre.get()
            rate = (learning_rate(r, step) if budget_s is None else
                    timed_learning_rate(r, step, (time.perf_counter() - began) / budget_s))
            for g in opt.param_groups:
                g["lr"] = rate
            eps, context, start = eps.to(device), context.to(device), start.to(device)
            gen = torch.Generator().manual_seed(r.seed * 7_000_003 + step)
            if torch.rand(1, generator=gen).item() < r.self_context:
                context = self_context(model, eps, context, start, gen)
            figures: dict = {}
            loss = loss_of(model, eps, context, noisy.to(device), t.to(device), start, r, figures)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), r.clip)
            opt.step()
            step += 1
            wall += time.perf_counter() - t0
            value = float(loss.detach())
            avg = value if avg is None else 0.98 * avg + 0.02 * value
            log.write(json.dumps({"step": step, "loss": value, "avg": avg, "grad_norm": float(norm),
                                  "lr": rate, "wall_s": round(wall, 2), **figures}) + "\n")
            bar.set_postfix(loss=f"{avg:.4f}")
            bar.update(1)
            made += 1
            if made == TIMED_STEPS and not quiet:
                tqdm.write(expected_time_line((time.perf_counter() - began) / made, r.steps - step, budget_s),
                           file=sys.stderr)
            if step % save_every == 0 or step == r.steps:
                save_checkpoint(ckpt_path, model, opt, step, r, cfg, {"wall_s": wall, "avg_loss": avg})
        if step % save_every:
            save_checkpoint(ckpt_path, model, opt, step, r, cfg, {"wall_s": wall, "avg_loss": avg})
    finally:
        pre.close()
        bar.close()
        log.close()
    return {"step": step, "wall_s": wall, "avg_loss": avg}


def model_config(out: Path, init: Path | None, **design) -> ArenaModelConfig:
    """The shape to train: a checkpoint's in ``out``; else the ``init`` weights' (their metadata), or the
    default, with the output ``design`` keys given (``warp``, ``hypotheses``, ``hard_copy``; None: unchanged)."""
    check_output_dir(out, "--out", TRAIN_FILES)   # a FIFO or device named last.pt is refused, never read
    ckpt = out / "last.pt"
    if ckpt.exists():
        raw = torch.load(ckpt, map_location="cpu", weights_only=True)["config"]
        return ArenaModelConfig(**{**raw, "steps": tuple(raw["steps"])})
    if init is not None:
        from engine.arena.weights import config_of
        cfg = config_of(init)
    else:
        cfg = ArenaModelConfig()
    return dataclasses.replace(cfg, **{k: v for k, v in design.items() if v is not None})


def _truncate_log(path: Path, step: int) -> None:
    """Drop log lines past the checkpoint (steps a killed run made but did not save: they are redone)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines(keepends=True)
            if line.strip() and json.loads(line).get("step", 0) <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(keep))
    os.replace(tmp, path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m engine.arena.train", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="checkpoint + log directory (resumed if present)")
    p.add_argument("--steps", type=int, default=Recipe.steps)
    p.add_argument("--minutes", type=float, default=None, help="stop after this much wall time of this run")
    p.add_argument("--workers", type=int, default=0, help="processes that render batches (0: one thread)")
    p.add_argument("--batch", type=int, default=Recipe.batch)
    p.add_argument("--chunks", type=int, default=Recipe.chunks)
    p.add_argument("--lr", type=float, default=Recipe.lr)
    p.add_argument("--warmup", type=int, default=Recipe.warmup)
    p.add_argument("--memory-distance", type=float, default=None,
                   help="farthest move of memory keys in training, latent frames (default: the native table)")
    p.add_argument("--copy-decision", type=float, default=Recipe.copy_decision,
                   help="weight of the copy gate's hard-decision cross-entropy (0: off)")
    p.add_argument("--seed", type=int, default=Recipe.seed)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--init", type=Path, default=None, help="start from these weights (safetensors)")
    p.add_argument("--warp", action="store_true", help="new model: add the pixel warp source (see the config)")
    p.add_argument("--hypotheses", type=int, default=None, help="new model: candidates per token")
    p.add_argument("--hard-copy", action="store_true", help="new model: hard copies at inference (and in self-context)")
    p.add_argument("--codebook", type=int, default=None, help="new model: a categorical output over this many codes")
    p.add_argument("--code-weight", type=float, default=Recipe.code_weight, help="weight of the codebook cross-entropy")
    p.add_argument("--head-only", action="store_true",
                   help="train the codebook head alone (with --depth-weight: the depth head alone)")
    p.add_argument("--clean-share", type=float, default=Recipe.clean_share,
                   help="share of chunks trained at t = 0 (a depth head's view of observed chunks)")
    p.add_argument("--depth-weight", type=float, default=Recipe.depth_weight,
                   help="> 0: add the depth head (a new model, or to --init's) and weigh its inverse-depth MSE so")
    p.add_argument("--export", type=Path, default=None, help="after training, write fp16 weights here")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    r = Recipe(seed=a.seed, steps=a.steps, batch=a.batch, chunks=a.chunks, lr=a.lr, warmup=a.warmup,
               copy_decision=a.copy_decision, memory_distance=a.memory_distance, code_weight=a.code_weight,
               head_only=a.head_only, depth_weight=a.depth_weight, clean_share=a.clean_share)
    cfg = model_config(a.out, a.init, warp=a.warp or None, hypotheses=a.hypotheses, hard_copy=a.hard_copy or None,
                       codebook=a.codebook, depth_head=True if a.depth_weight > 0 else None)
    if a.depth_weight > 0 and not cfg.depth_head:
        p.error(f"--depth-weight: the checkpoint in {a.out} has no depth head")
    if a.depth_weight > 0 and cfg.depth_kind != "linear":
        p.error("--depth-weight trains the linear depth head; the conv head trains with "
                "python3 -m engine.arena.depth_train")
    result = train(a.out, r, cfg,
                   a.device, a.save_every, a.init, a.quiet,
                   budget_s=None if a.minutes is None else 60.0 * a.minutes, workers=a.workers)
    if a.export:
        from engine.arena.weights import export_checkpoint
        export_checkpoint(a.out / "last.pt", a.export)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
