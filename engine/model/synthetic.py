"""A synthetic chunk generator for systems experiments: real KV bytes, no model math.

Owns the stand-in that lets every store mode run at MG2's real byte volumes on any machine: each chunk
writes K/V of the real shape (30 layers x 2640 tokens x 12 heads x 128, scaled by ``kv_scale`` through
the layer count) into the attention context, then keeps the compute device busy for the rest of
``chunk_ms`` (1200 ms by default: MG2's chunk time on an RTX 4090). On a GPU it spins the device; on
the CPU it sleeps, because while a GPU computes the host is free and that is what the store's threads
rely on. Frames are flat grey at 1/8 of the model's resolution (the video path stays exercised).
"""
from __future__ import annotations

import time

import torch

from engine.config import ModelConfig
from engine.model.kv_context import AttentionContext

class SyntheticPipeline:
    def __init__(self, model_cfg: ModelConfig, chunk_ms: float, device: torch.device,
                 dtype: torch.dtype, seed: int = 0):
        self.cfg, self.chunk_s, self.device = model_cfg, chunk_ms / 1000.0, device
        dit = model_cfg.dit
        gen = torch.Generator().manual_seed(seed)
        # One random base chunk, shifted per chunk: cheap to produce, distinct per chunk.
        shape = (1, model_cfg.tokens_per_chunk, dit.num_heads, dit.head_dim)   # [B, T, H, D]
        self.base = torch.randn(shape, generator=gen).to(device=device, dtype=dtype)

    @property
    def frame_size(self) -> tuple[int, int]:
        return self.cfg.video_height // 8, self.cfg.video_width // 8

    def prepare_context(self, ctx: AttentionContext) -> None:
        pass

    def denoise(self, chunk: int, ctx: AttentionContext) -> torch.Tensor:
        start = time.perf_counter()
        offset = 0.001 * (chunk + 1)
        for layer, (k, v) in enumerate(ctx.current_kv()):
            k.copy_(self.base).add_(offset * (layer + 1))
            v.copy_(self.base).sub_(offset * (layer + 1))
        self._busy(self.chunk_s - (time.perf_counter() - start))
        return torch.empty(0)

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
        frames = self.cfg.video_frames_of_chunk(chunk)
        h, w = self.frame_size
        return torch.zeros(frames, 3, h, w)
