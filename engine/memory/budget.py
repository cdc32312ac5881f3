"""Torch-free budget arithmetic shared by the store and the planner.

Owns the ``--drive-bw`` grammar (``0.25`` = both directions, ``r=0.5,w=0.2`` = separate, ``none``) and
the host-pool sizing rule (slots that fit in budget − process baseline − 2 GiB margin, at least 8), so
that ``engine.planner.model`` predicts with exactly the rules the store runs with.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from engine.errors import ConfigError

GB = 1e9
GiB = 1 << 30
ALIGN = 4096                      # pool slots and O_DIRECT blocks
DEFAULT_MARGIN = 2 * GiB          # host memory left to everything else
MIN_SLOTS = 8


@dataclass(frozen=True)
class DriveBandwidth:
    """Bytes per second; None means uncapped."""

    read: float | None = None
    write: float | None = None


def _gbps(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or not math.isfinite(value):
        raise ConfigError(f"--drive-bw {spec!r}: {text!r} is not a positive number of GB/s")
    return value * GB


def parse_drive_bw(spec: str | float | None) -> DriveBandwidth:
    """``0.25`` -> both 0.25 GB/s; ``r=0.5,w=0.2`` -> separate; ``r=0.5`` -> reads only; None -> none."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "none", "off")):
        return DriveBandwidth()
    text = str(spec).replace(" ", "")
    if "=" not in text:
        rate = _gbps(text, str(spec))
        return DriveBandwidth(rate, rate)
    rates: dict[str, float] = {}
    for part in text.split(","):
        m = re.fullmatch(r"(r|w|read|write)=(.+)", part)
        if m is None:
            raise ConfigError(f"--drive-bw {spec!r}: expected GBPS or r=GBPS,w=GBPS, got {part!r}")
        rates[m.group(1)[0]] = _gbps(m.group(2), str(spec))
    return DriveBandwidth(rates.get("r"), rates.get("w"))


def pool_slots(host_bytes: int, baseline_bytes: int, slot_bytes: int,
               margin_bytes: int = DEFAULT_MARGIN, min_slots: int = MIN_SLOTS) -> int:
    """Slots that fit in ``host_bytes − baseline − margin``; ConfigError when below ``min_slots``."""
    assert slot_bytes > 0 and slot_bytes % ALIGN == 0, f"slot of {slot_bytes} B is not 4 KiB-aligned"
    usable = host_bytes - baseline_bytes - margin_bytes
    n = max(0, usable) // slot_bytes
    if n < min_slots:
        need = baseline_bytes + margin_bytes + min_slots * slot_bytes
        raise ConfigError(
            f"--host-mem {host_bytes / GiB:.2f} GiB leaves room for {n} chunk slots of "
            f"{slot_bytes / 2**20:.1f} MiB after the process baseline ({baseline_bytes / GiB:.2f} GiB) "
            f"and the {margin_bytes / GiB:.0f} GiB margin; need at least {min_slots} "
            f"(--host-mem >= {need / GiB:.2f} GiB)")
    return int(n)


# ---- staging beyond the retrieval set: hedges and the device cache ------------------------------------

CHEAP_CHUNK_BYTES = 4 << 20       # a chunk of KV (bf16) at most this size is cheap to stage twice over
DEVICE_CACHE_BYTES = 32 << 20     # the device memory the cache of recently loaded chunks may take
DEVICE_CACHE_CHUNKS = 24          # and at most this many chunks
DEVICE_CACHE_MIN = 8              # a cache that holds fewer is not kept (a walk's views outnumber it)


@dataclass(frozen=True)
class Staging:
    """The device-side chunks a tiered store keeps beside the k retrieval slots.

    ``hedge_slots``: extra staging slots for the sets of the hedged poses (``engine.retrieval.predict
    .hedge_poses``); ``cache_chunks``: chunks the session keeps after loading them (the device cache), so
    that a view retrieved a minute ago is at hand when it is wanted again. Both are counted with the
    staging slots by the pre-flight estimate and the planner."""

    retrieve_k: int
    hedge_slots: int
    cache_chunks: int

    @property
    def stage_slots(self) -> int:
        """Staging slots the store allocates: the k of the predicted set and the hedges'."""
        return max(self.retrieve_k, 1) + self.hedge_slots

    @property
    def chunks(self) -> int:
        """Device chunks beside the attention context: staging slots and the cache."""
        return self.stage_slots + self.cache_chunks


def staging_of(retrieve_k: int, hedge_slots: int | None, cache_chunks: int | None, bf16_chunk_bytes: int,
               prefetching: bool = True) -> Staging:
    """The staging of a session (``memory.hedge_slots`` / ``memory.device_cache``; None = automatic):
    hedges take ``retrieve_k`` more slots when a chunk is cheap (at most ``CHEAP_CHUNK_BYTES`` in bf16:
    the arena model, small test models; not MG2 or LingBot, whose chunks are hundreds of MB of device
    memory each), and the cache what ``DEVICE_CACHE_BYTES`` holds, at most ``DEVICE_CACHE_CHUNKS`` (none
    when that is under ``DEVICE_CACHE_MIN``). Only
    a prefetching store (prefetch, dram-only) hedges or caches; the others stage the k of their set."""
    if not prefetching:
        return Staging(retrieve_k, 0, 0)
    cheap = bf16_chunk_bytes <= CHEAP_CHUNK_BYTES
    hedge = (retrieve_k if cheap else 0) if hedge_slots is None else hedge_slots
    fits = min(DEVICE_CACHE_CHUNKS, DEVICE_CACHE_BYTES // max(bf16_chunk_bytes, 1))
    cache = (fits if fits >= DEVICE_CACHE_MIN else 0) if cache_chunks is None else cache_chunks
    return Staging(retrieve_k, hedge, cache)
