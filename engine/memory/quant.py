"""A stored chunk's tensors: quantise per-layer K/V into a block and read a block back (torch).

Owns the tensor side of the chunk block whose byte layout :mod:`engine.facts.kv_format` defines: typed views
of a block's sections, ``quantize_chunk_into`` (K/V → block, through the kernels' one dispatch point
:mod:`engine.kernels.ops`) and ``dequantize_chunk_into`` (block → K/V views, e.g. device staging
slots). With ``bits = 16`` both are exact copies. The byte arithmetic itself (offsets, ``nbytes``,
``slot_bytes``) is not here: it is torch-free and shared with the planner.
"""
from __future__ import annotations

import torch

from engine.kernels import ops
from engine.facts.kv_format import ChunkFormat


def layer_views(fmt: ChunkFormat, block: torch.Tensor, layer: int) -> dict[str, torch.Tensor]:
    """Typed views of layer ``layer``'s sections inside a uint8 block (no copies)."""
    assert block.dtype == torch.uint8 and block.dim() == 1 and block.is_contiguous()
    assert block.numel() >= fmt.nbytes, f"block of {block.numel()} B < chunk of {fmt.nbytes} B"
    base = layer * fmt.layer_bytes
    views = {}
    for s in fmt.sections:
        raw = block[base + s.offset: base + s.offset + s.nbytes]
        views[s.name] = raw.view(getattr(torch, s.dtype)).view(s.shape)
    return views


def _rows(t: torch.Tensor, fmt: ChunkFormat, writable: bool) -> torch.Tensor:
    """``[1, T, H, D]`` → ``[T, H*D]`` row matrix; a view when it is written to."""
    assert tuple(t.shape) == (1, fmt.tokens, fmt.heads, fmt.head_dim), (
        f"KV of shape {tuple(t.shape)}, format expects (1, {fmt.tokens}, {fmt.heads}, {fmt.head_dim})")
    # view() raises for a layout that cannot be written through; reading may copy instead.
    return t[0].view(fmt.tokens, fmt.channels) if writable else t[0].reshape(fmt.tokens, fmt.channels)


def quantize_chunk_into(kv: list[tuple[torch.Tensor, torch.Tensor]], fmt: ChunkFormat,
                        out: torch.Tensor) -> None:
    """Write one chunk's per-layer ``(k, v)`` (each ``[1, T, H, D]``) into the uint8 block ``out``.

    ``out`` is at least ``fmt.nbytes`` long and on the KV's device; bytes from ``nbytes`` to the end of
    ``out`` (up to ``slot_bytes``) are zeroed so that blocks written to disk are deterministic.
    """
    assert len(kv) == fmt.layers, f"{len(kv)} layers of KV, format has {fmt.layers}"
    assert out.device == kv[0][0].device, f"block on {out.device}, KV on {kv[0][0].device}"
    for layer, (k, v) in enumerate(kv):
        views = layer_views(fmt, out, layer)
        k2, v2 = _rows(k, fmt, writable=False), _rows(v, fmt, writable=False)
        if not fmt.quantized:
            assert k.dtype == views["k"].dtype == v.dtype, (
                f"unquantised {fmt.raw_dtype} format given {k.dtype}/{v.dtype} KV (not exact)")
            views["k"].copy_(k2)
            views["v"].copy_(v2)
            continue
        ops.quantize_keys(k2, fmt.bits, views["k_codes"], views["k_scale"], views["k_zero"])
        ops.quantize_values(v2, fmt.bits, fmt.value_group, views["v_codes"], views["v_scale"],
                            views["v_zero"])
    out[fmt.nbytes:].zero_()


def dequantize_chunk_into(block: torch.Tensor, fmt: ChunkFormat,
                          out: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Read a block back into per-layer ``(k, v)`` views ``[1, T, H, D]`` (e.g. device staging slots).

    Outputs may be any float dtype (bf16 on GPU, fp32 on CPU); they must be on the block's device.
    """
    assert len(out) == fmt.layers, f"{len(out)} output layers, format has {fmt.layers}"
    for layer, (k, v) in enumerate(out):
        dequantize_layer_into(block, fmt, layer, k, v)


def dequantize_layer_into(block: torch.Tensor, fmt: ChunkFormat, layer: int, k: torch.Tensor,
                          v: torch.Tensor) -> None:
    """Layer ``layer`` of a block into ``k`` and ``v`` ``[1, T, H, D]`` (the same values as
    ``dequantize_chunk_into`` writes for that layer)."""
    views = layer_views(fmt, block, layer)
    k2, v2 = _rows(k, fmt, writable=True), _rows(v, fmt, writable=True)
    if not fmt.quantized:
        k2.copy_(views["k"])
        v2.copy_(views["v"])
        return
    ops.dequantize_keys(views["k_codes"], views["k_scale"], views["k_zero"], fmt.bits, k2)
    ops.dequantize_values(views["v_codes"], views["v_scale"], views["v_zero"], fmt.bits,
                          fmt.value_group, v2)
