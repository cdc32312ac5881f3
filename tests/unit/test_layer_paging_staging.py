"""``--kv-paging layer`` keeps no retrieved chunk on the device outside its two layer pages.

The store's staging banks and the session's device cache live in host memory (``staging_home``; pinned
banks on CUDA, dequantised there by the device kernel one layer at a time: ``dequantize_through``); the
shared counts (``engine.planner.session_kv``) put 0 staging chunks on the device and count them on the
host side instead: the weight pager's KV, pre-flight's estimate, the whole-device plan. And the blocks'
budget is one rule (``engine.planner.device.block_budget``): a session keeps the blocks its plan says.
"""
from __future__ import annotations

import pytest
import torch

from engine.config import model_config
from engine.errors import ConfigError
from engine.facts.kv_format import ChunkFormat
from engine.facts.lingbot_models import lingbot_config
from engine.memory import quant
from engine.memory.store import KVStore
from engine.memory.transfer import dequantize_through
from engine.model import weight_place
from engine.planner import session_kv
from engine.planner.block_shapes import model_weights
from engine.planner.device import (CONTEXT_BYTES, RESERVE_BYTES, block_budget, device_plan,
                                   device_buffer_bytes, least_budget, runtime_reserve)
from engine.planner.kv_paging import paged_kv_device_bytes
from engine.planner.model import planned_model
from engine.planner.session_device import session_device_inputs
from engine.session.memory import staging_home
from engine.session.preflight import Budget, check_memory
from engine.settings.overlay import resolve_session_config

GiB, MiB = 1 << 30, 1 << 20
TINY = model_config("tiny")
LAYOUT = TINY.kv_layout()


def _cfg(model: str, paging: str, weights: str = "bf16", **memory):
    return resolve_session_config(None, {"model": model, "out": "/nonexistent/x.mp4", "weights": weights,
                                         "memory": {"kv_paging": paging, **memory}})


def _chunk(seed: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    shape = (1, LAYOUT.tokens_per_chunk, LAYOUT.heads, LAYOUT.head_dim)
    return [(torch.randn(shape, generator=g).to(dtype), (3 * torch.randn(shape, generator=g)).to(dtype))
            for _ in range(LAYOUT.layers)]


# ---- where the staging lives ------------------------------------------------------------------------

def test_layer_paging_stages_in_host_memory_and_chunk_paging_on_the_device():
    cuda = torch.device("cuda")
    assert staging_home(cuda, "layer") == torch.device("cpu")
    assert staging_home(cuda, "chunk") == cuda
    assert staging_home(torch.device("cpu"), "layer") == staging_home(torch.device("cpu"), "chunk")


@pytest.mark.parametrize("bits", [16, 4, 2])
def test_a_chunk_dequantised_a_layer_at_a_time_through_a_scratch_is_the_whole_chunks_bit_for_bit(bits):
    """The host banks' path on CUDA (one layer through a device scratch, copied out) computes what the
    device banks' whole-chunk dequantisation does: the same kernel on the same bytes."""
    fmt = ChunkFormat.from_layout(LAYOUT, bits=bits, raw_dtype="float32" if bits == 16 else "bfloat16")
    dtype = torch.float32
    block = torch.zeros(fmt.slot_bytes, dtype=torch.uint8)
    quant.quantize_chunk_into(_chunk(7), fmt, block)
    whole = [(torch.empty_like(k), torch.empty_like(v)) for k, v in _chunk(0, dtype)]
    layered = [(torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))) for k, v in _chunk(0, dtype)]
    quant.dequantize_chunk_into(block, fmt, whole)
    scratch = torch.empty((2, *whole[0][0].shape), dtype=dtype)
    dequantize_through(block, fmt, layered, scratch)
    for (k, v), (k2, v2) in zip(whole, layered, strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)


def test_the_store_counts_its_banks_where_they_are(tmp_path):
    fmt = ChunkFormat.from_layout(LAYOUT, bits=4)
    with KVStore(LAYOUT, fmt, n_slots=4, spill_dir=tmp_path / "s", k_slots=2) as store:
        banks = store.counters()["staging_bank_bytes"]
        assert banks == 2 * fmt.layers * 2 * LAYOUT.tokens_per_chunk * LAYOUT.heads * LAYOUT.head_dim * 4
        assert store.counters()["staging_device_bytes"] == banks      # the CPU is this store's device
        store.put(0, _chunk(0))
        store.stage([0])
        assert store.take_staged(timeout=30).hits == (0,)
        assert store.counters()["device_stage_bytes"] > 0 and store.counters()["host_stage_bytes"] == 0


