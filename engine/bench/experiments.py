"""The paper's systems experiments, run on this machine with the synthetic model.

Owns running one synthetic session per configuration (real KV bytes, real store, real disk, real
threads; DESIGN §5) and reducing its log to the figures the experiments compare: stall percentiles,
chunk time, the chunk where the pool spilled and where the first disk read happened, retrieval counts,
bytes per tier and host RSS flatness. ``worldpager bench`` formats these; nothing here asserts a speed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from engine.errors import WorldPagerError
from engine.settings.overlay import resolve_session_config
from engine.files.resources import data_dir
from engine.session.loop import Session
from engine.runtime.telemetry import percentile, read_log

YAW = data_dir("trajectories") / "yaw.yaml"


def first_chunk(chunks: list[dict], key: str) -> int | None:
    return next((r["chunk"] for r in chunks if r.get(key, 0) > 0), None)


def reduce_log(records: list[dict], warmup: int) -> dict:
    """The comparison figures of one session log (``warmup`` chunks excluded from time and RSS)."""
    chunks = [r for r in records if r["type"] == "chunk"]
    summary = records[-1] if records and records[-1]["type"] == "summary" else {}
    steady = chunks[warmup:] or chunks
    stall = [r["stall_ms"] for r in steady]
    rss = [r["rss_bytes"] for r in steady]
    half = len(steady) // 2
    return {
        "chunks": len(chunks),
        "status": summary.get("status"),
        "stall_p50_ms": percentile(stall, 50), "stall_p99_ms": percentile(stall, 99),
        "stall_max_ms": max(stall, default=0.0),
        "stalled_chunks": sum(1 for s in stall if s > 0.5),
        "chunk_ms_p50": percentile([r["wall_ms"] for r in steady], 50),
        "store_ms_p50": percentile([r.get("store_ms", 0.0) for r in steady], 50),
        "memory_ms_p50": percentile([r.get("memory_ms", 0.0) for r in steady], 50),
        "spill_chunk": first_chunk(chunks, "disk_bytes_written"),
        "pool_full_chunk": next((r["chunk"] + 1 for r in chunks
                                 if "pool_free_bytes" in r and r["pool_free_bytes"] == 0), None),
        "first_read_chunk": first_chunk(chunks, "disk_bytes_read"),
        "reading_chunks": sum(1 for r in chunks if r.get("disk_bytes_read", 0) > 0),
        "hits": sum(r.get("hits", 0) for r in chunks), "misses": sum(r.get("misses", 0) for r in chunks),
        "stale": sum(r.get("stale", 0) for r in chunks),
        "disk_bytes_read": sum(r.get("disk_bytes_read", 0) for r in chunks),
        "disk_bytes_written": sum(r.get("disk_bytes_written", 0) for r in chunks),
        "rss_min": min(rss, default=0), "rss_max": max(rss, default=0),
        "rss_first_half_max": max(rss[:half], default=0), "rss_second_half_max": max(rss[half:], default=0),
        "chunk_ms_first_half_p50": percentile([r["wall_ms"] for r in steady[:half]], 50),
        "chunk_ms_second_half_p50": percentile([r["wall_ms"] for r in steady[half:]], 50),
        "error": summary.get("error"),
        **_disk_use(chunks, summary),
    }


def _disk_use(chunks: list[dict], summary: dict) -> dict:
    """``--spill-max``: the spill directory's allocated bytes (largest; at each tenth of the run), drops."""
    alloc = [r["disk_alloc_bytes"] for r in chunks if "disk_alloc_bytes" in r]
    if not alloc:
        return {}
    tenth = max(1, len(alloc) // 10)
    quota = summary.get("quota", {})
    return {"spill_max_bytes": chunks[-1].get("spill_max_bytes"), "disk_alloc_max": max(alloc),
            "disk_alloc_series": [[chunks[i]["chunk"], alloc[i]] for i in range(tenth - 1, len(alloc), tenth)],
            "dropped": quota.get("dropped"), "first_choice_rate": quota.get("first_choice_rate"),
            "early_releases": quota.get("early_releases")}


def run_synthetic(overlay: dict, spill_root: Path | None, warmup: int = 3, name: str = "run",
                  reduce: Callable[[list[dict], int], dict] = reduce_log, keep_log: Path | None = None,
                  progress: bool = False) -> dict:
    """One synthetic session with ``overlay`` (SessionConfig keys) in a fresh process; its log reduced by
    ``reduce(records, warmup)``.

    A fresh process per run keeps runs independent (no allocator or page-cache state carried over, RSS
    measured from the same start). Outputs go to a temporary directory; the disk tier (when the
    overlay's store has one) goes under ``spill_root``; both are removed afterwards (the log is first
    copied to ``keep_log`` when given, for the figures). ``progress``: the run prints a line to stderr
    every few chunks. A run that dies (a signal: the out-of-memory killer at full MG2 size on a small
    machine) is one ``WorldPagerError`` line naming the run and how it ended.
    """
    work = Path(tempfile.mkdtemp(prefix="wp-exp-"))
    spill = None
    try:
        memory = dict(overlay.get("memory", {}))
        if spill_root is not None and memory.get("store", "prefetch") in ("prefetch", "on-demand", "sync"):
            spill = Path(tempfile.mkdtemp(prefix=f"wp-spill-{name}-", dir=spill_root))
            memory["spill"] = str(spill / "tier")
        full = {"model": "synthetic", "trajectory": str(YAW), **overlay, "memory": memory,
                "out": str(work / f"{name}.mp4")}
        cfg = resolve_session_config(None, full)   # validate here, before a process is started
        child = subprocess.run([sys.executable, "-m", "engine.bench.experiments", json.dumps(full),
                                *(["--progress"] if progress else [])])
        if child.returncode != 0:
            raise WorldPagerError(f"bench run {name} ended with {_how(child.returncode)} after "
                                  f"{_chunks_logged(cfg.log_path)} chunks" + (
                                      "; out of memory? lower --kv-scale" if child.returncode == -9 else ""))
        if keep_log is not None:
            shutil.copyfile(cfg.log_path, keep_log)
        return reduce(read_log(cfg.log_path), warmup)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)


def _how(returncode: int) -> str:
    import signal

    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _chunks_logged(log: Path) -> int:
    try:
        return sum(1 for r in read_log(log) if r.get("type") == "chunk")
    except (OSError, ValueError):
        return 0


def _progress_printer(cfg):
    """Every few chunks, one line on stderr (a run takes minutes at full size)."""
    every = max(1, cfg.chunks // 6)
    name = Path(cfg.out).stem

    def on_chunk(record: dict) -> None:
        done = record.get("chunk", 0) + 1
        if done % every == 0 or done == cfg.chunks:
            print(f"  {name}: chunk {done}/{cfg.chunks}", file=sys.stderr, flush=True)
    return on_chunk


def _run_in_this_process(overlay: dict, progress: bool = False) -> None:
    cfg = resolve_session_config(None, overlay)
    try:
        Session(cfg, on_chunk=_progress_printer(cfg) if progress else None).run()
    except WorldPagerError:
        pass   # e.g. dram-only's capacity stop: a result of the experiment, kept in the log


if __name__ == "__main__":
    _run_in_this_process(json.loads(sys.argv[1]), progress="--progress" in sys.argv[2:])
