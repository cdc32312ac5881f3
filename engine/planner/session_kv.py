"""The KV a session keeps on the device, in chunks: its attention context and the store's staging.

Owns the two counts that pre-flight (``engine.session.preflight``: the memory estimate, the budgets), the
session's memory (its staging slots and device cache) and the weight pager (``engine.model.weight_place``:
what the blocks may use of ``--device-mem``) must agree on. Torch-free, beside the rest of the planner,
so that a model's loader reads the same rule without importing the session.
"""
from __future__ import annotations

from engine.config import SessionConfig
from engine.facts.layout import KVLayout
from engine.memory.budget import Staging, staging_of

TIERED_STORES = ("prefetch", "on-demand", "sync", "dram-only")   # the modes that build a KVStore


def context_chunks(cfg: SessionConfig, layout: KVLayout) -> float:
    """Chunks of tokens in the attention context: memory slots, local window, current chunk, and with
    keys stored before the rotation (``--kv-keys pre-rope``) the current chunk's un-rotated keys (half a
    chunk: keys, no values)."""
    mem = cfg.memory
    memory = 0 if mem.store == "window" else mem.retrieve_k + (1 if mem.sink else 0)
    unrotated = 0.5 if mem.keys == "pre-rope" else 0
    return memory + layout.window_frames / layout.frames_per_chunk + 1 + unrotated


def session_staging(cfg: SessionConfig, layout: KVLayout) -> Staging:
    """The staging slots (the k of the set and the hedges') and the device cache of a session."""
    mem = cfg.memory
    return staging_of(mem.retrieve_k, mem.hedge_slots, mem.device_cache, layout.bytes_per_chunk(2),
                      prefetching=mem.store in ("prefetch", "dram-only"))


def staging_chunks(cfg: SessionConfig, layout: KVLayout) -> int:
    """Chunks a tiered store keeps on the device beside the context: its staging slots (``KVStore``
    banks) and the session's device cache."""
    return session_staging(cfg, layout).chunks if cfg.memory.store in TIERED_STORES else 0
