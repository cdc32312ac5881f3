"""Triton kernels for the KIVI-style quantiser; same contract as :mod:`engine.kernels.reference`.

Codes, scales and zeros are bit-identical to the reference; dequantised values are too (the fp32
product ``code * scale`` is exact, so fused or unfused multiply-add round the same), which is within the
promised 1 ulp. Every fp32 operation on the quantise path is a single IEEE-rounded op with no multiply
feeding an add: ``div_rn`` (Triton's plain ``/`` is an approximate divide on NVIDIA); rounding
half-to-even is built from ``floor`` (libdevice ``rint`` does not run under ``TRITON_INTERPRET``); and the
fp32 → fp16 / bf16 narrowing is done with integer bit operations, because the interpreter's own float
downcast rounds ties away from zero (and mishandles mantissa carries), which would break parity on CPU.

Import this module only through :mod:`engine.kernels.ops`. Under ``TRITON_INTERPRET=1`` (set before the
import) the kernels run on CPU tensors, slowly — for parity tests on small shapes.

Kernels (one launch grid each, all per layer, tensors as ``[T, C]`` row matrices, unit channel stride):
* keys: ``_key_minmax`` writes partial per-channel min/max over ``NSPLIT`` token slices to fp32
  scratch ``[2, NSPLIT, C]``; ``_key_quant`` folds them, derives scale/zero (stored by the first token
  block) and packs codes. Splitting the token axis keeps the GPU busy although there are few channels.
* values: ``_value_quant`` does stats, scale/zero and packing of ``BLOCK_T`` tokens × one group at once.
* ``_dequant`` unpacks and rescales either kind (``PER_TOKEN`` selects the scale indexing).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.reference import FP16_MAX, codes_per_byte, packed_width

_FP16_MAX = tl.constexpr(FP16_MAX)  # jit code may read module globals only as constexpr

_MAX_SPLITS = 8           # token slices for the key min/max pass (power of two); each key-quant
                          # program re-reads all partials of its channels, so keep this small
_KEY_BLOCK_C = 32         # channels per program in the key min/max pass
_BLOCK_T = 32             # tokens per program in the quantise/dequantise passes
_BLOCK_CH = 128           # channels per program in the key quantise and dequantise passes


@triton.jit
def _rne(y):
    """Round ``y >= 0`` (fp32, < 2**23) half to even, as int32."""
    f = tl.floor(y)
    frac = y - f                                   # exact for 0 <= y < 2**23
    q = f.to(tl.int32)
    up = (frac > 0.5) | ((frac == 0.5) & ((q & 1) == 1))
    return q + up.to(tl.int32)


@triton.jit
def _f16_bits(v):
    """fp32 → fp16 bit pattern (int32), round to nearest even, finite inputs.

    Done with integer ops because the interpreter's own float downcast rounds ties away from zero.
    """
    u = v.to(tl.int32, bitcast=True)
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    normal = ((a + 0xFFF + ((a >> 13) & 1)) >> 13) - 0x1C000      # drop 13 bits, rebias 127 → 15
    sub = _rne(tl.minimum(tl.abs(v), 6.103515625e-05) * 16777216.0)  # subnormal: units of 2**-24 (exact)
    h = tl.where(a >= 0x38800000, normal, sub)                     # |v| >= 2**-14 is normal
    h = tl.where(a >= 0x477FF000, 0x7C00, h)                       # |v| >= 65520 rounds to inf
    return h | sign


@triton.jit
def _bf16_bits(v):
    """fp32 → bf16 bit pattern (int32), round to nearest even, finite inputs."""
    u = v.to(tl.int32, bitcast=True)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF        # a carry into the exponent is right


@triton.jit
def _as_f16(bits):
    return bits.to(tl.int16).to(tl.float16, bitcast=True)


@triton.jit
def _scale_zero(mn, mx, QMAX: tl.constexpr):
    """fp32 min/max → fp16 bit patterns and fp32 values of scale and zero (the reference contract)."""
    scale = tl.math.div_rn(mx - mn, tl.full(mn.shape, QMAX, tl.float32))
    scale_bits = _f16_bits(tl.minimum(scale, _FP16_MAX))
    scale_bits = tl.where(scale_bits == 0, 0x3C00, scale_bits)    # a zero scale is stored as 1.0
    zero_bits = _f16_bits(tl.minimum(tl.maximum(mn, -_FP16_MAX), _FP16_MAX))
    zero_bits = tl.where(zero_bits == 0x8000, 0, zero_bits)        # a zero point of -0 is stored as +0
    return scale_bits, zero_bits, _as_f16(scale_bits).to(tl.float32), _as_f16(zero_bits).to(tl.float32)


@triton.jit
def _encode(x, scale, zero, QMAX: tl.constexpr):
    """fp32 values → int32 codes: clamp((x - zero) / scale, 0, qmax), rounded half to even."""
    y = tl.math.div_rn(x - zero, scale)
    return _rne(tl.minimum(tl.maximum(y, 0.0), QMAX * 1.0))


@triton.jit
def _cast_out(y, out_ptr):
    """fp32 → the output pointer's dtype, rounded to nearest even on every backend."""
    if out_ptr.dtype.element_ty == tl.bfloat16:
        res = _bf16_bits(y).to(tl.int16).to(tl.bfloat16, bitcast=True)
    elif out_ptr.dtype.element_ty == tl.float16:
        res = _as_f16(_f16_bits(y))
    else:
        res = y.to(out_ptr.dtype.element_ty)
    return res


