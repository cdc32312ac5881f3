"""The chunk loop of LingBot-World-Fast's official ``generate()``, and the shapes it derives.

Owns:

* ``RunShape`` — frame counts and token counts of a run: poses are cut to 4n+1, the requested frame
  count rounded down to 4n+1 and capped by them; latent frames (F-1)/4+1 rounded down to a multiple of
  the chunk size; the video length recomputed from them; cache rows = ``local_attn_size`` latent
  frames (the whole run when -1), sink rows = ``sink_size`` latent frames;
* ``camera_condition`` — poses and intrinsics to the control tensor (``engine.model.lingbot.camera``):
  resample the used poses at ``linspace(0, frames-1, lat_f)``, make them relative frame to frame and
  normalised, rays with intrinsics row 0 scaled to the pixel grid, rearranged per latent cell;
* ``image_mask`` — the 4 mask channels of y (1 on the start image's latent frame);
* ``denoise_chunk`` — per chunk: for every DMD step, velocity -> x0 (float64) -> re-noise to the next
  step (float32) unless last; then the clean pass at t = 0 whose only effect is to overwrite the chunk's
  cache rows with K/V of the clean latent; ``generate_latents`` runs every chunk.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from engine.errors import ConfigError, InputError
from engine.facts.layout import KVLayout
from engine.model.lingbot import camera
from engine.model.lingbot.cache import FastCaches
from engine.facts.lingbot_config import VAE_STRIDE, FastDiTConfig, LoopSettings
from engine.model.lingbot.dit import WanModelFast
from engine.model.lingbot.schedule import DMDSchedule

INTRINSICS_SIZE = (480, 832)    # (H, W) of the frame the official intrinsics files describe


@dataclass(frozen=True)
class RunShape:
    frame_num: int          # video frames whose poses are used (4n+1)
    lat_f: int              # latent frames generated (a multiple of the chunk size)
    lat_h: int
    lat_w: int
    chunk_frames: int       # latent frames per chunk
    frame_seqlen: int       # tokens per latent frame
    kv_size: int            # self-attention cache rows per layer
    sink_tokens: int

    @property
    def video_frames(self) -> int:
        return VAE_STRIDE[0] * (self.lat_f - 1) + 1

    @property
    def chunks(self) -> int:
        return self.lat_f // self.chunk_frames

    @property
    def chunk_tokens(self) -> int:
        return self.chunk_frames * self.frame_seqlen

    @property
    def pixel_size(self) -> tuple[int, int]:
        return self.lat_h * VAE_STRIDE[1], self.lat_w * VAE_STRIDE[2]


def kv_layout(cfg: FastDiTConfig, shape: RunShape) -> KVLayout:
    """One chunk's self-attention KV as the memory would store it (window: the cache's past frames)."""
    window = shape.kv_size // shape.frame_seqlen - shape.chunk_frames
    return KVLayout(layers=cfg.num_layers, tokens_per_frame=shape.frame_seqlen,
                    frames_per_chunk=shape.chunk_frames, heads=cfg.num_heads, head_dim=cfg.head_dim,
                    window_frames=max(window, 0))


def run_shape(frame_num: int, n_poses: int, lat_h: int, lat_w: int, cfg: FastDiTConfig,
              settings: LoopSettings) -> RunShape:
    st = VAE_STRIDE[0]
    poses_used = st * ((n_poses - 1) // st) + 1
    frames = min(st * ((frame_num - 1) // st) + 1, poses_used)
    lat_f = ((frames - 1) // st + 1) // settings.chunk_size * settings.chunk_size
    if frame_num < 1 or n_poses < 1 or lat_f < settings.chunk_size:
        raise InputError(f"{frame_num} frames with {n_poses} poses make no chunk of "
                         f"{settings.chunk_size} latent frames")
    _, ph, pw = cfg.patch_size
    if lat_h % ph or lat_w % pw:
        raise InputError(f"latent grid {lat_h}x{lat_w} is not a multiple of the patch {ph}x{pw}")
    seqlen = (lat_h // ph) * (lat_w // pw)
    window = lat_f if cfg.local_attn_size == -1 else cfg.local_attn_size
    sink = max(cfg.sink_size, 0)
    if window < sink + settings.chunk_size:
        raise ConfigError(f"a cache of {window} latent frames cannot hold the sink ({sink}) and a chunk "
                          f"({settings.chunk_size})")
    return RunShape(frames, lat_f, lat_h, lat_w, settings.chunk_size, seqlen, window * seqlen, sink * seqlen)


@dataclass
class CameraTensors:
    ks: torch.Tensor            # [lat_f, 4] intrinsics on the pixel grid
    interpolated: torch.Tensor  # [lat_f, 4, 4] poses at the latent frames
    relative: torch.Tensor      # [lat_f, 4, 4] frame-to-frame, translations normalised
    rays: torch.Tensor          # [lat_f, H, W, 6] Plücker (origin, direction)
    embedding: torch.Tensor     # [1, 6*64, lat_f, lat_h, lat_w] the model's control tensor


def camera_condition(poses: torch.Tensor, intrinsics: torch.Tensor, shape: RunShape) -> CameraTensors:
    """The ``cam`` control tensor from per-video-frame c2w poses [N, 4, 4] and intrinsics [N, 4]."""
    used = poses[:shape.frame_num]
    src = torch.arange(shape.frame_num, dtype=torch.float64)
    tgt = torch.linspace(0, shape.frame_num - 1, shape.lat_f, dtype=torch.float64)
    interpolated = camera.interpolate_poses(used, src, tgt)
    relative = camera.relative_poses(interpolated)
    height, width = shape.pixel_size
    ks = camera.scale_intrinsics(intrinsics[0], INTRINSICS_SIZE, (height, width)).expand(shape.lat_f, 4)
    rays = camera.plucker_rays(relative, ks, height, width)
    return CameraTensors(ks.contiguous(), interpolated, relative, rays,
                         camera.control_embedding(rays, VAE_STRIDE[1]))


def image_mask(shape: RunShape) -> torch.Tensor:
    """Mask channels of y [4, lat_f, lat_h, lat_w]: the first video frame (the start image) is known.

    Per video frame a 0/1 mask, the first frame repeated 4 times so that the frames fold into latent
    frames of 4; each latent frame's 4 video frames become its 4 channels."""
    st = VAE_STRIDE[0]
    per_frame = torch.zeros(shape.video_frames, shape.lat_h, shape.lat_w)
    per_frame[0] = 1
    folded = torch.cat([per_frame[:1].repeat(st, 1, 1), per_frame[1:]])     # [4 lat_f, h, w]
    return folded.reshape(shape.lat_f, st, shape.lat_h, shape.lat_w).transpose(0, 1)


