"""The arena model in bf16, what a session on CUDA runs it in (``resolve_device``), here on the CPU:
it runs, and stays close to float32 (the ray geometry and time features are computed in float32)."""
from __future__ import annotations

import torch

from engine.bench.device_models import run_chunks


def test_arena_chunks_in_bf16_follow_float32():
    bf16 = run_chunks("arena", torch.device("cpu"), torch.bfloat16, 3)
    fp32 = run_chunks("arena", torch.device("cpu"), torch.float32, 3)
    for got, want in zip(bf16["latents"], fp32["latents"]):
        assert got.isfinite().all()
        assert (got - want).norm() / want.norm() < 0.05
