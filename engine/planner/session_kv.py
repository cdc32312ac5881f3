"""The KV a session keeps on the device and in host memory, in chunks: its attention context and the store's staging.

Owns the counts that pre-flight (``engine.session.preflight``: the memory estimate, the budgets), the
session's memory (its staging slots and device cache) and the weight pager (``engine.model.weight_place``:
what the blocks may use of ``--device-mem``) must agree on. Torch-free, beside the rest of the planner,
so that a model's loader reads the same rule without importing the session.

With ``--kv-paging chunk`` the attention context and the staging (the store's banks and the session's
device cache of dequantised chunks) are on the device. With ``--kv-paging layer`` the device holds two
layer pages of the context (``engine.planner.kv_paging``); every layer's context and the whole staging
are in host memory (pinned on CUDA): ``staging_chunks`` counts 0 device chunks there, ``host_staging_chunks``
counts them instead.
"""
from __future__ import annotations

import math

from engine.config import SessionConfig
from engine.facts.layout import KVLayout
from engine.memory.budget import Staging, staging_of
from engine.planner.kv_paging import paged_kv_device_bytes

TIERED_STORES = ("prefetch", "on-demand", "sync", "dram-only")   # the modes that build a KVStore


def memory_chunks(cfg: SessionConfig) -> int:
    """Memory slots of the attention context: the k retrieved and the sink (none with ``--store window``)."""
    mem = cfg.memory
    return 0 if mem.store == "window" else mem.retrieve_k + (1 if mem.sink else 0)


def context_chunks(cfg: SessionConfig, layout: KVLayout) -> float:
    """Chunks of tokens in the attention context: memory slots, local window, current chunk, and with
    keys stored before the rotation (``--kv-keys pre-rope``) the current chunk's un-rotated keys (half a
    chunk: keys, no values)."""
    unrotated = 0.5 if cfg.memory.keys == "pre-rope" else 0
    return memory_chunks(cfg) + layout.window_frames / layout.frames_per_chunk + 1 + unrotated


def session_staging(cfg: SessionConfig, layout: KVLayout) -> Staging:
    """The staging slots (the k of the set and the hedges') and the device cache of a session."""
    mem = cfg.memory
    return staging_of(mem.retrieve_k, mem.hedge_slots, mem.device_cache, layout.bytes_per_chunk(2),
                      prefetching=mem.store in ("prefetch", "dram-only"))


def all_staging_chunks(cfg: SessionConfig, layout: KVLayout) -> int:
    """Chunks a tiered store keeps beside the context, wherever they live: its staging slots
    (``KVStore`` banks) and the session's device cache."""
    return session_staging(cfg, layout).chunks if cfg.memory.store in TIERED_STORES else 0


def staging_chunks(cfg: SessionConfig, layout: KVLayout) -> int:
    """The staging chunks on the device: all of them with chunk paging, none with layer paging."""
    return 0 if cfg.memory.kv_paging == "layer" else all_staging_chunks(cfg, layout)


def host_staging_chunks(cfg: SessionConfig, layout: KVLayout) -> int:
    """The staging chunks in host memory beside a device (layer paging: all of them)."""
    return all_staging_chunks(cfg, layout) if cfg.memory.kv_paging == "layer" else 0


def context_device_bytes(cfg: SessionConfig, layout: KVLayout, value_bytes: int) -> int:
    """The context K/V on the device: every layer's (chunk paging), or two layer pages (layer paging)."""
    if cfg.memory.kv_paging == "layer":
        return paged_kv_device_bytes(layout, memory_chunks(cfg), value_bytes=value_bytes)
    return math.ceil(context_chunks(cfg, layout) * layout.bytes_per_chunk(value_bytes))


def context_host_bytes(cfg: SessionConfig, layout: KVLayout, value_bytes: int) -> int:
    """The context K/V in host memory beside a device: every layer's with layer paging, else none."""
    if cfg.memory.kv_paging != "layer":
        return 0
    return math.ceil(context_chunks(cfg, layout) * layout.bytes_per_chunk(value_bytes))


def kv_device_bytes(cfg: SessionConfig, layout: KVLayout, value_bytes: int) -> int:
    """The KV the session keeps on the device: the context and the device staging (pre-flight's device
    estimate, the weight budget's KV)."""
    return context_device_bytes(cfg, layout, value_bytes) + staging_chunks(cfg, layout) * layout.bytes_per_chunk(
        value_bytes)