@pytest.mark.gpu
def test_a_cuda_store_with_host_banks_stages_what_device_banks_do(tmp_path):
    dev = torch.device("cuda")
    fmt = ChunkFormat.from_layout(LAYOUT, bits=4)
    staged = {}
    for where in ("cuda", "cpu"):
        with KVStore(LAYOUT, fmt, n_slots=4, spill_dir=tmp_path / where, device=dev, stage_on=where) as store:
            store.put(0, [(k.to(dev, torch.bfloat16), v.to(dev, torch.bfloat16)) for k, v in _chunk(3)])
            store.stage([0])
            (k0, _), *_ = staged[where] = [(k.cpu(), v.cpu()) for k, v in store.take_staged(timeout=30).kv[0]]
            on_device = store.counters()["staging_device_bytes"]
            assert (on_device == 0) == (where == "cpu")
            if where == "cpu":
                assert store.take_staged().kv[0][0][0].is_pinned()
    for (k, v), (k2, v2) in zip(staged["cuda"], staged["cpu"], strict=True):
        assert torch.equal(k, k2) and torch.equal(v, v2)


# ---- the shared counts ------------------------------------------------------------------------------

def test_layer_paging_counts_no_staging_on_the_device_and_all_of_it_on_the_host():
    for model in ("lingbot-fast", "lingbot-tiny", "tiny"):
        chunk, layer = _cfg(model, "chunk"), _cfg(model, "layer")
        lay = planned_model(chunk).layout
        every = session_kv.all_staging_chunks(chunk, lay)
        assert every >= 3
        assert (session_kv.staging_chunks(chunk, lay), session_kv.host_staging_chunks(chunk, lay)) == (every, 0)
        assert (session_kv.staging_chunks(layer, lay), session_kv.host_staging_chunks(layer, lay)) == (0, every)
        memory = layer.memory.retrieve_k + (1 if layer.memory.sink else 0)
        assert session_kv.kv_device_bytes(layer, lay, 2) == paged_kv_device_bytes(lay, memory)


def test_lingbot_fasts_device_kv_under_layer_paging_is_its_two_pages():
    """12.1 GiB of device KV before (pages and three 7.67 GB bf16 staging chunks); now the pages alone."""
    cfg = _cfg("lingbot-fast", "layer")
    kv = weight_place.kv_device_bytes(cfg, torch.bfloat16)
    assert kv < 1.5 * GiB and kv == paged_kv_device_bytes(planned_model(cfg).layout, 3)


def test_preflight_puts_the_layer_paged_staging_and_context_on_the_host():
    cfg = _cfg("lingbot-fast", "layer")
    m = planned_model(cfg)
    kw = {"dtype_bytes": 2, "dtype_name": "bfloat16", "host": Budget(10 ** 15, "host", "test")}
    est = check_memory(cfg, m.grid, m.layout, device=Budget(2 * GiB, "device", "test"), **kw)
    host, device = est.total(on_device=True)
    assert est.staging == 0 and est.host_staging == 3 * m.layout.bytes_per_chunk(2)
    assert device == est.context < 1.5 * GiB and host >= est.host_staging + est.host_context
    with pytest.raises(ConfigError, match="--retrieve-k 3 needs .* of device memory"):
        check_memory(_cfg("lingbot-fast", "chunk"), m.grid, m.layout, device=Budget(2 * GiB, "device", "test"), **kw)
    small = {**kw, "host": Budget(est.host_staging + est.host_context, "host", "test")}
    with pytest.raises(ConfigError, match="--retrieve-k 3 needs .* of host memory"):
        check_memory(cfg, m.grid, m.layout, device=Budget(2 * GiB, "device", "test"), **small)


def test_the_plan_moves_the_staging_to_the_host_side_under_layer_paging():
    cfg = _cfg("lingbot-fast", "layer", "int8", device_mem_gib=24)
    m, w = planned_model(cfg), model_weights("lingbot-fast")
    inputs = session_device_inputs(cfg, m, None)
    assert inputs.staging_chunks == 3
    plan = device_plan(m, w, inputs)
    streamed = sum(w.block_bytes(plan.weights_format)[plan.residency.resident:])
    staging = 3 * m.kv_bytes_per_chunk(2.0)
    assert plan.kv_bytes == paged_kv_device_bytes(m.layout, 3)
    assert plan.host_bytes == streamed + device_buffer_bytes(m, 3, False) + staging
    assert plan.residency.resident > 20           # 3 of 40 blocks resident while the staging was on the device


