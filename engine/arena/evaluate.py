"""Does memory help? The arena model on held-out arenas, through the real session, store and tiers.

Owns the evaluation behind ``worldpager bench arena``: ``episodes`` held-out episodes (arena seeds
never drawn in training; glance away and back, spin, out and back, in turn; chunk 0 given, as in every
arena session), each run twice through ``engine.session.loop.Session`` from an action-CSV trajectory —
once with the retrieval memory (``--store prefetch``, int4, a small host pool and a spill directory, so
retrieved chunks come back through the disk tier) and once window-only (``--store window``). The
generated latent frames (before video encoding) are scored against the renderer's truth at the same
poses: PSNR and SSIM on the **revisit** frames (the camera back at a pose it held at least two chunks
earlier) and on all generated frames. Gains are paired per episode (mean, standard error, episodes
improved).
"""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.arena.data import TRAIN_ARENAS
from engine.arena.episodes import EVAL_KINDS, Episode, _segments_to_actions, revisit_frames, walk
from engine.arena.world import Arena
from engine.config import MemoryConfig, SessionConfig
from engine.quality.metrics import paired_gain, psnr, ssim

EVAL_ARENA_BASE = TRAIN_ARENAS + 1000        # held-out arenas: EVAL_ARENA_BASE + episode index
EVAL_CHUNKS = 16


def eval_segments(kind: str, rng: np.random.Generator) -> list[tuple[str, float, float, int]]:
    """An evaluation path of ``kind`` that returns to earlier poses within ``EVAL_CHUNKS`` chunks."""
    sign = float(rng.choice([-1, 1]))
    if kind == "glance":
        rate = float(rng.choice([0.2, 0.25, 0.3])) * sign
        away = int(rng.integers(6, 11)) * 4                       # 72..180 degrees at these rates
        return [("", 0.0, 0.0, 12), ("", 0.0, rate, away), ("", 0.0, 0.0, int(rng.integers(1, 4)) * 4),
                ("", 0.0, -rate, away), ("", 0.0, 0.0, 48)]
    if kind == "spin":
        return [("", 0.0, 0.0, 12), ("", 0.0, 0.3 * sign, 240)]     # 4.5 degrees a frame: a turn in 80
    if kind == "out_back":
        out = int(rng.integers(3, 7)) * 4
        return [("", 0.0, 0.0, 12), ("w", 0.0, 0.0, out), ("", 0.0, 0.3 * sign, 40), ("w", 0.0, 0.0, out),
                ("", 0.0, 0.3 * sign, 40), ("", 0.0, 0.0, 48)]
    raise ValueError(kind)


def eval_episode(index: int, frames: int) -> Episode:
    kind = EVAL_KINDS[index % len(EVAL_KINDS)]
    rng = np.random.default_rng([0xE7A1, index])
    seed = EVAL_ARENA_BASE + index
    keyboard, mouse = _segments_to_actions(eval_segments(kind, rng))
    pad = max(0, frames - len(keyboard))
    keyboard = np.concatenate([keyboard, np.zeros((pad, 4), np.float32)])[:frames]
    mouse = np.concatenate([mouse, np.zeros((pad, 2), np.float32)])[:frames]
    poses, clamped = walk(Arena.generate(seed), keyboard, mouse)
    return Episode(seed, kind, keyboard, mouse, poses, clamped)


def write_action_csv(path: Path, episode: Episode) -> None:
    """The episode as the project's raw-action CSV (one row per video frame)."""
    rows = ["frame,w,s,a,d,mouse_pitch,mouse_yaw"]
    for i, (k, m) in enumerate(zip(episode.keyboard, episode.mouse)):
        rows.append(f"{i},{int(k[0])},{int(k[1])},{int(k[2])},{int(k[3])},{m[0]:g},{m[1]:g}")
    path.write_text("\n".join(rows) + "\n")


