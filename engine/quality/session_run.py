"""One arm on one path: a real ``engine.session.loop.Session`` of the arena model, scored as it runs.

Owns how a benchmark session is configured and scored. The path goes in as the project's action CSV;
with ``observe_frames`` its first video frames go in as an observed tour instead (``--observe``: an
action CSV of those frames, the world's rendered truth along them) and the rest as ``--trajectory``. The
base config is the product's (arena model, ``--store prefetch``, int4, a small host pool, a spill
directory in a temporary folder, no save points); the arm's overlay is applied with the preset merge.
Every generated chunk's latent frames (the model's output before video encoding) are scored against
the renderer's truth at the same poses as they arrive (PSNR per latent frame), so a 3000-chunk
session keeps only scalars. SSIM (float64: tens of ms a frame on a CPU) is left to the frames kept:
``keep=None`` keeps every frame and its truth (first-visit comparisons, videos and stills: the caller
scores the frames it needs); ``keep=n`` keeps the last latent frame of every n-th chunk and scores
its SSIM. Memory counters of every chunk (hits, misses, stale-set fallbacks, bytes read back from the
spill directory) are summed. The trace keeps the cameras the model used (the pipeline's ``cam``: x, z,
yaw, pitch of every latent frame, after wall clamping) and how many chunks the session's records flag
``observed``.
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.arena.episodes import Episode
from engine.arena.evaluate import write_action_csv
from engine.config import MemoryConfig, SessionConfig
from engine.quality.metrics import psnr, ssim
from engine.settings.overlay import replace_strict
from engine.quality.arms import POOL_SLOTS, Arm

COUNTERS = ("hits", "misses", "stale", "disk_bytes_read", "disk_bytes_written")


@dataclass
class Trace:
    """Scores of one session's latent frames (chunk 0, the given view, included)."""

    psnr: np.ndarray                                 # [F] dB against the truth
    frames: torch.Tensor | None = None               # [F, 3, h, w] generated latent frames (keep=None)
    truth: torch.Tensor | None = None                # [F, 3, h, w] rendered truth (keep=None)
    ssim_frames: np.ndarray | None = None            # latent frames whose SSIM was scored (keep=n)
    ssim: np.ndarray | None = None                   # their SSIM against the truth
    totals: dict = field(default_factory=dict)
    frames_per_chunk: int = 3                        # latent frames a chunk (the model's layout)
    cam: np.ndarray | None = None                    # [F, 4] the pipeline's cameras (x, z, yaw, pitch)
    observed_chunks: int = 1                         # chunks flagged observed (chunk 0 is always given)


def session_config(arm: Arm, episode: Episode, chunks: int, workdir: Path, weights: Path | None = None,
                   pool_slots: int = POOL_SLOTS, observe_frames: int = 0) -> SessionConfig:
    trajectory, tour = workdir / "path.csv", None
    if observe_frames:
        tour = workdir / "tour.csv"
        write_action_csv(tour, dataclasses.replace(episode, keyboard=episode.keyboard[:observe_frames],
                                                   mouse=episode.mouse[:observe_frames]))
        episode = dataclasses.replace(episode, keyboard=episode.keyboard[observe_frames:],
                                      mouse=episode.mouse[observe_frames:])
    write_action_csv(trajectory, episode)
    memory = dataclasses.replace(MemoryConfig(), store="prefetch", kv_bits=4, retrieve_k=3, sink=False,
                                 pool_slots=pool_slots, spill=workdir / "spill")
    base = SessionConfig(model="arena", arena_seed=episode.arena_seed, arena_weights=weights,
                         trajectory=trajectory, observe=tour, look_around=0, repeat="loop", out=workdir / f"{arm.name}.mp4",
                         chunks=chunks, save_every=0, positions="rerotate", memory=memory)
    return replace_strict(base, arm.overlay).validate()


def run_arm(arm: Arm, episode: Episode, chunks: int, workdir: Path | None = None, keep: int | None = None,
            weights: Path | None = None, pool_slots: int = POOL_SLOTS, observe_frames: int = 0) -> Trace:
    """Run ``arm`` on ``episode`` for ``chunks`` chunks in a temporary folder under ``workdir`` (its first
    ``observe_frames`` video frames observed)."""
    from engine.session.loop import Session

    scores: list[torch.Tensor] = []
    kept: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    totals = dict.fromkeys(COUNTERS, 0)
    observed = []
    with tempfile.TemporaryDirectory(prefix=f"worldpager-quality-{arm.name}-", dir=workdir) as tmp:
        cfg = session_config(arm, episode, chunks, Path(tmp), weights, pool_slots, observe_frames)

        def on_output(chunk: int, latents: torch.Tensor) -> None:
            x0 = latents[0].float().cpu()
            truth = session.model.truth(chunk)
            scores.append(psnr(x0, truth))
            if keep is None:
                kept.append((chunk, x0.clone(), truth))
            elif chunk % keep == 0:
                kept.append((chunk, x0[-1:].clone(), truth[-1:]))

        def on_chunk(record: dict) -> None:
            for key in COUNTERS:
                totals[key] += int(record.get(key, 0))
            totals["stall_ms"] = totals.get("stall_ms", 0.0) + float(record.get("stall_ms", 0.0))
            if "first_choice" in record:   # --spill-max: was the first choice still kept?
                totals["retrievals"] = totals.get("retrievals", 0) + 1
                totals["first_choice"] = totals.get("first_choice", 0) + int(record["first_choice"])
            if "disk_alloc_bytes" in record:
                totals["disk_alloc_max"] = max(totals.get("disk_alloc_max", 0), int(record["disk_alloc_bytes"]))
            if record.get("observed"):
                observed.append(int(record["chunk"]))

        session = Session(cfg, on_chunk=on_chunk, on_output=on_output)
        session.load()
        frames_per_chunk = session.model.layout.frames_per_chunk
        cam = np.array(session.model.cam[:chunks * frames_per_chunk])
        session.run()
        shutil.rmtree(Path(tmp) / "spill", ignore_errors=True)   # a long bf16 run spills gigabytes
    assert observed == list(range(len(observed))), observed        # the observed chunks come first
    trace = Trace(torch.cat(scores).numpy(), totals=totals, frames_per_chunk=frames_per_chunk, cam=cam,
                  observed_chunks=max(1, len(observed)))
    frames, truth = torch.cat([f for _, f, _ in kept]), torch.cat([t for _, _, t in kept])
    if keep is None:
        trace.frames, trace.truth = frames, truth
    else:
        trace.ssim_frames = np.array([(c + 1) * frames_per_chunk - 1 for c, _, _ in kept])
        trace.ssim = torch.cat([ssim(frames[i:i + 64], truth[i:i + 64]) for i in range(0, len(frames), 64)]).numpy()
    return trace
