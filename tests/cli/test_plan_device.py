"""``worldpager plan`` for the whole device: LingBot-World-Fast on a 24 GiB card (int8 weights, blocks streamed,
KV per layer), MG2 on the same card unchanged (bf16, per-chunk KV), the chosen figures in the table and the
JSON, a predicted chunk time for a named GPU, the packaged 24 GiB preset, and a budget nothing fits."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests_support import one_line_error
from worldpager_cli.main import cli

GiB = 1 << 30
DEVICE_KEYS = ("weights_format", "resident_blocks", "streamed_blocks", "weight_bytes", "kv_paging", "kv_bytes",
               "activations", "context", "total", "budget", "pcie_bytes_per_chunk", "pcie_s", "compute_s",
               "chunk_s_predicted", "assumed")


def plan(*args):
    result = CliRunner().invoke(cli, ["plan", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def device_of(*args) -> dict:
    return json.loads(plan(*args, "--quiet").output.strip().splitlines()[-1])["device"]


def test_lingbot_fast_fits_a_24_gib_card_and_says_how():
    result = plan("--model", "lingbot-fast", "--device-mem", 24, "--minutes", 37.5, "--json")
    device = json.loads(result.stdout)["device"]
    assert all(key in device for key in DEVICE_KEYS)
    assert device["total"] <= 24 * GiB and device["budget"] == 24 * GiB and device["chosen"] is True
    assert (device["weights_format"], device["kv_paging"]) == ("int8", "layer")
    assert device["streamed_blocks"] > 0 and device["resident_blocks"] + device["streamed_blocks"] == 40
    assert device["text_encoder"] == "cpu" and device["pcie_bytes_per_chunk"] > 0
    assert "int8 weights" in result.stderr and "streamed through 2 slots" in result.stderr
    assert "KV per layer" in result.stderr


def test_mg2_on_24_gib_keeps_bf16_and_per_chunk_kv():
    summary = json.loads(plan("--preset", "mg2-4090-32g", "--minutes", 37.5, "--drive-bw", 1.0, "--quiet")
                         .output.strip().splitlines()[-1])
    device = summary["device"]
    assert (device["weights_format"], device["kv_paging"], device["streamed_blocks"]) == ("bf16", "chunk", 0)
    assert device["total"] <= 24 * GiB and device["pcie_s"] < 0.1
    assert summary["spill_chunk"]["device-bf16"] == 21 and summary["spill_chunk"]["host-int4"] == 226


def test_a_named_gpu_predicts_the_chunk_time():
    device = device_of("--model", "mg2-universal", "--device", "cuda", "--gpu", "rtx4090", "--minutes", 1)
    assert device["chunk_s_predicted"] == pytest.approx(1.2, abs=0.01) and device["budget"] == 24 * GiB
    assert "efficiency" in device["assumed"] and device["gpu"] == "rtx4090"
    lingbot = plan("--model", "lingbot-fast", "--device", "cuda", "--gpu", "rtx4090", "--minutes", 1)
    summary = json.loads(lingbot.output.strip().splitlines()[-1])
    assert summary["chunk_ms"] == pytest.approx(summary["device"]["chunk_s_predicted"] * 1e3, abs=1)
    assert "predicted (the longer of compute and PCIe)" in lingbot.output


def test_settings_the_session_gives_are_kept():
    device = device_of("--model", "lingbot-fast", "--device", "cuda", "--device-mem", 24, "--minutes", 1,
                       "--set", "weights=bf16", "--set", "memory.kv_paging=layer")
    assert (device["weights_format"], device["kv_paging"], device["chosen"]) == ("bf16", "layer", False)
    line = one_line_error(CliRunner().invoke(cli, [
        "plan", "--model", "lingbot-fast", "--device", "cuda", "--device-mem", "24", "--minutes", "1",
        "--set", "memory.kv_paging=chunk", "--set", "weights=bf16"]), "does not fit the 24.0 GiB device budget")
    assert "with --weights bf16 and --kv-paging chunk" in line


def test_a_budget_too_small_for_mg2_names_the_smallest_card():
    line = one_line_error(CliRunner().invoke(cli, ["plan", "--model", "mg2-universal", "--device", "cuda",
                                                   "--device-mem", "4", "--minutes", "1"]), "mg2-universal")
    assert "does not fit the 4.0 GiB device budget" in line and "RTX 4080 16 GB" in line


def test_the_4090_preset_loads_and_plans_within_24_gib():
    summary = json.loads(plan("--preset", "lingbot-fast-4090-24g", "--minutes", 37.5, "--drive-bw", 1.0, "--quiet")
                         .output.strip().splitlines()[-1])
    device = summary["device"]
    assert (device["weights_format"], device["kv_paging"], device["chosen"]) == ("int8", "layer", False)
    assert device["total"] <= 24 * GiB and summary["format"] == "int4" and summary["retrieve_k"] == 3
    assert summary["pool_slots"] >= 8 and summary["stall_predicted"] is False


def test_the_text_encoder_counts_on_the_device_only_when_put_there():
    cpu = device_of("--model", "lingbot-fast", "--device", "cuda", "--minutes", 1)
    on_device = device_of("--model", "lingbot-fast", "--device", "cuda", "--minutes", 1, "--set", "text_encoder=device")
    assert (cpu["text_encoder"], on_device["text_encoder"]) == ("cpu", "device")
    assert on_device["weight_bytes"] - cpu["weight_bytes"] == 2 * 5_680_910_336
    one_line_error(CliRunner().invoke(cli, ["plan", "--model", "lingbot-fast", "--minutes", "1", "--set",
                                            "text_encoder=gpu"]), "text_encoder must be one of cpu, device")


def test_a_model_without_weights_too_big_for_its_budget_is_one_line():
    line = one_line_error(CliRunner().invoke(cli, ["plan", "--model", "synthetic", "--device", "cuda", "--device-mem",
                                                   "0.2", "--minutes", "1"]), "synthetic does not fit the 0.2 GiB")
    assert "the least it needs is" in line
