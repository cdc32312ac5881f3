"""The whole-device plan of a resolved session config, as ``worldpager plan`` asks for it.

Owns ``session_device_inputs``: the ``engine.planner.device.DeviceInputs`` of a session — its k, sink, KV
format and text-encoder placement; its weight format and KV paging only where the session sets them
(otherwise the plan chooses); the device budget (``--device-mem``, else the named GPU's memory); the
GPU (``--gpu``) and PCIe rate (``--pcie-gbs``); the store's staging chunks (``engine.planner.session_kv``);
a given device baseline (``--device-baseline-gib``) standing for the weights' bf16 bytes plus the runtime.
And ``given_settings``: which of the weight format and the KV paging a config sets (a preset, the user's
config file, a flag), found by resolving it once more over a different default. No torch.
"""
from __future__ import annotations

from engine.config import SessionConfig
from engine.settings.overlay import merged_overlays, resolve_session_config
from engine.planner.device import PCIE_GBS, DeviceInputs
from engine.planner.gpus import GPU
from engine.planner.session_kv import all_staging_chunks
from engine.planner.model import FORMAT_BITS, bytes_per_chunk, device_weight_bytes, format_name
from engine.facts.layout import ModelShape

GiB = 1 << 30
# Settings no session defaults to: a config that resolves to the same value over them sets it itself.
_PROBE = {"weights": "fp8", "memory": {"kv_paging": "layer"}}


def given_settings(preset, flags: dict, base: dict, cfg: SessionConfig) -> tuple[bool, bool]:
    """(weights given, kv_paging given) by the preset, the base (the user's config file) or the flags."""
    probe = resolve_session_config(preset, flags, merged_overlays(_PROBE, base))
    return probe.weights == cfg.weights, probe.memory.kv_paging == cfg.memory.kv_paging


def device_budget_gib(cfg: SessionConfig, card: GPU | None) -> float | None:
    """``--device-mem``, else the named GPU's memory, else unknown."""
    if cfg.memory.device_mem_gib is not None:
        return cfg.memory.device_mem_gib
    return None if card is None else card.memory_gib


def session_device_inputs(cfg: SessionConfig, model: ModelShape, card: GPU | None, *, weights_given: bool = True,
                          paging_given: bool = True, pcie_gbs: float = PCIE_GBS,
                          device_baseline_gib: float | None = None, raw_dtype: str = "bfloat16") -> DeviceInputs:
    mem = cfg.memory
    budget = device_budget_gib(cfg, card)
    runtime = (None if device_baseline_gib is None else
               max(0, int(device_baseline_gib * GiB) - device_weight_bytes(model)))
    stored = bytes_per_chunk(model, raw_dtype)[format_name(mem.kv_bits)] if mem.kv_bits in FORMAT_BITS.values() else 0
    return DeviceInputs(retrieve_k=mem.retrieve_k, sink=mem.sink, weights=cfg.weights if weights_given else None,
                        kv_paging=mem.kv_paging if paging_given else None,
                        budget=None if budget is None else int(budget * GiB), stored_chunk_bytes=stored,
                        text_on_device=cfg.text_encoder == "device", gpu=card,
                        pcie_gbs=pcie_gbs, runtime_bytes=runtime,
                        staging_chunks=all_staging_chunks(cfg, model.layout))
