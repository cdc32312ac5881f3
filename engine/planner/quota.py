"""What ``--spill-max`` changes in ``worldpager plan``: the disk a session needs with and without it (no torch).

Owns one prediction: unbounded, the disk tier holds every chunk that leaves the host pool (the
planner's ``disk_bytes``) plus its index; under a quota it holds at most the quota's blocks
(``engine.memory.quota.QuotaPlan``) plus the index, and the session starts dropping chunks once more
than ``keep`` are stored (a count of all stored chunks, pool and disk together). A quota below what the
session pins is the same one-line error ``generate`` gives.
"""
from __future__ import annotations

from pathlib import Path

from engine.memory.quota import QuotaPlan, check_quota, index_bound, parse_spill_max


def quota_prediction(cfg, plan, window_chunks: int, format_tag: str = "") -> dict | None:
    """``{"spill_max_bytes", "disk_bytes_unbounded", "disk_bytes_quota", "keep", "drops_from_chunk"}``."""
    text = cfg.memory.spill_max
    if text is None or not plan.disk_tier:
        return None
    spill = None if cfg.memory.spill is None else Path(cfg.memory.spill)
    q = QuotaPlan.of(parse_spill_max(text, spill), plan.slot_bytes, format_tag, cfg.save_every)
    check_quota(text, q, cfg.memory.retrieve_k, window_chunks, format_tag, cfg.save_every)
    unbounded_blocks = plan.disk_bytes // plan.slot_bytes if plan.slot_bytes else 0
    unbounded = plan.disk_bytes + index_bound(unbounded_blocks, format_tag)
    held = min(unbounded_blocks, q.blocks)
    return {"spill_max_bytes": q.quota_bytes, "disk_bytes_unbounded": unbounded,
            "disk_bytes_quota": held * plan.slot_bytes + index_bound(held, format_tag), "keep": q.keep,
            "drops_from_chunk": q.keep if plan.chunks > q.keep else None}