class StepTrace(Protocol):
    def __call__(self, chunk: int, step: int, x_in: torch.Tensor, velocity: torch.Tensor,
                 x0: torch.Tensor | None) -> None: ...


NoiseSource = Callable[[int, int, torch.Tensor], torch.Tensor]
"""``(chunk, step, like) -> eps``: the fresh noise that re-noises x0 of ``step`` (shape of ``like``)."""


@dataclass
class ChunkConditioning:
    y: torch.Tensor          # [B, 20, F, h, w] mask + start-image latent slice of the chunk
    control: torch.Tensor    # [B, C*64, F, h, w] control slice of the chunk
    context: torch.Tensor    # [B, n, text_dim] text encoder output (unpadded)


def denoise_chunk(model: WanModelFast, schedule: DMDSchedule, caches: FastCaches, shape: RunShape,
                  chunk: int, noise: torch.Tensor, cond: ChunkConditioning, noise_source: NoiseSource,
                  trace: StepTrace | None = None) -> torch.Tensor:
    """The chunk's DMD steps and its clean pass; returns the clean latents [B, 16, F, h, w]."""
    current_start = chunk * shape.chunk_tokens
    batch = noise.shape[0]

    def forward(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return model(x, t.expand(batch), cond.context, cond.y, cond.control, caches, current_start,
                     shape.frame_seqlen)

    x, x0 = noise, noise
    for step in range(schedule.num_steps):
        velocity = forward(x, schedule.timesteps[step:step + 1])
        x0 = schedule.x0(x, velocity, step)
        if trace is not None:
            trace(chunk, step, x, velocity, x0)
        if step + 1 < schedule.num_steps:
            x = schedule.renoise(x0, step, noise_source(chunk, step, x0))
    velocity = forward(x0, torch.zeros(1, device=x0.device))       # the clean pass: a float t = 0
    if trace is not None:
        trace(chunk, schedule.num_steps, x0, velocity, None)
    return x0


def allocate_caches(cfg: FastDiTConfig, shape: RunShape, settings: LoopSettings, batch: int = 1,
                    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> FastCaches:
    return FastCaches.allocate(cfg.num_layers, batch, shape.kv_size, cfg.num_heads, cfg.head_dim,
                               shape.sink_tokens, settings.max_attention_size, dtype, device)


def generate_latents(model: WanModelFast, schedule: DMDSchedule, caches: FastCaches, shape: RunShape,
                     noise: torch.Tensor, y: torch.Tensor, control: torch.Tensor, context: torch.Tensor,
                     noise_source: NoiseSource, trace: StepTrace | None = None) -> torch.Tensor:
    """Every chunk in order: noise [B, 16, lat_f, h, w], y [B, 20, lat_f, h, w], control
    [B, C*64, lat_f, h, w] -> latents [B, 16, lat_f, h, w]."""
    out = []
    for chunk in range(shape.chunks):
        frames = slice(chunk * shape.chunk_frames, (chunk + 1) * shape.chunk_frames)
        cond = ChunkConditioning(y[:, :, frames], control[:, :, frames], context)
        out.append(denoise_chunk(model, schedule, caches, shape, chunk, noise[:, :, frames], cond,
                                 noise_source, trace))
    return torch.cat(out, dim=2)
