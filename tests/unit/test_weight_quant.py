"""Weight-only quantisation (``engine.model.weight_quant``): which linears, the per-channel rule, the bytes
the planner counts, the layer's math; and the report's weights line."""
from __future__ import annotations

import torch
import torch.nn as nn

from engine.config import model_config
from engine.facts.lingbot_models import lingbot_config
from engine.model.weight_quant import (QUANTISED_LINEARS, QuantLinear, dequantise, quantise_blocks, quantise_weight,
                                       quantised_names)
from engine.model.weight_stream import block_bytes
from engine.planner.weight_plan import linear_bytes


def _mg2_dit():
    from engine.model.mg2 import CausalDiT

    return CausalDiT(model_config("micro").dit)


def _lingbot_dit():
    from engine.model.lingbot.dit import WanModelFast

    return WanModelFast(lingbot_config("lingbot-tiny").dit)


def _arena():
    from engine.arena.model import ArenaDiT

    return ArenaDiT()


ATTENTION_AND_FFN = sorted(f"{p}.{x}" for p in ("self_attn", "cross_attn") for x in "qkvo") + ["ffn.0", "ffn.2"]


def test_the_large_linears_are_quantised_and_the_injectors_norms_and_heads_are_not():
    mg2, lingbot, arena = _mg2_dit(), _lingbot_dit(), _arena()
    for block in mg2.blocks:
        assert sorted(quantised_names(block)) == sorted(ATTENTION_AND_FFN)
    assert any(b.action_model is not None for b in mg2.blocks)       # MG2's action module stays
    for block in lingbot.blocks:
        names = quantised_names(block)
        assert sorted(names) == sorted(ATTENTION_AND_FFN) and not any(n.startswith("cam_") for n in names)
    for block in arena.blocks:
        assert sorted(quantised_names(block)) == ["mlp.0", "mlp.2", "o", "qkv"]   # not the modulation
    for dit in (mg2, lingbot, arena):
        quantise_blocks(dit.blocks, "int8")
        kept = [m for b in dit.blocks for n, m in b.named_modules() if isinstance(m, nn.Linear)]
        assert kept and all(isinstance(b.get_submodule(n), QuantLinear) for b in dit.blocks
                            for n in QUANTISED_LINEARS if _has(b, n))
        assert not any(isinstance(m, QuantLinear) for n, m in dit.named_modules() if not n.startswith("blocks."))


def _has(block, name):
    try:
        block.get_submodule(name)
    except AttributeError:
        return False
    return True


def test_int8_is_symmetric_per_output_channel_with_fp32_scales():
    torch.manual_seed(0)
    w = torch.randn(6, 32) * torch.tensor([1e-3, 1, 10, 100, 0, 3])[:, None]
    values, scale = quantise_weight(w, "int8")
    assert values.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (6,)
    assert int(values.abs().max()) == 127 and torch.all(values[4] == 0)
    back = dequantise(values, scale, torch.float32)
    assert torch.all((back - w).abs() <= scale[:, None] / 2 + 1e-7)


def test_fp8_rounds_through_float8_e4m3fn():
    w = torch.randn(8, 16)
    values, scale = quantise_weight(w, "fp8")
    assert values.dtype == torch.float8_e4m3fn
    rel = (dequantise(values, scale, torch.float32) - w).norm() / w.norm()
    assert 0 < rel < 0.05


def test_a_quantised_linear_computes_with_its_dequantised_weight_and_costs_the_planners_bytes():
    torch.manual_seed(1)
    linear = nn.Linear(32, 24)
    q = QuantLinear(linear, "int8")
    x = torch.randn(3, 32)
    weight = dequantise(q.qweight, q.scale, torch.float32)
    assert torch.equal(q(x), nn.functional.linear(x, weight, linear.bias))
    assert (q(x) - linear(x)).norm() / linear(x).norm() < 0.02
    stored = sum(t.numel() * t.element_size() for t in list(q.buffers()) + list(q.parameters()))
    assert stored == linear_bytes(24, 32, "int8", compute_bytes=4)


def test_int8_halves_a_bf16_block_or_better():
    dit = _lingbot_dit().to(torch.bfloat16)
    before = block_bytes(dit.blocks[0])
    quantise_blocks(dit.blocks, "int8")
    assert block_bytes(dit.blocks[0]) < 0.75 * before


def test_the_report_shows_the_weights(tmp_path):
    from engine.settings.overlay import resolve_session_config
    from engine.report.read import read_session
    from engine.report.summary import summary_rows
    from engine.session.loop import Session

    cfg = resolve_session_config(None, {"model": "arena", "look_around": 0, "chunks": 2, "weights": "int8",
                                        "out": tmp_path / "a.mp4", "save_every": 0,
                                        "memory": {"store": "window", "device_mem_gib": 12 / 1024}})
    assert Session(cfg).run().status == "done"
    rows = dict(summary_rows([read_session(cfg.log_path)]))
    cell = rows["weights"][0]
    assert cell.startswith("int8, 0/4 blocks resident") and "streamed" in cell and "0.0 MiB streamed" not in cell


def test_a_gpu_session_that_quantises_or_streams_loads_its_dit_in_host_memory_first():
    """So that the device never holds the whole bf16 model (a 24 GiB card could not load LingBot's)."""
    import dataclasses

    from engine.config import MemoryConfig, SessionConfig
    from engine.model.weight_place import staging_device

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    plain = SessionConfig()
    assert staging_device(plain, cuda) == cuda and staging_device(plain, cpu) == cpu
    assert staging_device(dataclasses.replace(plain, weights="int8"), cuda) == cpu
    assert staging_device(dataclasses.replace(plain, memory=MemoryConfig(device_mem_gib=24.0)), cuda) == cpu


def test_the_error_script_measures_int8_on_both_parity_fixtures(capsys):
    """``scripts/weights_error.py``: a table and one JSON line; int8's error is measured, not zero, and
    far below the fixtures' gap to an unrelated output (order 1)."""
    import importlib.util
    import json
    from pathlib import Path

    import pytest

    script = Path(__file__).resolve().parents[2] / "scripts" / "weights_error.py"
    spec = importlib.util.spec_from_file_location("weights_error", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fixtures = module.SHARED
    if not (fixtures / "mg2_parity" / "universal_tiny.safetensors").is_file() or \
            not (fixtures / "lingbot_parity" / "cam_tiny.safetensors").is_file():
        pytest.skip(f"parity fixtures not found under {fixtures}")
    assert module.main(["--formats", "int8"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:2] == ["fixture", "weights"] and len(lines) == 4
    results = json.loads(lines[-1])["results"]
    assert set(results) == {"mg2 universal_tiny int8", "lingbot cam_tiny int8"}
    assert all(1e-4 < r["velocity"] < 0.1 and 1e-4 < r["latents"] < 0.1 for r in results.values())
    assert module.main(["--mg2", str(fixtures / "missing.safetensors")]) == 1
