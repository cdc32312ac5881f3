"""Fused CPU quantiser: the reference's arithmetic in fewer and cheaper passes over memory.

Contract: the functions, arguments and results of :mod:`engine.kernels.reference`, bit for bit — codes,
scales, zeros and dequantised values (``tests/kernel_ops/test_fused_parity.py`` checks every width, input
and output dtype, odd shapes and the edge inputs). It writes into caller-given tensors and allocates
nothing per call: its working tensors are the reference's per-thread buffers (``reference._work``).
Plain PyTorch ops, so it runs wherever torch does; nothing is compiled.

Where the time goes instead (``worldpager bench quant --backend reference,fused``, docs/performance.md):

* min and max are two vectorised reductions (``amin``, ``amax``) in the input's own dtype (the min of
  bf16 values is a bf16 value: widening afterwards is exact) — ``aminmax`` on a widened copy is several
  times slower on a CPU;
* rounding is one add of ``1.5 * 2**23``: for ``0 <= v <= 255`` the fp32 sum is exactly
  ``1.5 * 2**23 + round_half_even(v)`` (the sum's unit in the last place is 1, and the constant is
  even), so its int32 bit pattern ends in the code byte, and a vectorised int32 → uint8 narrowing
  yields the codes — instead of ``round`` and a scalar fp32 → uint8 conversion;
* packing and unpacking are shifts, ORs and one mask on the codes viewed as words (int16 for int4,
  int32 for int2: one packed byte's codes, one per byte of the word), all contiguous — instead of one
  strided byte operation per slot;
* key dequantisation is one ``addcmul`` (``zero + code * scale``: the product is exact, so this
  rounds once, as the reference's multiply then add does; values keep multiply then add, because
  ``addcmul`` with per-token-group scales is not vectorised);
* rows go in tiles of about ``TILE_BYTES`` of fp32, so a tile stays in cache from one pass to the next.
"""
from __future__ import annotations

import torch

from engine.kernels.reference import (FP16_MAX, _check_rows, _f32, _work, codes_per_byte,  # noqa: F401 (FP16_MAX: contract)
                                      scale_zero_into)

TILE_BYTES = 1 << 20                  # fp32 bytes of one row tile: a tile stays in cache between passes
_ROUNDER = 12582912.0                 # 1.5 * 2**23: adding it rounds [0, 2**22) half to even
_WORD = {4: torch.int16, 2: torch.int32}   # a word per packed byte: its P codes, one per byte


