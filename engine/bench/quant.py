"""Throughput of quantising / dequantising one chunk's KV into a stored block, against a plain copy.

Lives with the memory because it times the memory's block code (``engine.memory.quant``) over the
kernels behind ``engine.kernels.ops``; the kernels themselves know nothing of blocks.

Contract: :func:`bench_quant` builds one chunk of random per-layer K/V (``[1, T, H, D]`` per layer, the
shapes of the given model config's ``KVLayout``; ``tokens`` scales the chunk down for CPUs), times
``quantize_chunk_into`` (KV → block), ``dequantize_chunk_into`` (block → KV views) and a per-layer
``copy_`` of the same KV tensors on the same device, and returns a flat dict of numbers. It prints
nothing (the CLI formats) and asserts nothing about speed (benchmarks are never tests). ``backend``
(a name of :data:`engine.kernels.ops.BACKENDS`) forces the kernels for the timed calls; ``None`` keeps
the process's setting. :func:`bench_quant_backends` times several on the same chunk, side by side.

Every GB/s figure counts the unquantised KV bytes of the chunk (``layers × 2 × T × C × itemsize``), so
``quant_vs_copy = copy_s / quant_s`` — a ratio of the same work's throughput; higher is better, and the
aim is ≥ 0.7 on the GPU, ≥ 0.5 (quantise) and ≥ 0.8 (dequantise) on a CPU.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch

from engine.config import ModelConfig, model_config
from engine.kernels import ops
from engine.facts.kv_format import ChunkFormat
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into


def _timer(device: torch.device) -> Callable[[Callable[[], None]], float]:
    def once(fn: Callable[[], None]) -> float:
        """Seconds of one call (the device synchronised on both sides)."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0
    return once


def bench_quant(model: str | ModelConfig = "mg2-universal", *, bits: int = 4, value_group: int = 64,
                tokens: int | None = None, device: str | torch.device | None = None,
                dtype: torch.dtype | None = None, repeats: int = 5, warmup: int = 1,
                seed: int = 0, backend: str | None = None) -> dict:
    """Time one chunk's quantise, dequantise and copy; see the module docstring for the figures.

    ``device`` defaults to CUDA when present; ``dtype`` to bf16 on CUDA and fp32 on CPU (what a session
    keeps its KV in); ``tokens`` defaults to the model's tokens per chunk.
    """
    return bench_quant_backends(model, [backend], bits=bits, value_group=value_group, tokens=tokens,
                                device=device, dtype=dtype, repeats=repeats, warmup=warmup, seed=seed)[0]


def bench_quant_backends(model: str | ModelConfig, backends: list[str | None], *, bits: int = 4,
                         value_group: int = 64, tokens: int | None = None,
                         device: str | torch.device | None = None, dtype: torch.dtype | None = None,
                         repeats: int = 5, warmup: int = 1, seed: int = 0) -> list[dict]:
    """:func:`bench_quant` for each backend on one chunk and one copy timing, interleaved per repeat
    round so that a busy machine slows every backend alike; one result per backend, in order."""
    cfg = model_config(model) if isinstance(model, str) else model
    dev = torch.device(device) if device is not None else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    dt = dtype or (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    fmt = ChunkFormat.from_layout(cfg.kv_layout(), bits=bits, value_group=value_group)
    if tokens is not None:
        fmt = ChunkFormat(layers=fmt.layers, tokens=tokens, heads=fmt.heads, head_dim=fmt.head_dim,
                          bits=bits, value_group=value_group)
    shape = (1, fmt.tokens, fmt.heads, fmt.head_dim)  # [B=1, T, H, D] per layer, keys after RoPE
    gen = torch.Generator(device=dev).manual_seed(seed)
    kv = [(torch.randn(shape, generator=gen, device=dev).to(dt),
           torch.randn(shape, generator=gen, device=dev).to(dt)) for _ in range(fmt.layers)]
    out = [(torch.empty_like(k), torch.empty_like(v)) for k, v in kv]
    block = torch.empty(fmt.slot_bytes, dtype=torch.uint8, device=dev)  # [slot_bytes]

    def copy() -> None:
        for (k, v), (ko, vo) in zip(kv, out):
            ko.copy_(k)
            vo.copy_(v)

    kv_bytes = 2 * fmt.layers * fmt.tokens * fmt.channels * kv[0][0].element_size()
    timed = _timer(dev)
    ops_ = {"copy": copy}
    for i, name in enumerate(backends):
        ops_[f"quant{i}"] = _forced(name, lambda: quantize_chunk_into(kv, fmt, block))
        ops_[f"dequant{i}"] = _forced(name, lambda: dequantize_chunk_into(block, fmt, out))
    med = _interleaved(ops_, timed, repeats, warmup)
    gbps = lambda s: kv_bytes / s / 1e9  # noqa: E731 - one-line unit conversion
    results = []
    for i, name in enumerate(backends):
        with _backend(name):
            used = ops.backend_for(block)
        quant_s, dequant_s, copy_s = med[f"quant{i}"], med[f"dequant{i}"], med["copy"]
        results.append({
            "model": cfg.name, "device": str(dev), "backend": used, "format": fmt.name,
            "kv_dtype": str(dt).removeprefix("torch."), "layers": fmt.layers, "tokens": fmt.tokens,
            "channels": fmt.channels, "kv_bytes": kv_bytes, "block_bytes": fmt.nbytes,
            "quant_s": quant_s, "dequant_s": dequant_s, "copy_s": copy_s,
            "quant_gbps": gbps(quant_s), "dequant_gbps": gbps(dequant_s), "copy_gbps": gbps(copy_s),
            "quant_vs_copy": copy_s / quant_s, "dequant_vs_copy": copy_s / dequant_s,
        })
    return results


def _backend(name: str | None) -> contextlib.AbstractContextManager:
    return ops.use_backend(name) if name is not None else contextlib.nullcontext()


def _forced(name: str | None, fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with _backend(name):
            fn()
    return run


def _interleaved(fns: dict[str, Callable[[], None]], timed: Callable[[Callable[[], None]], float],
                 repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds of each function, timed one call at a time in rounds over all of them."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
