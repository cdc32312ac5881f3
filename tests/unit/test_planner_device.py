"""The whole-device plan (``engine.planner.device``): per-block weight bytes from the model's shapes (counted
again on the meta device), the per-layer KV formula, the chosen weight format and KV paging, PCIe traffic,
and the compute model's calibration to the paper's MG2 on an RTX 4090."""
from __future__ import annotations

import pytest
import torch

from engine.config import MODEL_CONFIGS
from engine.errors import ConfigError
from engine.facts.lingbot_models import LINGBOT_CONFIGS, LINGBOT_FAST
from engine.model.facts import count_parameters
from engine.model.lingbot.weights import empty_model
from engine.model.mg2 import CausalDiT
from engine.planner.kv_paging import paged_kv_device_bytes
from engine.planner import device as dev
from engine.planner.block_shapes import model_weights, umt5_params
from engine.planner.gpus import EFFICIENCY, GPUS, MG2_DIT_PARAMS, compute_s
from engine.planner.weight_plan import linear_bytes, resident_blocks

GiB = 1 << 30
LINGBOT = LINGBOT_FAST.shape()
MG2 = MODEL_CONFIGS["mg2-universal"].shape()


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_mg2_blocks_counted_from_shapes_are_the_networks(name):
    with torch.device("meta"):
        net = CausalDiT(MODEL_CONFIGS[name].dit)
    w = model_weights(name)
    assert [b.params for b in w.blocks] == [count_parameters(b) for b in net.blocks]
    assert w.dit_params == count_parameters(net)
    assert w.dit_params + w.aux_params == MODEL_CONFIGS[name].shape().device_params


@pytest.mark.parametrize("name", sorted(LINGBOT_CONFIGS))
def test_lingbot_blocks_counted_from_shapes_are_the_networks(name):
    net = empty_model(LINGBOT_CONFIGS[name].dit)
    w = model_weights(name)
    assert [b.params for b in w.blocks] == [count_parameters(b) for b in net.blocks]
    assert w.dit_params == count_parameters(net)


def test_a_block_in_int8_quantises_the_attention_and_feed_forward_only():
    block = model_weights("lingbot-fast").blocks[0]
    d, f = 5120, 13824
    quantised = 8 * linear_bytes(d, d, "int8") + linear_bytes(f, d, "int8") + linear_bytes(d, f, "int8")
    assert block.nbytes("int8") == quantised + (block.params - 8 * (d * d + d) - 2 * d * f - f - d) * 2
    assert block.nbytes("bf16") == block.params * 2
    assert umt5_params() == 5_680_910_336       # Wan's UMT5-XXL encoder, 11.4 GB in bf16


def test_per_layer_kv_is_two_layers_of_memory_window_and_current():
    layout = LINGBOT.layout                     # 4680 tokens a chunk, 12 window frames = 18720 tokens
    assert paged_kv_device_bytes(layout, memory_chunks=4) == 2 * (4 * 4680 + 18720 + 4680) * 40 * 128 * 2 * 2


def test_mg2_keeps_its_calibrated_device_baseline():
    """The reserve makes MG2's runtime the fitted 7.6 GiB: the device tier's spill point is the paper's."""
    plan = dev.device_plan(MG2, model_weights(MG2.name), dev.DeviceInputs(budget=24 * GiB))
    assert (plan.weights_format, plan.kv_paging, plan.residency.streamed) == ("bf16", "chunk", 0)
    assert plan.activations + plan.context + plan.reserve == int(7.6 * GiB)
    assert plan.total == MG2.device_params * 2 + int(7.6 * GiB) + 5 * MG2.kv_bytes_per_chunk(2.0)


@pytest.mark.parametrize("gib, fmt, paging, streamed", [
    (80, "bf16", "chunk", False), (48, "bf16", "layer", False), (32, "int8", "layer", False),
    (24, "int8", "layer", True), (16, "int8", "layer", True)])   # layer paging: no staging on the device