def _tile_rows(channels: int) -> int:
    return max(1, TILE_BYTES // (4 * channels))


def _fold_shifts(bits: int) -> list[int]:
    """Shifts that move the P codes of a word (one per byte) into one byte, or back: ``8 - bits`` then
    doubling — int4: [4]; int2: [6, 12]."""
    step, shifts = 8 - bits, []
    for _ in range(codes_per_byte(bits).bit_length() - 1):
        shifts.append(step)
        step *= 2
    return shifts


def _spread_mask(bits: int) -> int:
    """The bits of a word that hold a code after unpacking: the low ``bits`` of every byte."""
    return sum(((1 << bits) - 1) << (8 * s) for s in range(codes_per_byte(bits)))


# ---------------------------------------------------------------------------------------------
# Packing on words.

def _pack_into(q: torch.Tensor, bits: int, codes: torch.Tensor) -> None:
    """Unpacked uint8 codes ``q [R, C]`` (contiguous; clobbered) → packed ``codes [R, C/P]``."""
    if bits == 8:
        codes.copy_(q)
        return
    word = q.view(_WORD[bits])                                               # [R, C/P]
    shifted = _work("fpack", tuple(word.shape), word.dtype, word.device)
    for shift in _fold_shifts(bits):
        word.bitwise_or_(torch.bitwise_right_shift(word, shift, out=shifted))
    codes.copy_(word)   # narrowing keeps the low byte, where the codes now are


def _unpack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Packed ``codes [R, M]`` → uint8 codes ``[R, M*P]`` (a view of this thread's word buffer, or the
    codes themselves for int8)."""
    if bits == 8:
        return codes
    r, m = codes.shape
    word = _work("funpack", (r, m), _WORD[bits], codes.device).copy_(codes)   # [R, M] widened
    shifted = _work("fpack", (r, m), _WORD[bits], codes.device)
    for shift in _fold_shifts(bits):
        word.bitwise_or_(torch.bitwise_left_shift(word, shift, out=shifted))
    return word.bitwise_and_(_spread_mask(bits)).view(torch.uint8)           # [R, M*P]


# ---------------------------------------------------------------------------------------------
# Ranges and codes.

def _range_into(x: torch.Tensor, dim: int, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> None:
    """Per-group fp16 scale/zero of ``x`` reduced over ``dim``: min and max in ``x``'s dtype, widened."""
    shape = tuple(scale.shape)
    mn = _work("min", shape, torch.float32, x.device)
    mx = _work("max", shape, torch.float32, x.device)
    if x.dtype == torch.float32:
        torch.amin(x, dim=dim, out=mn)
        torch.amax(x, dim=dim, out=mx)
    else:
        mn.copy_(torch.amin(x, dim=dim, out=_work("min_n", shape, x.dtype, x.device)))
        mx.copy_(torch.amax(x, dim=dim, out=_work("max_n", shape, x.dtype, x.device)))
    scale_zero_into(mn, mx, bits, scale, zero)


def _encode_tile(x: torch.Tensor, scale32: torch.Tensor, zero32: torch.Tensor, bits: int,
                 codes: torch.Tensor) -> None:
    """Codes of one row tile ``x [R, ...]`` (groups on the trailing axes, scale/zero broadcastable
    fp32) packed into ``codes [R, C/P]``."""
    y = _work("fencode", tuple(x.shape), torch.float32, x.device)
    if x.dtype == torch.float32:
        torch.sub(x, zero32, out=y)
    else:
        y.copy_(x).sub_(zero32)          # widen first: a mixed-dtype op would make a temporary
    y.div_(scale32).clamp_(0, 2 ** bits - 1).add_(_ROUNDER)
    r = x.shape[0]
    words = y.view(torch.int32).view(r, -1)                                   # [R, C] bits of M + code
    if bits == 8:
        codes.copy_(words)
        return
    q = _work("fcodes", tuple(words.shape), torch.uint8, x.device).copy_(words)   # [R, C]
    _pack_into(q, bits, codes)


# ---------------------------------------------------------------------------------------------
# Quantise / dequantise into caller-given tensors (the reference's signatures).

def quantize_keys(x: torch.Tensor, bits: int, codes: torch.Tensor, scale: torch.Tensor,
                  zero: torch.Tensor) -> None:
    """``x [T, C]`` → ``codes uint8 [T, C*bits/8]``, ``scale``/``zero`` fp16 ``[C]``."""
    _check_rows(x)
    _range_into(x, 0, scale, zero, bits)
    scale32, zero32 = _f32(scale, "scale32"), _f32(zero, "zero32")            # [C]
    t, c = x.shape
    step = _tile_rows(c)
    for r0 in range(0, t, step):
        _encode_tile(x[r0:r0 + step], scale32, zero32, bits, codes[r0:r0 + step])


def quantize_values(x: torch.Tensor, bits: int, group: int, codes: torch.Tensor,
                    scale: torch.Tensor, zero: torch.Tensor) -> None:
    """``x [T, C]`` → ``codes uint8 [T, C*bits/8]``, ``scale``/``zero`` fp16 ``[T, C/group]``."""
    _check_rows(x)
    t, c = x.shape
    grouped = x.reshape(t, c // group, group)                                 # [T, NG, G]
    _range_into(grouped, -1, scale, zero, bits)
    scale32 = _f32(scale, "scale32").unsqueeze(-1)                            # [T, NG, 1]
    zero32 = _f32(zero, "zero32").unsqueeze(-1)
    step = _tile_rows(c)
    for r0 in range(0, t, step):
        rows = slice(r0, r0 + step)
        _encode_tile(grouped[rows], scale32[rows], zero32[rows], bits, codes[rows])


def _decode_tile(q: torch.Tensor, scale32: torch.Tensor, zero32: torch.Tensor, out: torch.Tensor,
                 per_group: bool) -> None:
    """``out = zero + q * scale`` for one row tile (``q`` uint8, grouped like ``out``)."""
    acc = out if out.dtype == torch.float32 else _work("fdecode", tuple(out.shape), torch.float32, out.device)
    acc.copy_(q)
    if per_group:   # scale/zero broadcast along the innermost axis: addcmul is not vectorised there
        acc.mul_(scale32).add_(zero32)
    else:           # one pass; the product is exact, so it rounds once, like mul then add
        torch.addcmul(zero32, acc, scale32, out=acc)
    if acc is not out:
        out.copy_(acc)   # the one rounding to bf16/fp16


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                    out: torch.Tensor) -> None:
    """Inverse of :func:`quantize_keys`, written into ``out [T, C]`` (any float dtype)."""
    _check_rows(out)
    t, c = out.shape
    scale32, zero32 = _f32(scale, "scale32"), _f32(zero, "zero32")            # [C]
    step = _tile_rows(c)
    for r0 in range(0, t, step):
        rows = slice(r0, r0 + step)
        _decode_tile(_unpack(codes[rows], bits), scale32, zero32, out[rows], per_group=False)


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                      group: int, out: torch.Tensor) -> None:
    """Inverse of :func:`quantize_values`, written into ``out [T, C]`` (any float dtype)."""
    _check_rows(out)
    t, c = out.shape
    scale32 = _f32(scale, "scale32").unsqueeze(-1)                            # [T, NG, 1]
    zero32 = _f32(zero, "zero32").unsqueeze(-1)
    grouped = out.view(t, c // group, group)                                  # [T, NG, G]
    step = _tile_rows(c)
    for r0 in range(0, t, step):
        rows = slice(r0, r0 + step)
        q = _unpack(codes[rows], bits)
        _decode_tile(q.view(q.shape[0], c // group, group), scale32[rows], zero32[rows], grouped[rows],
                     per_group=True)
