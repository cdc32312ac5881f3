"""Pure-PyTorch KIVI-style quantiser: the specification every other backend must match.

Contract (all backends, bit for bit on the codes, scales and zeros):

* Input ``x`` is one layer's K or V of one chunk as a row matrix ``[T, C]`` (tokens × channels, where
  the channels are the flattened heads × head_dim); the channel axis must have unit stride. Any of
  bf16 / fp16 / fp32; all arithmetic is fp32.
* ``bits`` ∈ {2, 4, 8}, ``qmax = 2**bits - 1``. Groups: **keys per channel** (one group = one channel
  over all ``T`` tokens: scale/zero shaped ``[C]``), **values per token** in groups of ``group``
  consecutive channels (scale/zero shaped ``[T, C // group]``).
* Per group, with ``mn``/``mx`` its fp32 min/max:
  ``scale = fp16(min((mx - mn) / qmax, 65504))`` (IEEE division; an fp16 scale of 0 — constant or
  tiny-range group — is stored as 1.0), ``zero = fp16(clamp(mn, ±65504))`` with a zero of either sign
  stored as +0 (which of -0 and +0 a reduction returns as the minimum depends on its order; no code
  or dequantised value depends on the sign). The fp16 values are what
  the codes are computed with, so dequantisation is consistent with them:
  ``code = round_half_even(clamp((x - zero) / scale, 0, qmax))`` (fp32 subtract, IEEE divide).
* Dequantisation is ``code * scale + zero`` in fp32 (the product is exact: ≤ 8 + 11 significant bits,
  so a fused multiply-add gives the same result), rounded once to the output dtype.
* Packing: codes run along the channel axis of each token, little-endian inside a byte: byte ``j`` of a
  row holds channels ``j*P .. j*P+P-1`` (``P = 8 // bits``), channel ``j*P + s`` in bits
  ``[s*bits, (s+1)*bits)`` — for int4 the low nibble is the even channel. int8 is stored as is.

Error bound (per element, fp32 output, |x| ≤ 65504): ``|x - dq(q(x))| ≤ scale/2 + |mn - zero|
+ qmax·|scale - (mx - mn)/qmax| + a few fp32 ulps`` — the last two terms are the fp16 rounding of the
group's metadata, which the clamp can turn into error at the ends of the range.

Public functions write into caller-given tensors; nothing here allocates outputs. Their working tensors
(fp32 differences, unpacked codes, group min/max, scales and zeros widened to fp32) are per-thread
buffers kept between calls (``_work``), and scale/zero are computed straight into the caller's fp16
tensors: the quantiser runs for every layer of every chunk, and fresh temporaries each time are host
memory churn (page faults when the allocator maps them, heap fragmentation when it does not, DESIGN §3)
that this reuse removes. ``key_scale_zero``, ``value_scale_zero`` and ``scale_zero_from_range`` return new
tensors (tests, one-offs).
"""
from __future__ import annotations

import math
import threading

import torch

FP16_MAX = 65504.0
SUPPORTED_BITS = (2, 4, 8)


def codes_per_byte(bits: int) -> int:
    assert bits in SUPPORTED_BITS, f"unsupported code width {bits}"
    return 8 // bits


def packed_width(channels: int, bits: int) -> int:
    """Bytes per token row of packed codes."""
    per = codes_per_byte(bits)
    assert channels % per == 0, f"{channels} channels do not pack into whole bytes at {bits} bits"
    return channels // per


_local = threading.local()


