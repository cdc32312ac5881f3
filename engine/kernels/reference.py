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
  tiny-range group — is stored as 1.0), ``zero = fp16(clamp(mn, ±65504))``. The fp16 values are what
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

Public functions write into caller-given tensors; nothing here allocates outputs except fp32 scratch.
"""
from __future__ import annotations

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


# ---------------------------------------------------------------------------------------------
# Packing.

def pack_codes(codes: torch.Tensor, bits: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """uint8 codes ``[..., N]`` (each < 2**bits) → packed uint8 ``[..., N * bits // 8]``."""
    per = codes_per_byte(bits)
    grouped = codes.reshape(*codes.shape[:-1], codes.shape[-1] // per, per)  # [..., N/P, P]
    if out is None:
        out = torch.empty(grouped.shape[:-1], dtype=torch.uint8, device=codes.device)  # [..., N/P]
    out.copy_(grouped[..., 0])
    for s in range(1, per):
        out.bitwise_or_(grouped[..., s] << (s * bits))
    return out


def unpack_codes(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """Packed uint8 ``[..., M]`` → uint8 codes ``[..., M * 8 // bits]`` (inverse of :func:`pack_codes`)."""
    per = codes_per_byte(bits)
    if per == 1:
        return packed
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)  # [P]
    mask = (1 << bits) - 1
    codes = (packed.unsqueeze(-1) >> shifts) & mask  # [..., M, P]
    return codes.flatten(-2)


# ---------------------------------------------------------------------------------------------
# Scales and codes.

def scale_zero_from_range(mn: torch.Tensor, mx: torch.Tensor, bits: int
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 group min/max → fp16 (scale, zero) exactly as the contract states."""
    qmax = float(2 ** bits - 1)
    # Divide by a full tensor, not a Python scalar: CUDA turns scalar division into a multiply by the
    # reciprocal, which is not the IEEE quotient the Triton kernels compute.
    scale = torch.div(mx - mn, torch.full_like(mn, qmax)).clamp_(max=FP16_MAX).to(torch.float16)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    zero = mn.clamp(-FP16_MAX, FP16_MAX).to(torch.float16)
    return scale, zero


def encode(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Unpacked uint8 codes of ``x`` given broadcastable fp16 ``scale``/``zero``."""
    y = torch.div(x.float() - zero.float(), scale.float())
    # Clamp before rounding: equal to rounding then clamping (integers are fixed points), and it keeps
    # out-of-range values finite before the uint8 cast.
    return y.clamp_(0, 2 ** bits - 1).round_().to(torch.uint8)  # torch.round: half to even


def _check_rows(x: torch.Tensor) -> None:
    assert x.dim() == 2 and x.stride(1) == 1, (
        f"want a [T, C] row matrix with unit channel stride, got {tuple(x.shape)} strides {x.stride()}")


def key_scale_zero(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel fp16 scale/zero ``[C]`` of a ``[T, C]`` key matrix."""
    _check_rows(x)
    mn, mx = torch.aminmax(x.float(), dim=0)
    return scale_zero_from_range(mn, mx, bits)


def value_scale_zero(x: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token-group fp16 scale/zero ``[T, C // group]`` of a ``[T, C]`` value matrix."""
    _check_rows(x)
    t, c = x.shape
    assert c % group == 0, f"{c} channels do not split into groups of {group}"
    mn, mx = torch.aminmax(x.float().reshape(t, c // group, group), dim=-1)
    return scale_zero_from_range(mn, mx, bits)


# ---------------------------------------------------------------------------------------------
# Quantise / dequantise into caller-given tensors.

def quantize_keys(x: torch.Tensor, bits: int, codes: torch.Tensor, scale: torch.Tensor,
                  zero: torch.Tensor) -> None:
    """``x [T, C]`` → ``codes uint8 [T, C*bits/8]``, ``scale``/``zero`` fp16 ``[C]``."""
    s, z = key_scale_zero(x, bits)
    scale.copy_(s)
    zero.copy_(z)
    pack_codes(encode(x, s, z, bits), bits, out=codes)


def quantize_values(x: torch.Tensor, bits: int, group: int, codes: torch.Tensor,
                    scale: torch.Tensor, zero: torch.Tensor) -> None:
    """``x [T, C]`` → ``codes uint8 [T, C*bits/8]``, ``scale``/``zero`` fp16 ``[T, C/group]``."""
    t, c = x.shape
    s, z = value_scale_zero(x, bits, group)
    scale.copy_(s)
    zero.copy_(z)
    grouped = x.reshape(t, c // group, group)  # [T, NG, G]
    q = encode(grouped, s.unsqueeze(-1), z.unsqueeze(-1), bits).reshape(t, c)
    pack_codes(q, bits, out=codes)


def _decode_into(codes3: torch.Tensor, scale3: torch.Tensor, zero3: torch.Tensor,
                 out3: torch.Tensor) -> None:
    """``out3 = codes3 * scale3 + zero3`` in fp32, rounded once to ``out3.dtype``."""
    if out3.dtype == torch.float32:
        torch.mul(codes3, scale3.float(), out=out3)  # exact product, so mul-then-add == fma
        out3.add_(zero3.float())
    else:
        tmp = torch.mul(codes3, scale3.float())  # fp32 scratch: one rounding to bf16/fp16 below
        tmp.add_(zero3.float())
        out3.copy_(tmp)


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                    out: torch.Tensor) -> None:
    """Inverse of :func:`quantize_keys`, written into ``out [T, C]`` (any float dtype)."""
    _check_rows(out)
    q = unpack_codes(codes, bits)  # [T, C] uint8
    _decode_into(q, scale, zero, out)


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                      group: int, out: torch.Tensor) -> None:
    """Inverse of :func:`quantize_values`, written into ``out [T, C]`` (any float dtype)."""
    _check_rows(out)
    t, c = out.shape
    q = unpack_codes(codes, bits).reshape(t, c // group, group)  # [T, NG, G]
    _decode_into(q, scale.unsqueeze(-1), zero.unsqueeze(-1), out.view(t, c // group, group))