@triton.jit
def _key_minmax(x_ptr, part_ptr, T, C, x_rs, rows_per_split, NSPLIT: tl.constexpr,
                BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_c = tl.program_id(0)
    pid_s = tl.program_id(1)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    t_lo = pid_s * rows_per_split
    t_hi = tl.minimum(t_lo + rows_per_split, T)
    mn = tl.full([BLOCK_C], float("inf"), tl.float32)
    mx = tl.full([BLOCK_C], float("-inf"), tl.float32)
    for t0 in range(t_lo, t_hi, BLOCK_T):
        rows = t0 + tl.arange(0, BLOCK_T)
        m = (rows[:, None] < t_hi) & cmask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_rs + cols[None, :], mask=m, other=0.0).to(tl.float32)
        mn = tl.minimum(mn, tl.min(tl.where(m, x, float("inf")), axis=0))
        mx = tl.maximum(mx, tl.max(tl.where(m, x, float("-inf")), axis=0))
    tl.store(part_ptr + pid_s * C + cols, mn, mask=cmask)
    tl.store(part_ptr + (NSPLIT + pid_s) * C + cols, mx, mask=cmask)


@triton.jit
def _key_quant(x_ptr, part_ptr, codes_ptr, scale_ptr, zero_ptr, T, C, x_rs, codes_rs,
               NSPLIT: tl.constexpr, BITS: tl.constexpr, PER: tl.constexpr,
               BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr):
    pid_t = tl.program_id(0)
    pid_j = tl.program_id(1)
    QMAX: tl.constexpr = (1 << BITS) - 1
    j = pid_j * BLOCK_J + tl.arange(0, BLOCK_J)                      # packed byte column
    s = tl.arange(0, PER)                                            # code slot inside the byte
    ch = j[:, None] * PER + s[None, :]                               # [BLOCK_J, PER] channel
    cmask = ch < C
    sp = tl.arange(0, NSPLIT)
    pm = cmask[None, :, :] & (sp[:, None, None] < NSPLIT)
    pofs = sp[:, None, None] * C + ch[None, :, :]                    # [NSPLIT, BLOCK_J, PER]
    mn = tl.min(tl.load(part_ptr + pofs, mask=pm, other=float("inf")), axis=0)
    mx = tl.max(tl.load(part_ptr + NSPLIT * C + pofs, mask=pm, other=float("-inf")), axis=0)
    scale_bits, zero_bits, scale, zero = _scale_zero(mn, mx, QMAX)
    first = cmask & ((ch * 0 + pid_t) == 0)  # every token block derives the same scale; one stores it
    tl.store(scale_ptr + ch, _as_f16(scale_bits), mask=first)
    tl.store(zero_ptr + ch, _as_f16(zero_bits), mask=first)

    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    m = (rows[:, None, None] < T) & cmask[None, :, :]                # [BLOCK_T, BLOCK_J, PER]
    x = tl.load(x_ptr + rows[:, None, None] * x_rs + ch[None, :, :], mask=m, other=0.0)
    q = _encode(x.to(tl.float32), scale[None, :, :], zero[None, :, :], QMAX)
    packed = tl.sum(q << (s[None, None, :] * BITS), axis=2)          # disjoint bits: sum == or
    bm = (rows[:, None] < T) & (j[None, :] * PER < C)
    tl.store(codes_ptr + rows[:, None] * codes_rs + j[None, :], packed.to(tl.uint8), mask=bm)