def _work(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """This thread's working buffer ``name`` viewed as ``shape`` (grown when too small, never shrunk).

    Valid until the next ``_work`` call of the same name on this thread: each caller below consumes its
    buffer before returning."""
    buffers = _local.__dict__.setdefault("buffers", {})
    n = math.prod(shape)
    key = (name, dtype, torch.device(device))
    buf = buffers.get(key)
    if buf is None or buf.numel() < n:
        buf = buffers[key] = torch.empty(n, dtype=dtype, device=device)
    return buf[:n].view(shape)


# ---------------------------------------------------------------------------------------------
# Packing.

def pack_codes(codes: torch.Tensor, bits: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 codes ``[..., N]`` (each < 2**bits) → packed uint8 ``[..., N * bits // 8]``."""
    per = codes_per_byte(bits)
    grouped = codes.reshape(*codes.shape[:-1], codes.shape[-1] // per, per)  # [..., N/P, P]
    if out is None:
        out = torch.empty(grouped.shape[:-1], dtype=torch.uint8, device=codes.device)  # [..., N/P]
    # Highest slot first, shifting what is there up by one slot each time (Horner): the same bytes as
    # OR-ing each slot shifted into place, without a shifted temporary per slot.
    out.copy_(grouped[..., per - 1])
    for s in range(per - 2, -1, -1):
        out.bitwise_left_shift_(bits).bitwise_or_(grouped[..., s])
    return out


def unpack_codes(packed: torch.Tensor, bits: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Packed uint8 ``[..., M]`` → uint8 codes ``[..., M * 8 // bits]`` (inverse of :func:`pack_codes`),
    written into ``out`` (uint8 ``[..., M, P]``, contiguous) when given."""
    per = codes_per_byte(bits)
    if per == 1:
        return packed
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)  # [P]
    mask = (1 << bits) - 1
    if out is None:
        out = torch.empty((*packed.shape, per), dtype=torch.uint8, device=packed.device)  # [..., M, P]
    torch.bitwise_right_shift(packed.unsqueeze(-1), shifts, out=out).bitwise_and_(mask)
    return out.flatten(-2)


# ---------------------------------------------------------------------------------------------
# Scales and codes.

def _f32(t: torch.Tensor, name: str) -> torch.Tensor:
    """``t`` as fp32: itself when it already is, else widened (exactly) into working buffer ``name``.

    Not ``t.float()``: a mixed-dtype CPU op widens its inputs into fresh temporaries on every call."""
    if t.dtype == torch.float32:
        return t
    return _work(name, tuple(t.shape), torch.float32, t.device).copy_(t)


def scale_zero_into(mn: torch.Tensor, mx: torch.Tensor, bits: int, scale: torch.Tensor,
                    zero: torch.Tensor) -> None:
    """fp32 group min/max → fp16 ``scale``/``zero`` exactly as the contract states (``mn``/``mx`` are
    overwritten: they are the caller's working buffers)."""
    qmax = _work("qmax", tuple(mn.shape), torch.float32, mn.device).fill_(float(2 ** bits - 1))
    # Divide by a full tensor, not a Python scalar: CUDA turns scalar division into a multiply by the
    # reciprocal, which is not the IEEE quotient the Triton kernels compute.
    rng = torch.sub(mx, mn, out=mx).div_(qmax).clamp_(max=FP16_MAX)
    scale.copy_(rng)   # the one rounding to fp16, as .to(torch.float16)
    is_zero = torch.eq(scale, 0, out=_work("is0", tuple(scale.shape), torch.bool, scale.device))
    scale.masked_fill_(is_zero, 1.0)
    zero.copy_(mn.clamp_(-FP16_MAX, FP16_MAX))
    zero.masked_fill_(torch.eq(zero, 0, out=is_zero), 0.0)   # -0 → +0


def scale_zero_from_range(mn: torch.Tensor, mx: torch.Tensor, bits: int
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 group min/max → new fp16 (scale, zero) (tests, one-offs; ``mn``/``mx`` are left as they are)."""
    scale = torch.empty(mn.shape, dtype=torch.float16, device=mn.device)
    zero = torch.empty_like(scale)
    scale_zero_into(mn.clone(), mx.clone(), bits, scale, zero)
    return scale, zero


def encode(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """Unpacked uint8 codes of ``x`` given broadcastable fp16 ``scale``/``zero`` (into ``out``, shaped
    like ``x``, when given)."""
    y = _work("encode", tuple(x.shape), torch.float32, x.device)
    torch.sub(_f32(x, "widen"), _f32(zero, "zero32"), out=y)
    y.div_(_f32(scale, "scale32"))
    # Clamp before rounding: equal to rounding then clamping (integers are fixed points), and it keeps
    # out-of-range values finite before the uint8 cast.
    y.clamp_(0, 2 ** bits - 1).round_()   # torch.round: half to even
    if out is None:
        return y.to(torch.uint8)
    return out.copy_(y)


def _check_rows(x: torch.Tensor) -> None:
    assert x.dim() == 2 and x.stride(1) == 1, (
        f"want a [T, C] row matrix with unit channel stride, got {tuple(x.shape)} strides {x.stride()}")


def _range_into(x: torch.Tensor, dim: int, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> None:
    """Per-group fp16 scale/zero of ``x`` reduced over ``dim`` (min/max in this thread's buffers)."""
    shape = tuple(scale.shape)
    mn = _work("min", shape, torch.float32, x.device)
    mx = _work("max", shape, torch.float32, x.device)
    torch.aminmax(_f32(x, "widen"), dim=dim, out=(mn, mx))
    scale_zero_into(mn, mx, bits, scale, zero)


def key_scale_zero(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel fp16 scale/zero ``[C]`` of a ``[T, C]`` key matrix."""
    _check_rows(x)
    scale = torch.empty(x.shape[1], dtype=torch.float16, device=x.device)  # [C]
    zero = torch.empty_like(scale)
    _range_into(x, 0, scale, zero, bits)
    return scale, zero


def value_scale_zero(x: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token-group fp16 scale/zero ``[T, C // group]`` of a ``[T, C]`` value matrix."""
    _check_rows(x)
    t, c = x.shape
    assert c % group == 0, f"{c} channels do not split into groups of {group}"
    scale = torch.empty((t, c // group), dtype=torch.float16, device=x.device)  # [T, NG]
    zero = torch.empty_like(scale)
    _range_into(x.reshape(t, c // group, group), -1, scale, zero, bits)
    return scale, zero


# ---------------------------------------------------------------------------------------------
# Quantise / dequantise into caller-given tensors.

def quantize_keys(x: torch.Tensor, bits: int, codes: torch.Tensor, scale: torch.Tensor,
                  zero: torch.Tensor) -> None:
    """``x [T, C]`` → ``codes uint8 [T, C*bits/8]``, ``scale``/``zero`` fp16 ``[C]``."""
    _check_rows(x)
    _range_into(x, 0, scale, zero, bits)
    q = encode(x, scale, zero, bits, out=_work("codes", tuple(x.shape), torch.uint8, x.device))  # [T, C]
    pack_codes(q, bits, out=codes)


def quantize_values(x: torch.Tensor, bits: int, group: int, codes: torch.Tensor,
                    scale: torch.Tensor, zero: torch.Tensor) -> None:
    """``x [T, C]`` → ``codes uint8 [T, C*bits/8]``, ``scale``/``zero`` fp16 ``[T, C/group]``."""
    _check_rows(x)
    t, c = x.shape
    grouped = x.reshape(t, c // group, group)  # [T, NG, G]
    _range_into(grouped, -1, scale, zero, bits)
    q = _work("codes", (t, c // group, group), torch.uint8, x.device)
    encode(grouped, scale.unsqueeze(-1), zero.unsqueeze(-1), bits, out=q)
    pack_codes(q.view(t, c), bits, out=codes)


def _decode_into(codes3: torch.Tensor, scale3: torch.Tensor, zero3: torch.Tensor,
                 out3: torch.Tensor) -> None:
    """``out3 = codes3 * scale3 + zero3`` in fp32, rounded once to ``out3.dtype``.

    The codes are widened by a copy into the fp32 result itself (exact): a uint8 x fp32 product would
    make the CPU widen them into a temporary of its own on every call; the fp16 scale/zero are widened
    into this thread's buffers for the same reason."""
    acc = out3 if out3.dtype == torch.float32 else _work("decode", tuple(out3.shape), torch.float32, out3.device)
    acc.copy_(codes3)
    acc.mul_(_f32(scale3, "scale32")).add_(_f32(zero3, "zero32"))  # exact product, so mul-then-add == fma
    if acc is not out3:
        out3.copy_(acc)   # the one rounding to bf16/fp16


def _unpacked(codes: torch.Tensor, bits: int) -> torch.Tensor | None:
    """The working buffer that ``codes [T, M]`` unpack into: uint8 ``[T, M, P]`` (None for int8, which
    is stored unpacked)."""
    per = codes_per_byte(bits)
    return None if per == 1 else _work("unpack", (*codes.shape, per), torch.uint8, codes.device)


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                    out: torch.Tensor) -> None:
    """Inverse of :func:`quantize_keys`, written into ``out [T, C]`` (any float dtype)."""
    _check_rows(out)
    q = unpack_codes(codes, bits, out=_unpacked(codes, bits))  # [T, C] uint8
    _decode_into(q, scale, zero, out)


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                      group: int, out: torch.Tensor) -> None:
    """Inverse of :func:`quantize_values`, written into ``out [T, C]`` (any float dtype)."""
    _check_rows(out)
    t, c = out.shape
    q = unpack_codes(codes, bits, out=_unpacked(codes, bits)).reshape(t, c // group, group)  # [T, NG, G]
    _decode_into(q, scale.unsqueeze(-1), zero.unsqueeze(-1), out.view(t, c // group, group))
