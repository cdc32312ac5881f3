"""The fused CPU quantiser against the reference, bit for bit: codes, scales, zeros, dequantised values.

Every width, every input and output dtype, odd token counts, strided rows, several value groups, tile
boundaries, the edge inputs of ``hard_input`` (constant, tiny-range, tie-heavy, beyond-fp16,
subnormal-scale, signed-zero groups), random shapes, and whole chunk blocks through the memory's
block code.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import model_config
from engine.kernels import fused, ops, reference
from engine.facts.kv_format import ChunkFormat
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into

from ._bounds import hard_input

BITS = (2, 4, 8)
FLOATS = (torch.float32, torch.bfloat16, torch.float16)
SHAPES = [(37, 192, 64), (2, 64, 32), (300, 1536, 64), (5, 128, 128), (1, 256, 256)]   # T, C, group
NAMES = ("k_codes", "k_scale", "k_zero", "v_codes", "v_scale", "v_zero")


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def quantised(backend, x: torch.Tensor, bits: int, group: int) -> dict[str, torch.Tensor]:
    t, c = x.shape
    per = 8 // bits
    res = {"k_codes": torch.full((t, c // per), 0xAA, dtype=torch.uint8),   # dirty outputs: all written
           "k_scale": torch.full((c,), 7.0, dtype=torch.float16), "k_zero": torch.full((c,), 7.0, dtype=torch.float16),
           "v_codes": torch.full((t, c // per), 0x55, dtype=torch.uint8),
           "v_scale": torch.full((t, c // group), 7.0, dtype=torch.float16),
           "v_zero": torch.full((t, c // group), 7.0, dtype=torch.float16)}
    backend.quantize_keys(x, bits, res["k_codes"], res["k_scale"], res["k_zero"])
    backend.quantize_values(x, bits, group, res["v_codes"], res["v_scale"], res["v_zero"])
    return res


def dequantised(backend, q: dict, bits: int, group: int, out_dtype: torch.dtype, t: int, c: int):
    k = torch.full((t, c), 3.0, dtype=out_dtype)
    v = torch.full((t, c), 3.0, dtype=out_dtype)
    backend.dequantize_keys(q["k_codes"], q["k_scale"], q["k_zero"], bits, k)
    backend.dequantize_values(q["v_codes"], q["v_scale"], q["v_zero"], bits, group, v)
    return k, v


def assert_parity(x: torch.Tensor, bits: int, group: int, out_dtypes=FLOATS) -> None:
    t, c = x.shape
    ref, fus = quantised(reference, x, bits, group), quantised(fused, x, bits, group)
    for name in NAMES:
        assert same_bits(ref[name], fus[name]), f"{name} differs (bits={bits}, {x.dtype}, {t}x{c}, G={group})"
    for out_dtype in out_dtypes:
        for kind, a, b in zip("kv", dequantised(reference, ref, bits, group, out_dtype, t, c),
                              dequantised(fused, ref, bits, group, out_dtype, t, c)):
            assert same_bits(a, b), f"dequantised {kind} differs (bits={bits}, out {out_dtype}, {t}x{c})"


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bits", BITS)
def test_edge_inputs_every_width_dtype_and_shape(bits, dtype):
    for t, c, group in SHAPES:
        if group % (8 // bits) == 0:
            assert_parity(hard_input(t, c, dtype, seed=bits + t), bits, group)


@pytest.mark.parametrize("bits", BITS)
def test_tile_boundaries(bits, monkeypatch):
    """Tiles of 3 rows: 37 tokens end in a partial tile."""
    monkeypatch.setattr(fused, "TILE_BYTES", 3 * 4 * 192)
    assert fused._tile_rows(192) == 3
    assert_parity(hard_input(37, 192, torch.float32, seed=5), bits, 64)
    assert_parity(hard_input(37, 192, torch.bfloat16, seed=6), bits, 32, out_dtypes=(torch.float32,))


@pytest.mark.parametrize("bits", BITS)
def test_strided_rows_in_and_out(bits):
    """Row matrices that are column slices of wider ones (unit channel stride, longer rows)."""
    t, c, group = 19, 128, 64
    wide = hard_input(t, 2 * c, torch.float32, seed=bits)
    x = wide[:, c:]
    assert not x.is_contiguous()
    q = quantised(reference, x, bits, group)
    for name, tensor in quantised(fused, x, bits, group).items():
        assert same_bits(q[name], tensor), name
    outs = {}
    for backend in (reference, fused):
        k_wide = torch.zeros(t, 2 * c)
        v_wide = torch.zeros(t, 2 * c)
        backend.dequantize_keys(q["k_codes"], q["k_scale"], q["k_zero"], bits, k_wide[:, :c])
        backend.dequantize_values(q["v_codes"], q["v_scale"], q["v_zero"], bits, group, v_wide[:, :c])
        outs[backend] = (k_wide, v_wide)
        assert not k_wide[:, c:].any() and not v_wide[:, c:].any()   # nothing written beside the view
    for a, b in zip(outs[reference], outs[fused]):
        assert same_bits(a, b)


def test_word_packing_covers_every_byte():
    for bits in (2, 4):
        per = 8 // bits
        every = torch.arange(256, dtype=torch.uint8).view(1, 256)                    # every packed byte
        codes = fused._unpack(every, bits).clone()                                    # [1, 256 * P]
        assert torch.equal(codes, reference.unpack_codes(every, bits).reshape(1, 256 * per))
        packed = torch.empty(1, 256, dtype=torch.uint8)
        fused._pack_into(codes, bits, packed)
        assert torch.equal(packed, every)


@settings(max_examples=25, deadline=None)
@given(t=st.integers(1, 70), groups=st.integers(1, 6), log_group=st.integers(2, 7),
       bits=st.sampled_from(BITS), scale=st.sampled_from([1e-7, 1e-3, 1.0, 300.0, 1e5]),
       seed=st.integers(0, 2 ** 16))
def test_random_shapes_and_ranges(t, groups, log_group, bits, scale, seed):
    group = 1 << log_group   # ≥ 4: whole bytes of codes at every width
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(t, groups * group, generator=g) * scale + scale * torch.rand(1, generator=g))
    assert_parity(x, bits, group, out_dtypes=(torch.float32, torch.bfloat16))


@pytest.mark.parametrize("bits", BITS)
def test_chunk_blocks_are_byte_identical(bits):
    cfg = model_config("tiny")
    fmt = ChunkFormat.from_layout(cfg.kv_layout(), bits=bits)
    g = torch.Generator().manual_seed(bits)
    shape = (1, fmt.tokens, fmt.heads, fmt.head_dim)                                  # [B, T, H, D]
    kv = [(torch.randn(shape, generator=g), torch.randn(shape, generator=g) * 3) for _ in range(fmt.layers)]
    blocks, reads = {}, {}
    for name in ("reference", "fused"):
        block = torch.full((fmt.slot_bytes,), 0xEE, dtype=torch.uint8)
        out = [(torch.empty(shape), torch.empty(shape)) for _ in range(fmt.layers)]
        with ops.use_backend(name):
            assert ops.backend_for(block) == name
            quantize_chunk_into(kv, fmt, block)
            dequantize_chunk_into(block, fmt, out)
        blocks[name], reads[name] = block, out
    assert torch.equal(blocks["reference"], blocks["fused"])
    for (k0, v0), (k1, v1) in zip(reads["reference"], reads["fused"]):
        assert same_bits(k0, k1) and same_bits(v0, v1)
