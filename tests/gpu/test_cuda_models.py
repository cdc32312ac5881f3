"""The seeded tiny and micro models on CUDA in bf16 against the CPU in float32, chunk by chunk (gpu)."""
from __future__ import annotations

import pytest
import torch

from engine.bench.device_models import PARITY_REL, run_chunks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name, chunks", [("micro", 4), ("tiny", 2)])
def test_bf16_on_cuda_follows_float32_on_the_cpu(name, chunks):
    ref = run_chunks(name, torch.device("cpu"), torch.float32, chunks)
    got = run_chunks(name, torch.device("cuda"), torch.bfloat16, chunks)
    for c, (g, r) in enumerate(zip(got["latents"], ref["latents"])):
        assert g.isfinite().all(), f"chunk {c}"
        assert (g - r).norm() / r.norm() <= PARITY_REL, f"chunk {c}"
    for g, r in zip(got["frames"], ref["frames"]):
        assert g.shape == r.shape
        assert (g - r).abs().mean() <= 0.05

