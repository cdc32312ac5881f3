"""One long session scored from its decoded MP4 against the renderer's truth: a ``bench quality --long`` row.

Owns what is measured on a finished session's files (its MP4 and its log, nothing from the model's
memory), per bin of ``bin_s`` seconds of video (a minute by default):

* **Frames.** Every video frame the MP4 holds is decoded (PyAV) and reduced to the model's size by the
  mean of each ``upscale x upscale`` block (the exact inverse of the session's pixel repetition, up to
  the codec's error). Its truth is the arena's exact render at the pose the session used for that
  frame (``engine.arena.session_camera``, as ``worldpager arena truth`` renders it), rounded to uint8
  as the session's decoder rounds. A frame between two latent frames is scored against its own pose's
  render (the decoder's blend counts as error). Only frames of generated chunks are scored.
* **All generated frames.** PSNR and SSIM against the truth, and **detail**: the variance of the
  Laplacian of the luminance (3 x 3, valid region), summed beside the truth's, so that a bin's
  **sharpness ratio** is ``sum detail / sum detail of the truth`` (the share of the truth's fine
  detail the frames hold; a blurred average scores near 0, the truth 1). The same for the first
  ``EARLY_S`` seconds of generation and for the rest (``early``, ``late``), and the rest split by
  where the camera stands (``late_stood``: within ``STOOD_RADIUS`` of the camera of a latent frame of
  an earlier chunk, observed or generated, so memory may hold that place's view; ``late_new``: a
  place the camera has not stood at before, whose frames can only be the model's invention).
* **Returns** (``engine.quality.revisits`` on the latent frames: video frame ``temporal * f`` is latent
  frame f's exact view). Returns to **observed** views: PSNR and SSIM against the truth. Returns to
  **generated** views: against the truth; against the same session's frame at the first visit of
  that pose (self-consistency); and, as its control, against an earlier generated frame of a
  *different* view (``control_frame``: a camera at least ``CONTROL_YAW`` degrees or ``CONTROL_DIST``
  units away, the nearest in time to the first visit), which says how much of the self-consistency
  is only the world's shared colours.

Every figure is a sum with its frame count, per bin, so rows pool over frames across episodes
(``engine.quality.long_summary``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.arena.data import latent_camera, render_latents
from engine.arena.session_camera import session_camera
from engine.arena.world import Arena
from engine.geometry import euler_from_quat
from engine.quality.metrics import psnr, ssim
from engine.quality.revisits import MIN_GAP_CHUNKS, classify

EARLY_S = 3.0               # seconds of generation counted as "early" (the rest is "late")
STOOD_RADIUS = 0.15         # world units: a camera this close to an earlier one stands where it has stood
CONTROL_YAW = 45.0          # degrees: a control view differs from the return's by at least this ...
CONTROL_DIST = 1.5          # ... or by this many world units
BATCH = 240                 # video frames scored at a time
SUMS = ("frames", "psnr", "ssim", "detail", "detail_truth")
OBSERVED_SUMS = ("frames", "psnr", "ssim")
GENERATED_SUMS = ("frames", "psnr", "ssim", "psnr_first", "control_frames", "psnr_control")


# ---- pixels -------------------------------------------------------------------------------------------

def reduce_frame(rgb: np.ndarray, upscale: int) -> torch.Tensor:
    """A decoded uint8 frame ``[H*u, W*u, 3]`` -> ``[3, H, W]`` float in [-1, 1] (block means)."""
    x = torch.from_numpy(rgb).permute(2, 0, 1).float()[None]
    return (F.avg_pool2d(x, upscale)[0] / 127.5) - 1.0


def to_uint8(frames: np.ndarray) -> torch.Tensor:
    """Truth ``[T, 3, H, W]`` in [-1, 1] rounded to uint8 as the session's decoder rounds."""
    return ((torch.from_numpy(frames).clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def from_uint8(frames: torch.Tensor) -> torch.Tensor:
    return frames.float() / 127.5 - 1.0


_LAPLACE = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]).view(1, 1, 3, 3)
_LUMA = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)


def detail(frames: torch.Tensor) -> torch.Tensor:
    """Per frame: variance of the Laplacian of the luminance (0-255 scale) of ``[T, 3, H, W]`` in [-1, 1]."""
    gray = ((frames.float() + 1) * 127.5 * _LUMA).sum(1, keepdim=True)
    return F.conv2d(gray, _LAPLACE).flatten(1).var(1)