@dataclass
class EpisodeScore:
    kind: str
    arena_seed: int
    revisit_psnr: float
    revisit_ssim: float
    all_psnr: float
    all_ssim: float
    revisit_frames: int
    hits: int = 0
    misses: int = 0
    disk_bytes_read: int = 0


def run_episode(episode: Episode, store: str, workdir: Path, weights: Path | None = None, kv_bits: int = 4,
                pool_slots: int = 4, chunks: int = EVAL_CHUNKS, **memory) -> tuple[torch.Tensor, object, dict]:
    """One session of ``episode``: the generated latent frames ``[F, 3, h, w]``, the pipeline, and totals."""
    from engine.session.loop import Session

    traj = workdir / f"episode-{episode.arena_seed}.csv"
    write_action_csv(traj, episode)
    spill = workdir / f"spill-{episode.arena_seed}-{store}"
    cfg = SessionConfig(model="arena", arena_seed=episode.arena_seed, arena_weights=weights, trajectory=traj,
                        look_around=0, out=workdir / f"{episode.arena_seed}-{store}.mp4", chunks=chunks, repeat="loop",
                        memory=dataclasses.replace(MemoryConfig(), store=store, kv_bits=kv_bits,
                                                   pool_slots=pool_slots, spill=spill, **memory)).validate()
    latents: list[torch.Tensor] = []
    totals = {"hits": 0, "misses": 0, "disk_bytes_read": 0}

    def on_chunk(record):
        for key in totals:
            totals[key] += int(record.get(key, 0))

    session = Session(cfg, on_chunk=on_chunk, on_output=lambda chunk, x0: latents.append(x0[0].float().cpu()))
    session.run()
    return torch.cat(latents), session.model, totals