@triton.jit
def _value_quant(x_ptr, codes_ptr, scale_ptr, zero_ptr, T, x_rs, codes_rs, NG,
                 BITS: tl.constexpr, PER: tl.constexpr, GROUP: tl.constexpr, BLOCK_T: tl.constexpr):
    pid_t = tl.program_id(0)
    g = tl.program_id(1)
    QMAX: tl.constexpr = (1 << BITS) - 1
    JG: tl.constexpr = GROUP // PER
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    jj = tl.arange(0, JG)
    s = tl.arange(0, PER)
    ch = g * GROUP + jj[:, None] * PER + s[None, :]                  # [JG, PER] channel
    rmask = rows < T
    m = rmask[:, None, None] & (ch[None, :, :] >= 0)                 # [BLOCK_T, JG, PER]
    x = tl.load(x_ptr + rows[:, None, None] * x_rs + ch[None, :, :], mask=m, other=0.0)
    x = x.to(tl.float32)
    mn = tl.min(tl.min(x, axis=2), axis=1)                           # [BLOCK_T]
    mx = tl.max(tl.max(x, axis=2), axis=1)
    scale_bits, zero_bits, scale, zero = _scale_zero(mn, mx, QMAX)
    tl.store(scale_ptr + rows * NG + g, _as_f16(scale_bits), mask=rmask)
    tl.store(zero_ptr + rows * NG + g, _as_f16(zero_bits), mask=rmask)
    q = _encode(x, scale[:, None, None], zero[:, None, None], QMAX)
    packed = tl.sum(q << (s[None, None, :] * BITS), axis=2)          # [BLOCK_T, JG]
    ofs = rows[:, None] * codes_rs + g * JG + jj[None, :]
    tl.store(codes_ptr + ofs, packed.to(tl.uint8), mask=rmask[:, None])


@triton.jit
def _dequant(codes_ptr, scale_ptr, zero_ptr, out_ptr, T, C, codes_rs, out_rs, NG,
             BITS: tl.constexpr, PER: tl.constexpr, GROUP: tl.constexpr, PER_TOKEN: tl.constexpr,
             BLOCK_T: tl.constexpr, BLOCK_J: tl.constexpr):
    pid_t = tl.program_id(0)
    pid_j = tl.program_id(1)
    MASK: tl.constexpr = (1 << BITS) - 1
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    j = pid_j * BLOCK_J + tl.arange(0, BLOCK_J)
    s = tl.arange(0, PER)
    bm = (rows[:, None] < T) & (j[None, :] * PER < C)
    b = tl.load(codes_ptr + rows[:, None] * codes_rs + j[None, :], mask=bm, other=0).to(tl.int32)
    q = (b[:, :, None] >> (s[None, None, :] * BITS)) & MASK          # [BLOCK_T, BLOCK_J, PER]
    ch = j[None, :, None] * PER + s[None, None, :]                   # [1, BLOCK_J, PER]
    m = (rows[:, None, None] < T) & (ch < C)
    if PER_TOKEN:
        sofs = rows[:, None, None] * NG + ch // GROUP                # [BLOCK_T, BLOCK_J, PER]
        scale = tl.load(scale_ptr + sofs, mask=m, other=1.0).to(tl.float32)
        zero = tl.load(zero_ptr + sofs, mask=m, other=0.0).to(tl.float32)
    else:                                                            # per channel: [1, BLOCK_J, PER]
        scale = tl.load(scale_ptr + ch, mask=ch < C, other=1.0).to(tl.float32)
        zero = tl.load(zero_ptr + ch, mask=ch < C, other=0.0).to(tl.float32)
    y = q.to(tl.float32) * scale + zero     # exact product: fma or not, one rounding
    tl.store(out_ptr + rows[:, None, None] * out_rs + ch, _cast_out(y, out_ptr), mask=m)