def decoded_frames(video: Path):
    """The MP4's frames, decoded, as uint8 RGB arrays."""
    import av

    with av.open(str(video)) as container:
        for frame in container.decode(video=0):
            yield frame.to_ndarray(format="rgb24")


# ---- the truth and the cameras --------------------------------------------------------------------------

class SessionTruth:
    """The truth of one logged session at the model's size, and the latent frames' cameras."""

    def __init__(self, log: Path):
        camera = session_camera(log)
        m = camera.model
        self.model, self.poses, self.fps = m, camera.poses, camera.spec.grid.fps
        self.grid = camera.spec.grid
        yaw, pitch, _ = euler_from_quat(camera.poses[:, 3:])
        cam = np.stack([camera.poses[:, 0], camera.poses[:, 2], yaw, pitch], axis=1)
        arena = Arena.generate(camera.arena_seed)
        self.frames = torch.cat([to_uint8(render_latents(arena, cam[i:i + BATCH], m))
                                 for i in range(0, len(cam), BATCH)])                         # [T, 3, h, w] uint8
        latent = (len(camera.poses) - 1) // m.temporal + 1
        self.latent_cam = latent_camera(camera.poses, m, latent)                                  # [F, 4]

    def same_path(self, other: "SessionTruth") -> bool:
        return self.poses.shape == other.poses.shape and bool(np.abs(self.poses - other.poses).max() < 1e-9)

    def stood_before(self, radius: float = STOOD_RADIUS) -> np.ndarray:
        """Per video frame: whether the camera stands within ``radius`` (x, z) of the camera of a latent
        frame of an earlier chunk."""
        chunk = self.chunk_of_frame()
        fpc = self.model.frames_per_chunk
        latent_chunk = np.arange(len(self.latent_cam)) // fpc
        pos = self.poses[:, [0, 2]]
        out = np.zeros(len(pos), dtype=bool)
        for c in np.unique(chunk):
            earlier = self.latent_cam[latent_chunk < c, :2]
            if len(earlier):
                rows = chunk == c
                d = np.hypot(pos[rows, None, 0] - earlier[None, :, 0], pos[rows, None, 1] - earlier[None, :, 1])
                out[rows] = d.min(1) <= radius
        return out

    def chunk_of_frame(self) -> np.ndarray:
        """The chunk of every video frame (``first_frames`` in chunk 0, ``frames_per_chunk`` after)."""
        v = np.arange(len(self.poses))
        g = self.grid
        return np.where(v < g.first_frames, 0, 1 + (v - g.first_frames) // g.frames_per_chunk)


# ---- the scores of one session ---------------------------------------------------------------------------

def control_frame(cam: np.ndarray, f: int, first: int, candidates: np.ndarray) -> int:
    """Of ``candidates`` (latent frames), the one nearest in time to ``first`` whose camera is a different
    view from frame ``f``'s (-1 when there is none)."""
    c = cam[candidates]
    dyaw = np.abs((c[:, 2] - cam[f, 2] + 180.0) % 360.0 - 180.0)
    far = np.hypot(c[:, 0] - cam[f, 0], c[:, 1] - cam[f, 1])
    ok = candidates[(dyaw >= CONTROL_YAW) | (far >= CONTROL_DIST)]
    return int(ok[np.argmin(np.abs(ok - first))]) if len(ok) else -1


def _bins(n_frames: int, fps: int, bin_s: float) -> np.ndarray:
    """The bin of every video frame; a last partial bin joins the one before it."""
    b = (np.arange(n_frames) / (fps * bin_s)).astype(np.int64)
    full = max(1, int(n_frames // (fps * bin_s)))
    return np.minimum(b, full - 1)


def _empty(keys) -> dict:
    return {k: 0 if k.endswith("frames") else 0.0 for k in keys}


def score_session(log: Path, video: Path, observed_chunks: int, bin_s: float = 60.0,
                  truth: SessionTruth | None = None) -> tuple[dict, SessionTruth]:
    """The row of the session that wrote ``log`` and ``video`` (see the module docstring) and its truth."""
    truth = truth or SessionTruth(log)
    m, fps = truth.model, truth.fps
    n = len(truth.poses)
    chunk = truth.chunk_of_frame()
    bins = _bins(n, fps, bin_s)
    n_bins = int(bins.max()) + 1
    generated = chunk >= observed_chunks
    t_gen0 = np.flatnonzero(generated)[0] / fps if generated.any() else 0.0
    early = generated & (np.arange(n) / fps < t_gen0 + EARLY_S)
    stood = truth.stood_before()
    per_bin = [_empty(SUMS) for _ in range(n_bins)]
    phases = {"early": _empty(SUMS), "late": _empty(SUMS), "late_stood": _empty(SUMS), "late_new": _empty(SUMS)}
    latent = torch.zeros(len(truth.latent_cam), 3, m.height, m.width)
    count = 0
    pending: list[torch.Tensor] = []

    def flush(start: int) -> None:
        x = torch.stack(pending)
        idx = np.arange(start, start + len(x))
        keep = idx % m.temporal == 0
        latent[torch.from_numpy(idx[keep] // m.temporal)] = x[torch.from_numpy(keep)]
        sel = generated[idx]
        if not sel.any():
            return
        g, t = x[torch.from_numpy(sel)], from_uint8(truth.frames[torch.from_numpy(idx[sel])])
        values = {"psnr": psnr(g, t).double(), "ssim": ssim(g, t).double(), "detail": detail(g).double(),
                  "detail_truth": detail(t).double()}
        for j, v in enumerate(idx[sel]):
            targets = [per_bin[bins[v]], phases["early" if early[v] else "late"]]
            if not early[v]:
                targets.append(phases["late_stood" if stood[v] else "late_new"])
            for target in targets:
                target["frames"] += 1
                for key, val in values.items():
                    target[key] += float(val[j])

    for rgb in decoded_frames(video):
        if count < n:
            pending.append(reduce_frame(rgb, m.upscale))
        count += 1
        if len(pending) == BATCH:
            flush(count - BATCH)
            pending = []
    if pending:
        flush(min(count, n) - len(pending))
    if count != n:
        raise AssertionError(f"{video}: {count} decoded frames, its log records {n}")
    classes = _returns(truth, latent, observed_chunks, bins, n_bins)
    for b in range(n_bins):
        per_bin[b].update(classes[b])
    return {"frames": n, "fps": fps, "bin_s": bin_s, "observed_chunks": observed_chunks,
            "generated_frames": int(generated.sum()), "bins": per_bin, **phases}, truth


def _returns(truth: SessionTruth, latent: torch.Tensor, observed_chunks: int, bins: np.ndarray,
             n_bins: int) -> list[dict]:
    """Per bin: sums over the returns to observed views and to generated views (latent frames)."""
    m = truth.model
    cam = truth.latent_cam
    rv = classify(cam, m.frames_per_chunk, observed_chunks)
    truth_latent = from_uint8(truth.frames[::m.temporal][:len(cam)])
    out = [{"observed": _empty(OBSERVED_SUMS), "generated": _empty(GENERATED_SUMS)} for _ in range(n_bins)]
    frame_bin = bins[::m.temporal][:len(cam)]
    obs = np.flatnonzero(rv.observed)
    if len(obs):
        i = torch.from_numpy(obs)
        p, s = psnr(latent[i], truth_latent[i]), ssim(latent[i], truth_latent[i])
        for j, f in enumerate(obs):
            e = out[frame_bin[f]]["observed"]
            e["frames"] += 1
            e["psnr"] += float(p[j])
            e["ssim"] += float(s[j])
    gen = np.flatnonzero(rv.generated)
    if len(gen):
        chunk = np.arange(len(cam)) // m.frames_per_chunk
        made = np.flatnonzero(chunk >= observed_chunks)
        controls = np.array([control_frame(cam, f, rv.first[f], made[chunk[made] <= chunk[f] - MIN_GAP_CHUNKS])
                             for f in gen])
        i = torch.from_numpy(gen)
        p, s = psnr(latent[i], truth_latent[i]), ssim(latent[i], truth_latent[i])
        pf = psnr(latent[i], latent[torch.from_numpy(rv.first[gen])])
        pc = psnr(latent[i], latent[torch.from_numpy(np.maximum(controls, 0))])
        for j, f in enumerate(gen):
            e = out[frame_bin[f]]["generated"]
            e["frames"] += 1
            e["psnr"] += float(p[j])
            e["ssim"] += float(s[j])
            e["psnr_first"] += float(pf[j])
            if controls[j] >= 0:
                e["control_frames"] += 1
                e["psnr_control"] += float(pc[j])
    return out