def score(frames: torch.Tensor, pipeline) -> tuple[EpisodeScore, torch.Tensor]:
    """Scores of generated latent frames against the truth; chunk 0 (given) is excluded."""
    n = frames.shape[0]
    cam = pipeline.cam[:n]
    truth = torch.cat([pipeline.truth(c) for c in range(n // pipeline.cfg.frames_per_chunk)])
    revisit = torch.from_numpy(revisit_frames(cam[:, 2], cam[:, 3], cam[:, :2], pipeline.cfg.frames_per_chunk))
    generated = torch.arange(n) >= pipeline.cfg.frames_per_chunk
    p, s = psnr(frames, truth), ssim(frames, truth)
    rv = revisit & generated
    nan = float("nan")
    return EpisodeScore("", pipeline.arena.seed,
                        float(p[rv].mean()) if rv.any() else nan, float(s[rv].mean()) if rv.any() else nan,
                        float(p[generated].mean()), float(s[generated].mean()), int(rv.sum())), truth


def evaluate(episodes: int = 48, weights: Path | None = None, workdir: Path | None = None,
             chunks: int = EVAL_CHUNKS, on_episode=None) -> dict:
    """Memory vs window-only on ``episodes`` held-out episodes; per-episode scores and paired gains."""
    from engine.arena.weights import config_of, packaged_weights_path

    rows = []
    frames_total = config_of(weights or packaged_weights_path()).video_grid().frames_total(chunks)
    with tempfile.TemporaryDirectory(prefix="worldpager-arena-eval-", dir=workdir) as tmp:
        tmp = Path(tmp)
        for i in range(episodes):
            ep = eval_episode(i, frames_total)
            arms = {}
            for store in ("prefetch", "window"):
                frames, pipeline, totals = run_episode(ep, store, tmp, weights, chunks=chunks)
                sc, _ = score(frames, pipeline)
                sc.kind = ep.kind
                sc.hits, sc.misses, sc.disk_bytes_read = totals["hits"], totals["misses"], totals["disk_bytes_read"]
                arms[store] = sc
            rows.append(arms)
            if on_episode is not None:
                on_episode(i, arms)
    return summarise(rows)


def summarise(rows: list[dict]) -> dict:
    def mean(vals):
        vals = [v for v in vals if v == v]
        return float(np.mean(vals)) if vals else float("nan")

    out = {"episodes": len(rows), "kinds": {}}
    groups = {"all": rows, **{k: [r for r in rows if r["prefetch"].kind == k] for k in EVAL_KINDS}}
    for name, group in groups.items():
        scored = [r for r in group if r["prefetch"].revisit_frames > 0]
        g = {"episodes": len(group), "with_revisits": len(scored),
             "revisit_psnr_memory": mean([r["prefetch"].revisit_psnr for r in scored]),
             "revisit_psnr_window": mean([r["window"].revisit_psnr for r in scored]),
             "revisit_ssim_memory": mean([r["prefetch"].revisit_ssim for r in scored]),
             "revisit_ssim_window": mean([r["window"].revisit_ssim for r in scored]),
             "all_psnr_memory": mean([r["prefetch"].all_psnr for r in group]),
             "all_psnr_window": mean([r["window"].all_psnr for r in group]),
             "all_ssim_memory": mean([r["prefetch"].all_ssim for r in group]),
             **paired_gain([r["prefetch"].revisit_psnr for r in scored], [r["window"].revisit_psnr for r in scored])}
        out["kinds"][name] = g
    out["hits"] = int(sum(r["prefetch"].hits for r in rows))
    out["misses"] = int(sum(r["prefetch"].misses for r in rows))
    out["disk_bytes_read"] = int(sum(r["prefetch"].disk_bytes_read for r in rows))
    return out


def comparison_strip(index: int, out: Path, weights: Path | None = None, chunks: int = EVAL_CHUNKS,
                     columns: int = 8, workdir: Path | None = None) -> dict:
    """A PNG of one held-out episode: rows truth | with memory | window-only, ``columns`` latent frames
    spread over the generated chunks (revisit frames first), enlarged 2x, each row and column labelled
    (a column: its time of video, "(return)" at a revisit). Returns what it shows."""
    from engine.arena.weights import config_of, packaged_weights_path
    from engine.io.image import save_png
    from engine.io.labels import BAND, header, row_labels

    ep = eval_episode(index, config_of(weights or packaged_weights_path()).video_grid().frames_total(chunks))
    with tempfile.TemporaryDirectory(prefix="worldpager-arena-strip-", dir=workdir) as tmp:
        memory, pipeline, _ = run_episode(ep, "prefetch", Path(tmp), weights, chunks=chunks)
        window, _, _ = run_episode(ep, "window", Path(tmp), weights, chunks=chunks)
    sc, truth = score(memory, pipeline)
    cam = pipeline.cam[:len(memory)]
    revisit = revisit_frames(cam[:, 2], cam[:, 3], cam[:, :2], pipeline.cfg.frames_per_chunk)
    first = pipeline.cfg.frames_per_chunk
    picks = np.linspace(first, len(memory) - 1, columns).round().astype(int)
    rows = [torch.cat([frames[i] for i in picks], dim=-1) for frames in (truth, memory, window)]
    image = torch.cat(rows, dim=-2)                                              # [3, 3h, columns w]
    rgb = ((image.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0)
    rgb = rgb.repeat_interleave(2, 0).repeat_interleave(2, 1).contiguous().numpy()
    fps = pipeline.cfg.fps / pipeline.cfg.temporal                              # latent frames a second
    tops = [f"{i / fps:.1f} s" + (" (return)" if revisit[i] else "") for i in picks]
    rgb = np.concatenate([header([rgb.shape[1] // columns] * columns, tops), rgb], axis=0)
    left = row_labels([BAND] + [(rgb.shape[0] - BAND) // 3] * 3, ["video time", "truth", "memory", "window-only"], 100)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_png(out, np.ascontiguousarray(np.concatenate([left, rgb], axis=1)))
    return {"episode": index, "kind": ep.kind, "arena_seed": ep.arena_seed, "frames": picks.tolist(),
            "revisit": revisit[picks].tolist(), "psnr_memory": psnr(memory[picks], truth[picks]).tolist(),
            "psnr_window": psnr(window[picks], truth[picks]).tolist()}
