"""Triton-vs-reference parity, run as a script under TRITON_INTERPRET=1 (see test_triton_parity.py).

Prints one JSON object: the number of cases and a list of failure descriptions (empty = parity).
The interpreter flag must be in the environment before Triton is first imported, hence a separate
process. Dequantised values are compared bit for bit too (stricter than the promised 1 ulp).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from engine.config import model_config
from engine.kernels import ops  # imports no Triton until the first Triton call
from engine.facts.kv_format import ChunkFormat
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: import the sibling module
from _bounds import hard_input  # noqa: E402


def compare(name, a, b, failures):
    if not torch.equal(a.view(torch.uint8), b.view(torch.uint8)):
        failures.append(f"{name}: not bit-identical")


def run_case(bits, dtype, out_dtype, group, failures, t=37, c=192):
    x = hard_input(t, c, dtype, seed=bits)
    res = {}
    for backend in ("reference", "triton"):
        with ops.use_backend(backend):
            kq = ops.quantize_keys(x, bits)
            vq = ops.quantize_values(x, bits, group)
            ko = ops.dequantize_keys(*kq, bits, torch.empty(t, c, dtype=out_dtype))
            vo = ops.dequantize_values(*vq, bits, group, torch.empty(t, c, dtype=out_dtype))
        res[backend] = (*kq, *vq, ko, vo)
    tag = f"bits={bits} in={dtype} out={out_dtype} group={group}"
    for name, a, b in zip(("k_codes", "k_scale", "k_zero", "v_codes", "v_scale", "v_zero", "k_dq", "v_dq"),
                          res["reference"], res["triton"]):
        compare(f"{tag} {name}", a, b, failures)


def run_chunk(failures):
    cfg = model_config("tiny")
    fmt = ChunkFormat.from_layout(cfg.kv_layout(), bits=4)
    g = torch.Generator().manual_seed(3)
    shape = (1, fmt.tokens, fmt.heads, fmt.head_dim)              # [B, T, H, D]
    kv = [tuple(torch.randn(shape, generator=g).to(torch.bfloat16) for _ in range(2))
          for _ in range(fmt.layers)]
    blocks, outs = {}, {}
    for backend in ("reference", "triton"):
        with ops.use_backend(backend):
            blocks[backend] = torch.empty(fmt.slot_bytes, dtype=torch.uint8)
            quantize_chunk_into(kv, fmt, blocks[backend])
            outs[backend] = [(torch.empty_like(k), torch.empty_like(v)) for k, v in kv]
            dequantize_chunk_into(blocks["reference"], fmt, outs[backend])
    compare("tiny chunk block", blocks["reference"], blocks["triton"], failures)
    for layer, (r, tr) in enumerate(zip(outs["reference"], outs["triton"])):
        compare(f"tiny chunk layer {layer} k", r[0], tr[0], failures)
        compare(f"tiny chunk layer {layer} v", r[1], tr[1], failures)


def main() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run me with TRITON_INTERPRET=1 in the environment"
    failures: list[str] = []
    cases = 0
    outs = [torch.float32, torch.bfloat16, torch.float16]
    for bits in (2, 4, 8):
        for i, dtype in enumerate((torch.float32, torch.bfloat16, torch.float16)):
            run_case(bits, dtype, outs[(i + bits) % 3], group=32 if i == 1 else 64, failures=failures)
            cases += 1
    run_chunk(failures)
    cases += 1
    from engine.kernels import triton_quant
    print(json.dumps({"cases": cases, "interpreted": triton_quant.INTERPRETED, "failures": failures}))


if __name__ == "__main__":
    main()
