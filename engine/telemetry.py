"""The session log: JSON Lines, one record per chunk, flushed as written.

Owns the log's schema and its writer. Line 1 is ``{"type": "header", ...}`` with the resolved config and
the model facts; then one ``{"type": "chunk", ...}`` record per chunk; the last line is
``{"type": "summary", ...}`` with totals and percentiles. Every line is flushed when written, so
``worldpager tail`` (and ``tail -f``) sees it at once, and a killed run loses at most the summary.

Fields of a chunk record: chunk, frames, frames_total, wall_ms, compute_ms, decode_ms, stall_ms,
rss_bytes (process RSS from psutil), device_bytes (allocated device memory, 0 on CPU), plus whatever
the memory tiers add (hits, misses, stale, bytes per tier, pool, write-back queue).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from engine.errors import OutputError

SCHEMA_VERSION = 1


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[rank - 1])


def process_rss() -> int:
    return psutil.Process().memory_info().rss


@dataclass
class RunningSummary:
    """What the summary line needs, accumulated chunk by chunk (bounded: percentiles keep values)."""

    chunks: int = 0
    frames: int = 0
    stall_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    rss_min: int | None = None
    rss_max: int | None = None
    retrieval: dict = field(default_factory=lambda: {"hits": 0, "misses": 0, "stale": 0})

    def add(self, record: dict[str, Any]) -> None:
        self.chunks += 1
        self.frames = record.get("frames_total", self.frames)
        self.stall_ms.append(float(record.get("stall_ms", 0.0)))
        self.wall_ms.append(float(record.get("wall_ms", 0.0)))
        for key in self.retrieval:
            self.retrieval[key] += int(record.get(key, 0))
        rss = record.get("rss_bytes")
        if rss is not None:
            self.rss_min = rss if self.rss_min is None else min(self.rss_min, rss)
            self.rss_max = rss if self.rss_max is None else max(self.rss_max, rss)

    def as_record(self) -> dict[str, Any]:
        return {
            "chunks": self.chunks,
            "frames": self.frames,
            "stall_ms": {"p50": percentile(self.stall_ms, 50), "p99": percentile(self.stall_ms, 99),
                         "max": max(self.stall_ms, default=0.0)},
            "wall_ms": {"p50": percentile(self.wall_ms, 50), "p99": percentile(self.wall_ms, 99)},
            "rss_bytes": {"min": self.rss_min or 0, "max": self.rss_max or 0},
            "retrieval": dict(self.retrieval),
        }


class SessionLog:
    """Append-only JSON Lines writer for one session."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._file = open(self.path, "w", encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"cannot write log {self.path}: {exc.strerror or exc}") from None
        self.summary = RunningSummary()
        self._start = time.time()
        self.closed = False

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def header(self, config: dict[str, Any], facts: dict[str, Any], **extra: Any) -> None:
        self._write({"type": "header", "schema": SCHEMA_VERSION, "started": self._start,
                     "config": config, "model": facts, **extra})

    def chunk(self, record: dict[str, Any]) -> None:
        record = {"type": "chunk", **record}
        self.summary.add(record)
        self._write(record)

    def close(self, status: str, **extra: Any) -> None:
        """Write the summary line (status: done | interrupted | failed) and close; idempotent."""
        if self.closed:
            return
        self._write({"type": "summary", "status": status, "wall_s": time.time() - self._start,
                     **self.summary.as_record(), **extra})
        self._file.close()
        self.closed = True


def read_log(path: Path) -> list[dict[str, Any]]:
    """All complete records of a log (a trailing partial line is ignored)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                records.append(json.loads(line))
    return records


def follow_log(path: Path, follow: bool = True, poll_s: float = 0.2,
               idle_timeout_s: float | None = None):
    """Yield records as they are appended; ends at the summary line (or at EOF without ``follow``).

    A partial last line is held back until its newline arrives. ``idle_timeout_s`` ends a follow that
    sees no new line for that long (a writer that died without its summary).
    """
    path = Path(path)
    waited = 0.0
    while not path.exists():
        if not follow or (idle_timeout_s is not None and waited >= idle_timeout_s):
            raise OutputError(f"log not found: {path}")
        time.sleep(poll_s)
        waited += poll_s
    with open(path, encoding="utf-8") as f:
        pending, idle = "", 0.0
        while True:
            line = f.readline()
            if line:
                pending += line
                if not pending.endswith("\n"):
                    continue
                record, pending, idle = json.loads(pending), "", 0.0
                yield record
                if record.get("type") == "summary":
                    return
                continue
            if not follow or (idle_timeout_s is not None and idle >= idle_timeout_s):
                return
            time.sleep(poll_s)
            idle += poll_s
