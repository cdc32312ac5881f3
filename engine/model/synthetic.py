"""A synthetic ``WorldModel`` for systems experiments: real KV bytes, no model math.

Owns the stand-in that lets every store mode run at MG2's real byte volumes on any machine: each chunk
writes K/V of the real shape (30 layers x 2640 tokens x 12 heads x 128, scaled by ``kv_scale`` through
the layer count; all from the model config's ``KVLayout``) into the attention context, then keeps the
compute device busy for the rest of ``chunk_ms`` (1200 ms by default: MG2's chunk time on an RTX 4090).
On a GPU it spins the device; on the CPU it sleeps, because while a GPU computes the host is free and
that is what the store's threads rely on. Frames are flat grey at 1/8 of the model's resolution (the
video path stays exercised).

Interface facts: the memory is keyed on the trajectory's poses; the horizon is MG2's (the keys are
MG2-shaped); ``rotate_time`` applies MG2's time rotation (the DiT RoPE of the config's head geometry)
for real, so ``--positions rerotate`` costs the device what it costs with MG2 — the keys are noise,
only the work is real. Built by ``engine.model.registry``.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from engine.config import ModelConfig
from engine.model.facts import horizon_chunk
from engine.model.kv_context import AttentionContext
from engine.model.rope import DiTRope

FRAME_DOWNSCALE = 8   # frames are this much smaller than the model's: the video path runs, cheaply


class SyntheticPipeline:
    """A model that writes MG2-shaped KV and spends a fixed time per chunk; satisfies ``WorldModel``."""

    name = "synthetic"
    weights = "synthetic (no weights)"

    def __init__(self, model_cfg: ModelConfig, poses: np.ndarray, chunk_ms: float, device: torch.device,
                 dtype: torch.dtype, seed: int = 0):
        self.cfg, self.chunk_s, self.device = model_cfg, chunk_ms / 1000.0, device
        self.poses = np.asarray(poses)                              # [T, 7] per video frame
        self.layout, self.grid = model_cfg.kv_layout(), model_cfg.video_grid()
        self.horizon_chunk: int | None = horizon_chunk(model_cfg)
        dit = model_cfg.dit
        self.rope = DiTRope(dit.head_dim, dit.rope_split, dit.rope_theta)
        gen = torch.Generator().manual_seed(seed)
        # One random base chunk, shifted per chunk: cheap to produce, distinct per chunk.
        lay = self.layout
        shape = (1, lay.tokens_per_chunk, lay.heads, lay.head_dim)   # [B, T, H, D]
        self.base = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)

    @property
    def frame_size(self) -> tuple[int, int]:
        return self.cfg.video_height // FRAME_DOWNSCALE, self.cfg.video_width // FRAME_DOWNSCALE

    def camera_poses(self) -> np.ndarray:
        return self.poses

    def prepare_context(self, ctx: AttentionContext) -> None:
        pass   # no per-layer state besides the self-attention KV

    def rotate_time(self, layer: int, keys: torch.Tensor, delta_frames: float) -> torch.Tensor:
        return self.rope.rotate_time(keys, delta_frames)

    def denoise(self, chunk: int, ctx: AttentionContext) -> torch.Tensor:
        start = time.perf_counter()
        offset = 0.001 * (chunk + 1)
        for layer, (k, v) in enumerate(ctx.current_kv()):
            k.copy_(self.base).add_(offset * (layer + 1))
            v.copy_(self.base).sub_(offset * (layer + 1))
        self._busy(self.chunk_s - (time.perf_counter() - start))
        return torch.empty(0)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {}    # every chunk is a function of its index

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        pass

    def _busy(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.device.type == "cuda":
            # Keep the device busy in short kernels until the wall-clock budget is used, so the
            # store's CUDA copies really overlap with device work.
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                torch.cuda._sleep(1_000_000)
                torch.cuda.synchronize(self.device)
        else:
            time.sleep(seconds)

    def decode(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        h, w = self.frame_size
        return torch.zeros(self.grid.frames_of_chunk(chunk), 3, h, w)
