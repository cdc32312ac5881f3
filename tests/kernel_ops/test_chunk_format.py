"""The chunk block format: byte arithmetic for MG2, round trips on the tiny model, layout views."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from engine.config import model_config
from engine.errors import ConfigError
from engine.facts.kv_format import ChunkFormat, byte_figures
from engine.memory.quant import dequantize_chunk_into, layer_views, quantize_chunk_into

from ._bounds import key_error_ok, value_error_ok

MG2 = model_config("mg2-universal")
TINY = model_config("tiny")


def test_mg2_int4_chunk_is_129_438_720_bytes():
    fmt = ChunkFormat.from_layout(MG2.kv_layout())  # arithmetic only: nothing is allocated
    assert fmt.nbytes == 129_438_720
    assert fmt.slot_bytes == 129_441_792 and fmt.slot_bytes % 4096 == 0
    offsets = {s.name: (s.offset, s.nbytes) for s in fmt.sections}
    assert offsets == {"k_codes": (0, 2_027_520), "k_scale": (2_027_520, 3_072),
                       "k_zero": (2_030_592, 3_072), "v_codes": (2_033_664, 2_027_520),
                       "v_scale": (4_061_184, 126_720), "v_zero": (4_187_904, 126_720)}
    assert fmt.layer_bytes == 4_314_624


def test_byte_figures_for_inspect():
    assert byte_figures(MG2.kv_layout()) == {"bf16": 486_604_800, "int8": 251_089_920, "int4": 129_438_720,
                                             "int2": 68_613_120}
    assert byte_figures(MG2.kv_layout())["bf16"] == MG2.kv_bytes_per_chunk()


def test_layout_module_imports_no_torch():
    """The planner (torch-free) may use ChunkFormat."""
    code = "import sys, engine.facts.kv_format as f; f.ChunkFormat.from_layout; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_invalid_formats_name_the_value():
    with pytest.raises(ConfigError, match="bits=3"):
        ChunkFormat.from_layout(TINY.kv_layout(), bits=3)
    with pytest.raises(ConfigError, match="value_group=48"):
        ChunkFormat.from_layout(TINY.kv_layout(), value_group=48)
    with pytest.raises(ConfigError, match="int8"):
        ChunkFormat.from_layout(TINY.kv_layout(), bits=16, raw_dtype="int8")


def _tiny_kv(dtype: torch.dtype, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    shape = (1, TINY.tokens_per_chunk, TINY.dit.num_heads, TINY.dit.head_dim)  # [B, T, H, D]
    return [(torch.randn(shape, generator=g).to(dtype), (torch.randn(shape, generator=g) * 3).to(dtype))
            for _ in range(TINY.dit.num_layers)]


def _staging(fmt: ChunkFormat, dtype: torch.dtype):
    """Output views like a LayerKV memory region: a token slice of a bigger [1, T', H, D] buffer."""
    pad = 7
    outs, bufs = [], []
    for _ in range(fmt.layers):
        pair = []
        for _ in range(2):
            buf = torch.full((1, fmt.tokens + 2 * pad, fmt.heads, fmt.head_dim), float("nan"), dtype=dtype)
            bufs.append(buf)
            pair.append(buf[:, pad:pad + fmt.tokens])
        outs.append(tuple(pair))
    return outs, bufs


@pytest.mark.parametrize("dtype,raw", [(torch.float32, "float32"), (torch.bfloat16, "bfloat16")])
def test_unquantised_round_trip_is_exact(dtype, raw):
    fmt = ChunkFormat.from_layout(TINY.kv_layout(), bits=16, raw_dtype=raw)
    kv = _tiny_kv(dtype)
    block = torch.full((fmt.slot_bytes,), 0xAB, dtype=torch.uint8)
    quantize_chunk_into(kv, fmt, block)
    assert not block[fmt.nbytes:].any()                           # slot tail zeroed
    out, bufs = _staging(fmt, dtype)
    dequantize_chunk_into(block, fmt, out)
    for (k, v), (ko, vo) in zip(kv, out):
        assert torch.equal(k, ko) and torch.equal(v, vo)
    assert all(b[:, :7].isnan().all() and b[:, -7:].isnan().all() for b in bufs)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantised_round_trip_within_bound(bits):
    fmt = ChunkFormat.from_layout(TINY.kv_layout(), bits=bits)
    assert fmt.nbytes == byte_figures(TINY.kv_layout())[f"int{bits}"]
    kv = _tiny_kv(torch.float32, seed=bits)
    block = torch.empty(fmt.slot_bytes, dtype=torch.uint8)        # [slot_bytes]
    quantize_chunk_into(kv, fmt, block)
    out, _ = _staging(fmt, torch.float32)
    dequantize_chunk_into(block, fmt, out)
    t, c = fmt.tokens, fmt.channels
    for layer, ((k, v), (ko, vo)) in enumerate(zip(kv, out)):
        views = layer_views(fmt, block, layer)
        assert key_error_ok(k[0].reshape(t, c), ko[0].reshape(t, c), views["k_scale"], views["k_zero"], bits)
        assert value_error_ok(v[0].reshape(t, c), vo[0].reshape(t, c), views["v_scale"], views["v_zero"],
                              bits, fmt.value_group)


def test_block_is_deterministic_and_layer_local():
    fmt = ChunkFormat.from_layout(TINY.kv_layout(), bits=4)
    kv = _tiny_kv(torch.float32)
    a = torch.empty(fmt.slot_bytes, dtype=torch.uint8)
    b = torch.zeros(fmt.slot_bytes, dtype=torch.uint8)
    quantize_chunk_into(kv, fmt, a)
    quantize_chunk_into(kv, fmt, b)
    assert torch.equal(a, b)
    kv[1] = (kv[1][0] + 1, kv[1][1])                               # change layer 1 only
    quantize_chunk_into(kv, fmt, b)
    lb = fmt.layer_bytes
    assert torch.equal(a[:lb], b[:lb]) and not torch.equal(a[lb:2 * lb], b[lb:2 * lb])
