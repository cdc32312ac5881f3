"""Pinned host pool <-> device moves through the CUDA copier (streams and events), and the full-size
MG2 chunk block through the Triton kernels against the reference (gpu)."""
from __future__ import annotations

import threading

import pytest
import torch

from engine.config import model_config
from engine.kernels import ops
from engine.facts.kv_format import ChunkFormat
from engine.memory.host_pool import HostPool
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into
from engine.memory.transfer import CudaCopier

pytestmark = pytest.mark.gpu


def chunk_kv(name: str, seed: int) -> tuple[ChunkFormat, list[tuple[torch.Tensor, torch.Tensor]]]:
    fmt = ChunkFormat.from_layout(model_config(name).kv_layout(), bits=4)
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (1, fmt.tokens, fmt.heads, fmt.head_dim)        # [B, T, H, D] per layer
    kv = [(torch.randn(shape, generator=g, device="cuda").bfloat16(),
           torch.randn(shape, generator=g, device="cuda").bfloat16() * 3) for _ in range(fmt.layers)]
    return fmt, kv


def test_store_to_the_pinned_pool_and_stage_back_on_a_worker_thread():
    fmt, kv = chunk_kv("tiny", 0)
    pool = HostPool(2, fmt.slot_bytes)
    assert pool.pinned
    try:
        copier = CudaCopier(torch.device("cuda"), fmt.slot_bytes)
        torch.cuda._sleep(50_000_000)                       # the compute stream is busy meanwhile
        copier.store(kv, fmt, pool.slot(1)).synchronize()
        for k, v in kv:                                     # the caller overwrites its KV at once
            k.fill_(float("nan"))
            v.fill_(float("nan"))
        fmt2, expected_kv = chunk_kv("tiny", 0)
        block = torch.empty(fmt.slot_bytes, dtype=torch.uint8, device="cuda")
        quantize_chunk_into(expected_kv, fmt2, block)
        torch.cuda.synchronize()
        assert torch.equal(pool.slot(1)[:fmt.nbytes], block[:fmt.nbytes].cpu())
        out = [(torch.empty_like(k), torch.empty_like(v)) for k, v in expected_kv]
        worker = threading.Thread(target=copier.stage, args=(pool.slot(1), fmt, out))
        worker.start()
        worker.join(timeout=60)
        assert not worker.is_alive()
        want = [(torch.empty_like(k), torch.empty_like(v)) for k, v in expected_kv]
        dequantize_chunk_into(block, fmt, want)
        torch.cuda.synchronize()
        for (k, v), (wk, wv) in zip(out, want):
            assert torch.equal(k, wk) and torch.equal(v, wv)
    finally:
        pool.close()


def test_full_size_mg2_block_triton_equals_reference():
    fmt, kv = chunk_kv("mg2-universal", 1)
    blocks = {}
    for backend in ("reference", "triton"):
        with ops.use_backend(backend):
            blocks[backend] = torch.empty(fmt.slot_bytes, dtype=torch.uint8, device="cuda")
            quantize_chunk_into(kv, fmt, blocks[backend])
    assert torch.equal(blocks["reference"], blocks["triton"])
