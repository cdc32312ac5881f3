"""Triton kernels vs the reference: on CPU under TRITON_INTERPRET=1 (subprocess), and on CUDA (gpu)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.config import model_config
from engine.kernels import ops
from engine.facts.kv_format import ChunkFormat
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into

from ._bounds import hard_input, ulp_distance

pytest.importorskip("triton")

SCRIPT = Path(__file__).with_name("_interpret_parity.py")


def test_interpreted_triton_matches_reference_bit_for_bit():
    """Codes, scales, zeros and dequantised values for bits 2/4/8, fp32/bf16/fp16 in and out, edge
    inputs (constant, tiny-range, tie-heavy, out-of-fp16-range, subnormal-scale channels), odd token
    counts; plus one tiny-model chunk block."""
    env = dict(os.environ, TRITON_INTERPRET="1", WORLDPAGER_KERNELS="auto")
    run = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=300, cwd=SCRIPT.parents[2])
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["interpreted"] and result["cases"] == 10
    assert result["failures"] == []


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_cuda_triton_matches_reference(bits):
    """One MG2-sized layer (T = 2640, C = 1536) on the GPU: codes exact, dequant within 1 ulp."""
    mg2 = model_config("mg2-universal")
    t, c = mg2.tokens_per_chunk, mg2.dit.dim
    x = hard_input(t, c, torch.bfloat16, seed=bits).cuda()
    res = {}
    for backend in ("reference", "triton"):
        with ops.use_backend(backend):
            kq = ops.quantize_keys(x, bits)
            vq = ops.quantize_values(x, bits, 64)
            ko = ops.dequantize_keys(*kq, bits, torch.empty(t, c, dtype=torch.bfloat16, device="cuda"))
            vo = ops.dequantize_values(*vq, bits, 64, torch.empty(t, c, dtype=torch.bfloat16, device="cuda"))
        res[backend] = (kq, vq, ko, vo)
    ref, tri = res["reference"], res["triton"]
    for a, b in zip(ref[0] + ref[1], tri[0] + tri[1]):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert ulp_distance(ref[2], tri[2]) <= 1 and ulp_distance(ref[3], tri[3]) <= 1


@pytest.mark.gpu
def test_cuda_chunk_block_matches_reference():
    fmt = ChunkFormat.from_layout(model_config("tiny").kv_layout(), bits=4)
    shape = (1, fmt.tokens, fmt.heads, fmt.head_dim)  # [B, T, H, D]
    kv = [(torch.randn(shape, device="cuda", dtype=torch.bfloat16),
           torch.randn(shape, device="cuda", dtype=torch.bfloat16)) for _ in range(fmt.layers)]
    blocks = {}
    for backend in ("reference", "triton"):
        with ops.use_backend(backend):
            blocks[backend] = torch.empty(fmt.slot_bytes, dtype=torch.uint8, device="cuda")
            quantize_chunk_into(kv, fmt, blocks[backend])
    assert torch.equal(blocks["reference"], blocks["triton"])
    outs = {}
    for backend in ("reference", "triton"):
        with ops.use_backend(backend):
            outs[backend] = [(torch.empty_like(k), torch.empty_like(v)) for k, v in kv]
            dequantize_chunk_into(blocks["reference"], fmt, outs[backend])
    for r, tr in zip(outs["reference"], outs["triton"]):
        assert ulp_distance(r[0], tr[0]) <= 1 and ulp_distance(r[1], tr[1]) <= 1
