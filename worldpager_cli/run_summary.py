"""The summary of one ``generate`` / ``resume`` / ``fork`` run: the human line and the ``--json`` object.

Owns what a run reports when it ends, in one place for both forms. ``run_summary`` builds the JSON
object (``--json``: the only thing such a run writes on stdout); its keys, documented in
docs/conventions.md, are ``RUN_SUMMARY_KEYS``. Stall and memory figures are over the chunk records of
the run's log (a resumed or forked run's log holds the chunks it inherited too); seconds per chunk and
frames per second are over the chunks this run made.
"""
from __future__ import annotations

from pathlib import Path

from engine.runtime.telemetry import percentile, read_log

RUN_SUMMARY_KEYS = ("status", "out", "log", "spill", "chunks", "chunks_made", "frames", "video_s", "wall_s",
                    "s_per_chunk", "fps", "stalls", "peak_rss_bytes", "savepoint_errors")


def _chunk_records(log: Path) -> list[dict]:
    try:
        return [r for r in read_log(log) if r.get("type") == "chunk"]
    except (OSError, ValueError):   # the log is the run's own: only a vanished file lands here
        return []


def run_summary(result, cfg, video_fps: int, frames_before: int) -> dict:
    """``result``: the session's ``SessionResult``; ``frames_before``: video frames inherited (resume, fork)."""
    chunks = _chunk_records(Path(result.log))
    stalls = [float(r.get("stall_ms", 0.0)) for r in chunks]
    made_frames = max(result.frames - frames_before, 0)
    return {
        "status": result.status,
        "out": str(result.out),
        "log": str(result.log),
        "spill": None if cfg.memory.spill is None else str(cfg.memory.spill),
        "chunks": result.chunks,
        "chunks_made": result.made,
        "frames": result.frames,
        "video_s": round(result.frames / video_fps, 3),
        "wall_s": round(result.wall_s, 3),
        "s_per_chunk": round(result.wall_s / max(result.made, 1), 4),
        "fps": round(made_frames / result.wall_s, 3) if result.wall_s > 0 else None,
        "stalls": {"count": sum(1 for s in stalls if s > 0), "total_ms": round(sum(stalls), 3),
                   "p50_ms": round(percentile(stalls, 50), 3) if stalls else 0.0,
                   "p99_ms": round(percentile(stalls, 99), 3) if stalls else 0.0,
                   "max_ms": round(max(stalls), 3) if stalls else 0.0},
        "peak_rss_bytes": max((int(r.get("rss_bytes", 0)) for r in chunks), default=None),
        "savepoint_errors": list(result.savepoint_errors),
    }


def summary_text(result, video_fps: int) -> str:
    """The human form: frames, where, how long, seconds per chunk over the chunks made here."""
    made = "" if result.made == result.chunks else f"{result.made} chunks made here, "
    return (f"{result.frames} frames ({result.frames / video_fps:.1f} s of video) to {result.out} in "
            f"{result.wall_s:.1f} s ({made}{result.wall_s / max(result.made, 1):.2f} s per chunk); log {result.log}")
