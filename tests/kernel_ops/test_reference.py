"""The reference quantiser: packing, per-group error bound, measured fidelity, output handling."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ConfigError
from engine.kernels import ops, reference

from ._bounds import key_error_ok, rel_rms, value_error_ok

BITS = (2, 4, 8)

# Relative RMS error measured for N(0, 1) inputs, T = 2640 tokens (one MG2 chunk), C = 512, group 64
# (keys / values): int2 0.691 / 0.451, int4 0.136 / 0.090, int8 0.0080 / 0.0053. Keys are worse: one
# channel's range spans all 2640 tokens (±3.5σ) while a value group spans 64 channels (±2.4σ).
RMS_BOUND = {2: (0.75, 0.50), 4: (0.15, 0.10), 8: (0.009, 0.006)}


@pytest.mark.parametrize("bits", BITS)
def test_pack_unpack_identity(bits):
    g = torch.Generator().manual_seed(bits)
    codes = torch.randint(0, 2 ** bits, (7, 64), generator=g, dtype=torch.uint8)  # [T, C]
    packed = reference.pack_codes(codes, bits)
    assert packed.shape == (7, 64 * bits // 8)
    assert torch.equal(reference.unpack_codes(packed, bits), codes)


def test_int4_packing_is_low_nibble_first():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    assert reference.pack_codes(codes, 4).tolist() == [[0x21, 0x0F]]
    assert reference.pack_codes(torch.tensor([[1, 2, 3, 0]], dtype=torch.uint8), 2).tolist() == [[0b00111001]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bits", BITS)
def test_error_within_bound(bits, dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(96, 256, generator=g) * 2 + 0.5).to(dtype)  # [T, C]
    x[:, 3] = 0.25                                                 # constant channel: zero range
    x[5, :64] = 7.0                                                # constant value group
    out = torch.empty(x.shape, dtype=torch.float32)
    codes, scale, zero = ops.quantize_keys(x, bits)
    assert key_error_ok(x.float(), ops.dequantize_keys(codes, scale, zero, bits, out), scale, zero, bits)
    codes, scale, zero = ops.quantize_values(x, bits, 64)
    dq = ops.dequantize_values(codes, scale, zero, bits, 64, out)
    assert value_error_ok(x.float(), dq, scale, zero, bits, 64)
    assert torch.equal(dq[5, :64], torch.full((64,), 7.0))        # exactly representable: exact


@pytest.mark.parametrize("bits", BITS)
def test_gaussian_relative_rms(bits):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2640, 512, generator=g)
    out = torch.empty_like(x)
    rk = rel_rms(x, ops.dequantize_keys(*ops.quantize_keys(x, bits), bits, out))
    rv = rel_rms(x, ops.dequantize_values(*ops.quantize_values(x, bits, 64), bits, 64, out))
    assert rk <= RMS_BOUND[bits][0] and rv <= RMS_BOUND[bits][1], (rk, rv)


def test_dequant_writes_into_given_strided_output():
    x = torch.randn(40, 128)
    big = torch.full((60, 3, 128), float("nan"), dtype=torch.bfloat16)   # [T', 3, C]: rows of stride 384
    out = big[10:50, 1]
    ptr = out.data_ptr()
    ops.dequantize_values(*ops.quantize_values(x, 4, 64), 4, 64, out)
    assert out.data_ptr() == ptr and not out.isnan().any()
    assert big[:10].isnan().all() and big[10:50, 0].isnan().all()        # nothing else written
    # bf16 output = fp32 result rounded once
    ref = torch.empty(40, 128)
    ops.dequantize_values(*ops.quantize_values(x, 4, 64), 4, 64, ref)
    assert torch.equal(out, ref.to(torch.bfloat16))


def test_metadata_saturates_to_fp16_range():
    x = torch.zeros(8, 64)
    x[0, 0], x[1, 0] = -1e6, 1e6                                   # beyond fp16: clipped, finite
    codes, scale, zero = ops.quantize_keys(x, 4)
    assert torch.isfinite(scale).all() and torch.isfinite(zero).all()
    assert scale[0].item() == 65504.0 and zero[0].item() == -65504.0


def test_bad_arguments_raise_config_errors():
    x = torch.randn(4, 96)
    with pytest.raises(ConfigError, match="bits=3"):
        ops.quantize_keys(x, 3)
    with pytest.raises(ConfigError, match="value group 48"):
        ops.quantize_values(x, 4, 48)


@settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from(BITS), t=st.integers(1, 12), groups=st.integers(1, 3),
       log_scale=st.floats(-12, 12), offset=st.floats(-1e3, 1e3), seed=st.integers(0, 2 ** 31 - 1),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
def test_per_group_bound_property(bits, t, groups, log_scale, offset, seed, dtype):
    """Any data within fp16 range, any scale: every element is within its group's bound."""
    g = torch.Generator().manual_seed(seed)
    group = 16
    x = (torch.randn(t, groups * group, generator=g) * 2.0 ** log_scale + offset).to(dtype).float()
    x = x.clamp(-60000, 60000)
    out = torch.empty_like(x)
    kc = ops.quantize_keys(x, bits)
    assert key_error_ok(x, ops.dequantize_keys(*kc, bits, out), kc[1], kc[2], bits)
    vc = ops.quantize_values(x, bits, group)
    assert value_error_ok(x, ops.dequantize_values(*vc, bits, group, out), vc[1], vc[2], bits, group)
