"""One walking session scored on its exact latent frames: a ``bench quality --walk`` row.

Owns what is measured on a finished session's files (its MP4 and its log, nothing from the model's
memory). The arena model makes one latent frame per ``temporal`` (4) video frames; video frame
``temporal * f`` is latent frame f decoded, the three between are the decoder's linear blends of two
latent frames. Only the exact ones are scored here (house rule 14: what the model made, not the
decoder's blends; ``bench quality --long`` scores every decoded frame). Each is decoded from the MP4
(PyAV), reduced to the model's size by block means (``engine.quality.long_score.reduce_frame``) and
compared with the arena's exact render at the latent frame's camera (``engine.arena.session_camera``,
as ``worldpager arena truth`` renders it, rounded to uint8 as the session's decoder rounds).

Per bin of ``bin_s`` seconds of video (a minute) and per class of ``engine.quality.walk_classes``:
frame count, sums of PSNR and SSIM against the truth, of detail (Laplacian variance of the luminance,
``long_score.detail``) and of the truth's (sharpness = one sum over the other), and, for frames with a
``match`` (a near frame's earlier view), the PSNR against the session's own frame there
(self-consistency: ``first_frames``, ``psnr_first``) beside the truth's own PSNR between the two poses
(``psnr_first_truth``: how alike the two views are; the frames are within 0.5 units and 10 degrees,
not the same pose). Per bin too, the memory counters of the chunks that start in it (``hits``,
``misses``: retrievals the store could not serve in time, ``stale``: slots kept for lack of a hit).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.arena.data import latent_camera, render_latents
from engine.arena.session_camera import session_camera
from engine.arena.visible import visible_faces
from engine.arena.world import Arena
from engine.quality.metrics import psnr, ssim
from engine.quality.long_score import _bins, decoded_frames, detail, from_uint8, reduce_frame, to_uint8
from engine.quality.walk_classes import CLASSES, classify_walk

SUMS = ("frames", "psnr", "ssim", "detail", "detail_truth", "first_frames", "psnr_first", "psnr_first_truth")
COUNTERS = ("hits", "misses", "stale")
BATCH = 240


class WalkTruth:
    """The latent frames' cameras, truth, surfaces and classes of one logged session."""

    def __init__(self, log: Path, observed_chunks: int):
        camera = session_camera(log)
        m = self.model = camera.model
        self.grid, self.fps, self.video_frames = camera.spec.grid, camera.spec.grid.fps, len(camera.poses)
        self.poses = camera.poses
        latent = (len(camera.poses) - 1) // m.temporal + 1
        self.cam = latent_camera(camera.poses, m, latent)                                   # [F, 4]
        arena = Arena.generate(camera.arena_seed)
        self.frames = torch.cat([to_uint8(render_latents(arena, self.cam[i:i + BATCH], m))
                                 for i in range(0, len(self.cam), BATCH)])                 # [F, 3, h, w] uint8
        self.faces = visible_faces(arena, self.cam)
        self.masks, self.share, self.match = classify_walk(self.cam, self.faces, m.frames_per_chunk,
                                                           observed_chunks)

    def same_path(self, other: "WalkTruth") -> bool:
        return self.poses.shape == other.poses.shape and bool(np.abs(self.poses - other.poses).max() < 1e-9)


def latent_frames(video: Path, temporal: int, upscale: int, video_frames: int) -> torch.Tensor:
    """The MP4's exact latent frames (every ``temporal``-th video frame) at the model's size."""
    kept, count = [], 0
    for i, rgb in enumerate(decoded_frames(video)):
        if i % temporal == 0 and i < video_frames:
            kept.append(reduce_frame(rgb, upscale))
        count += 1
    if count != video_frames:
        raise AssertionError(f"{video}: {count} decoded frames, its log records {video_frames}")
    return torch.stack(kept)


def _chunk_counters(log: Path, grid, bins: np.ndarray, n_bins: int) -> list[dict]:
    from engine.report.read import read_session

    out = [dict.fromkeys(COUNTERS, 0) for _ in range(n_bins)]
    for r in read_session(log).chunks:
        c = int(r["chunk"])
        first = 0 if c == 0 else grid.first_frames + (c - 1) * grid.frames_per_chunk
        b = int(bins[min(first, len(bins) - 1)])
        for k in COUNTERS:
            out[b][k] += int(r.get(k, 0))
    return out


def score_walk(log: Path, video: Path, observed_chunks: int, bin_s: float = 60.0,
               truth: WalkTruth | None = None) -> tuple[dict, WalkTruth]:
    """The scores of the session that wrote ``log`` and ``video`` (see the module docstring) and its truth."""
    truth = truth or WalkTruth(log, observed_chunks)
    m = truth.model
    made = latent_frames(video, m.temporal, m.upscale, truth.video_frames)
    n = len(truth.cam)
    assert len(made) == n, (len(made), n)
    video_bins = _bins(truth.video_frames, truth.fps, bin_s)
    n_bins = int(video_bins.max()) + 1
    frame_bin = video_bins[np.arange(n) * m.temporal]
    t = from_uint8(truth.frames)
    values = {"psnr": psnr(made, t).double().numpy(),
              "ssim": torch.cat([ssim(made[i:i + 64], t[i:i + 64]) for i in range(0, n, 64)]).double().numpy(),
              "detail": detail(made).double().numpy(), "detail_truth": detail(t).double().numpy()}
    has = truth.match >= 0
    first = np.maximum(truth.match, 0)
    values["psnr_first"] = np.where(has, psnr(made, made[torch.from_numpy(first)]).double().numpy(), 0.0)
    values["psnr_first_truth"] = np.where(has, psnr(t, t[torch.from_numpy(first)]).double().numpy(), 0.0)
    bins = [{cls: dict.fromkeys(SUMS, 0.0) for cls in CLASSES} for _ in range(n_bins)]
    for cls in CLASSES:
        for f in np.flatnonzero(truth.masks[cls]):
            e = bins[frame_bin[f]][cls]
            e["frames"] += 1
            for key in ("psnr", "ssim", "detail", "detail_truth"):
                e[key] += float(values[key][f])
            if has[f]:
                e["first_frames"] += 1
                e["psnr_first"] += float(values["psnr_first"][f])
                e["psnr_first_truth"] += float(values["psnr_first_truth"][f])
    for b in bins:
        for e in b.values():
            e["frames"], e["first_frames"] = int(e["frames"]), int(e["first_frames"])
    counters = _chunk_counters(log, truth.grid, video_bins, n_bins)
    rows = [{"classes": b, **c} for b, c in zip(bins, counters)]
    return {"frames": truth.video_frames, "latent_frames": n, "fps": truth.fps, "bin_s": bin_s,
            "observed_chunks": observed_chunks, "bins": rows,
            **{k: sum(c[k] for c in counters) for k in COUNTERS}}, truth
