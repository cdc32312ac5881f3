"""A session's speed, step by step (``worldpager bench speed``).

Owns ``bench_speed``: one ``generate`` session (the arena model by default, or any registered model)
run in this process with the threading the command line would get (``--threads``, the decode worker), in
a temporary directory removed afterwards, and its log reduced to per-chunk medians after ``warmup``
chunks: the chunk's wall time (what sets chunks per second), the model's forwards, the memory steps, the
store, decode and mux (on the worker with ``decode_overlap``: then beside, not inside, the wall time),
and stalls. Nothing here asserts a time: machines differ and are shared.
"""
from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

STEPS = ("wall_ms", "compute_ms", "memory_ms", "store_ms", "decode_ms", "stall_ms")


def chunk_medians(records: list[dict], warmup: int) -> dict:
    """Medians of ``STEPS`` over the chunk records after ``warmup`` (all of them when there are no more)."""
    chunks = [r for r in records if r.get("type") == "chunk"]
    steady = chunks[warmup:] or chunks
    out = {name: statistics.median(r.get(name, 0.0) for r in steady) for name in STEPS} if steady else {}
    wall = out.get("wall_ms") or 0.0
    return {"chunks": len(chunks), "measured": len(steady), "medians_ms": out,
            "chunks_per_s": 1000.0 / wall if wall else None,
            "wall_ms_mean": statistics.fmean(r["wall_ms"] for r in steady) if steady else None}


def bench_speed(flags: dict, warmup: int, workdir: Path | None = None) -> dict:
    """Run one session of ``flags`` (generate's, as a nested mapping) and return its medians with the
    threads and decode mode it ran with."""
    import torch

    from engine.cpu_threads import apply_cpu_threads, decode_overlap
    from engine.overlay import resolve_session_config
    from engine.session.loop import Session
    from engine.telemetry import read_log

    with tempfile.TemporaryDirectory(prefix="worldpager-speed-", dir=workdir) as tmp:
        # generation's speed: no look around unless asked for (observed chunks run only the clean pass)
        cfg = resolve_session_config(None, {"save_every": 0, "look_around": 0, **flags,
                                            "out": Path(tmp) / "speed.mp4"})
        session = Session(cfg)
        before = torch.get_num_threads()
        try:
            threads = apply_cpu_threads(cfg, session.device)
            session.load()
            result = session.run()
        finally:
            torch.set_num_threads(before)
        medians = chunk_medians(read_log(cfg.log_path), warmup)
    return {**medians, "status": result.status, "model": cfg.model, "device": str(session.device),
            "threads": threads, "decode_overlap": decode_overlap(cfg, session.device), "warmup": warmup}