# ---------------------------------------------------------------------------------------------
# Launchers (same signatures as the reference functions).

def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def quantize_keys(x: torch.Tensor, bits: int, codes: torch.Tensor, scale: torch.Tensor,
                  zero: torch.Tensor) -> None:
    t, c = x.shape
    per = codes_per_byte(bits)
    assert codes.shape == (t, packed_width(c, bits)) and codes.stride(1) == 1
    assert scale.is_contiguous() and zero.is_contiguous()
    nsplit = min(_MAX_SPLITS, _next_pow2(triton.cdiv(t, _BLOCK_T)))
    rows_per_split = triton.cdiv(triton.cdiv(t, nsplit), _BLOCK_T) * _BLOCK_T
    part = torch.empty((2, nsplit, c), dtype=torch.float32, device=x.device)  # [min|max, split, C]
    _key_minmax[(triton.cdiv(c, _KEY_BLOCK_C), nsplit)](
        x, part, t, c, x.stride(0), rows_per_split,
        NSPLIT=nsplit, BLOCK_T=_BLOCK_T, BLOCK_C=_KEY_BLOCK_C)
    block_j = _BLOCK_CH // per
    _key_quant[(triton.cdiv(t, _BLOCK_T), triton.cdiv(c // per, block_j))](
        x, part, codes, scale, zero, t, c, x.stride(0), codes.stride(0),
        NSPLIT=nsplit, BITS=bits, PER=per, BLOCK_T=_BLOCK_T, BLOCK_J=block_j)


def quantize_values(x: torch.Tensor, bits: int, group: int, codes: torch.Tensor,
                    scale: torch.Tensor, zero: torch.Tensor) -> None:
    t, c = x.shape
    per = codes_per_byte(bits)
    assert c % group == 0 and group % per == 0 and group & (group - 1) == 0, (
        f"value group {group} must be a power of two dividing {c} channels")
    assert codes.shape == (t, packed_width(c, bits)) and codes.stride(1) == 1
    assert scale.is_contiguous() and zero.is_contiguous()
    _value_quant[(triton.cdiv(t, _BLOCK_T), c // group)](
        x, codes, scale, zero, t, x.stride(0), codes.stride(0), c // group,
        BITS=bits, PER=per, GROUP=group, BLOCK_T=_BLOCK_T)


def _launch_dequant(codes, scale, zero, bits, group, out, per_token):
    t, c = out.shape
    per = codes_per_byte(bits)
    assert codes.shape == (t, packed_width(c, bits)) and codes.stride(1) == 1
    block_j = _BLOCK_CH // per
    _dequant[(triton.cdiv(t, _BLOCK_T), triton.cdiv(c // per, block_j))](
        codes, scale, zero, out, t, c, codes.stride(0), out.stride(0), c // group,
        BITS=bits, PER=per, GROUP=group, PER_TOKEN=per_token, BLOCK_T=_BLOCK_T, BLOCK_J=block_j)


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                    out: torch.Tensor) -> None:
    _launch_dequant(codes, scale, zero, bits, 1, out, per_token=False)


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                      group: int, out: torch.Tensor) -> None:
    _launch_dequant(codes, scale, zero, bits, group, out, per_token=True)


# True when the kernels were defined under the interpreter (then they take CPU tensors).
INTERPRETED = not isinstance(_dequant, triton.runtime.JITFunction)