def test_the_plan_chooses_the_first_that_fits(gib, fmt, paging, streamed):
    inputs = dev.DeviceInputs(retrieve_k=3, sink=True, budget=gib * GiB)
    plan = dev.device_plan(LINGBOT, model_weights("lingbot-fast"), inputs)
    assert (plan.weights_format, plan.kv_paging, plan.residency.streamed > 0) == (fmt, paging, streamed)
    assert plan.total <= gib * GiB and plan.chosen
    blocks = model_weights("lingbot-fast").block_bytes(fmt)
    rest = plan.total - plan.residency.device_bytes
    assert plan.residency == resident_blocks(blocks, gib * GiB - rest) or not streamed


def test_set_choices_are_kept_and_a_budget_none_fits_names_the_least():
    w = model_weights("lingbot-fast")
    with pytest.raises(ConfigError, match=r"with --weights bf16 and --kv-paging chunk: the least it needs is"):
        dev.device_plan(LINGBOT, w, dev.DeviceInputs(weights="bf16", kv_paging="chunk", budget=24 * GiB))
    with pytest.raises(ConfigError, match=r"any weight format and KV paging.*int8 weights, every block streamed, "
                                          r"KV per layer\); the smallest listed GPU that holds it: RTX 4080 16 GB"):
        dev.device_plan(LINGBOT, w, dev.DeviceInputs(budget=6 * GiB))
    plan = dev.device_plan(LINGBOT, w, dev.DeviceInputs(weights="bf16", budget=24 * GiB))
    assert plan.weights_format == "bf16" and plan.residency.streamed > 0     # bf16 set: streamed in bf16


def test_pcie_traffic_is_streamed_blocks_per_pass_plus_kv():
    w = model_weights("lingbot-fast")
    plan = dev.device_plan(LINGBOT, w, dev.DeviceInputs(retrieve_k=3, budget=24 * GiB))
    streamed = sum(w.block_bytes("int8")[plan.residency.resident:])
    per_token = 40 * 5120 * 2 * 2
    kv = 5 * (3 * 4680 + 18720) * per_token + 4680 * per_token
    staged = 3 * (0 + 4680 * per_token)      # k staged chunks dequantised on the device, then copied to the host
    assert w.passes == 5 and plan.pcie_bytes_per_chunk == streamed * 5 + kv + staged
    slower = dev.device_plan(LINGBOT, w, dev.DeviceInputs(retrieve_k=3, budget=24 * GiB, pcie_gbs=12.5))
    assert slower.pcie_s == pytest.approx(2 * plan.pcie_s)
    chunk = dev.device_plan(MG2, model_weights(MG2.name), dev.DeviceInputs(stored_chunk_bytes=1000))
    assert chunk.pcie_bytes_per_chunk == 4 * 1000             # k retrieved in, the stored chunk out


def test_compute_is_calibrated_to_mg2_on_a_4090():
    assert model_weights("mg2-universal").dit_params == MG2_DIT_PARAMS
    assert compute_s(MG2_DIT_PARAMS, 2640, 4, GPUS["rtx4090"]) == pytest.approx(1.2, abs=0.005)
    assert 0.1 < EFFICIENCY < 0.3
    plan = dev.device_plan(MG2, model_weights(MG2.name), dev.DeviceInputs(gpu=GPUS["h100"]))
    assert plan.chunk_s_predicted == pytest.approx(1.2 * 165.2 / 989.4, rel=0.01)


def test_without_flash_attention_the_scores_count():
    w = model_weights("lingbot-fast")
    flash = dev.device_plan(LINGBOT, w, dev.DeviceInputs(retrieve_k=3))
    plain = dev.device_plan(LINGBOT, w, dev.DeviceInputs(retrieve_k=3, flash=False))
    context = 3 * 4680 + 18720 + 4680
    dit = 4680 * (6 * 5120 + 2 * 13824) * 2
    assert plain.activations == dit + 40 * 4680 * context * 2 and flash.activations == max(dit, 4 * 480 * 832 * 96 * 4 * 2)
    assert "flash_attention" in flash.assumed and "flash_attention" not in plain.assumed