# ---- one budget rule --------------------------------------------------------------------------------

def test_the_reserve_is_the_calibrated_figure_on_every_listed_card_and_a_share_of_a_small_budget():
    full = CONTEXT_BYTES + RESERVE_BYTES
    assert runtime_reserve(16 * GiB) == runtime_reserve(None) == full
    assert 0 < runtime_reserve(16 * MiB) < 8 * MiB
    for need in (MiB, 3 * MiB, GiB, 20 * GiB):
        least = least_budget(need)
        assert least - runtime_reserve(least) >= need > least - 8 - runtime_reserve(least - 8)   # (rounding)


def _placed(cfg, build):
    blocks, others = build()
    return weight_place.place_weights(blocks, cfg, torch.device("cpu"), torch.bfloat16, others)


def _lingbot_tiny():
    from engine.model.lingbot.family import _seeded

    dit, vae = _seeded(lingbot_config("lingbot-tiny"), torch.device("cpu"), torch.bfloat16)
    return dit.blocks, (dit, vae)


@pytest.mark.parametrize("mib", [16, 17, 18, 19, 20, 64])
def test_a_lingbot_tiny_session_places_its_blocks_as_its_plan_says(mib):
    """The same budget for the blocks, to the byte, and so the same residency or the same refusal."""
    cfg = _cfg("lingbot-tiny", "layer", device_mem_gib=mib / 1024)
    m = planned_model(cfg)
    try:
        plan = device_plan(m, model_weights(m.name), session_device_inputs(cfg, m, None))
    except ConfigError:
        plan = None
    try:
        placed = _placed(cfg, _lingbot_tiny)
    except ConfigError:
        placed = None
    assert (plan is None) == (placed is None)
    if plan is not None:
        assert placed.residency == plan.residency
        assert placed.budget == plan.budget - (plan.total - plan.residency.device_bytes)
        assert placed.other_bytes == plan.fixed_weight_bytes


def test_the_arena_model_streams_by_the_plans_rule():
    """The arena model (no shapes in the planner: no activation estimate) takes the same rule: --device-mem
    less its KV, its other weights and the reserve; at 16 MiB (of 10.3 MB of fp32 weights) it streams."""
    from engine.arena.weights import load_model

    cfg = resolve_session_config(None, {"model": "arena", "out": "/nonexistent/x.mp4",
                                        "memory": {"store": "window", "device_mem_gib": 16 / 1024}})
    model = load_model(None, torch.device("cpu"), torch.float32)
    placed = weight_place.place_weights(model.blocks, cfg, torch.device("cpu"), torch.float32, (model,))
    total = 16 * MiB
    assert weight_place.activations_of(cfg) == 0
    assert placed.budget == block_budget(total, weight_place.kv_device_bytes(cfg, torch.float32), placed.other_bytes,
                                         0, runtime_reserve(total))
    assert placed.residency.streamed > 0


def test_a_cuda_session_sizes_its_pool_around_the_host_staging_under_layer_paging(monkeypatch):
    """The pool of a CUDA session leaves room for the staging banks and cache it keeps in host memory with
    layer paging (with chunk paging they are on the device): the pool-sizing rule itself, device named."""
    from types import SimpleNamespace

    import engine.memory.host_pool as host_pool
    from engine.session.memory import SessionMemory

    monkeypatch.setattr(host_pool, "process_baseline_bytes", lambda: GiB)   # not the test process's RSS
    fmt = ChunkFormat.from_layout(LAYOUT, bits=4)
    slots = {}
    for paging in ("chunk", "layer"):
        cfg = resolve_session_config(None, {"model": "tiny", "out": "/nonexistent/x.mp4", "chunks": 10 ** 6,
                                            "memory": {"kv_paging": paging, "host_mem_gib": 8}})
        me = SimpleNamespace(layout=LAYOUT, host_baseline_bytes=None)
        slots[paging] = SessionMemory._pool_slots(me, cfg, fmt.slot_bytes, torch.device("cuda"), torch.bfloat16)
    staging = session_kv.all_staging_chunks(cfg, LAYOUT) * LAYOUT.bytes_per_chunk(2)
    assert staging > 0 and slots["layer"] < slots["chunk"]
    assert slots["chunk"] - slots["layer"] in (staging // fmt.slot_bytes, staging // fmt.slot_bytes + 1)
