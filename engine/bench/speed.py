"""A session's speed, step by step (``worldpager bench speed``), and two arms side by side (``--compare``).

Owns ``bench_speed``: one ``generate`` session (the arena model by default, or any registered model)
run in this process with the threading the command line would get (``--threads``, the decode worker), in
a temporary directory removed afterwards, and its log reduced to per-chunk medians after ``warmup``
chunks: the chunk's wall time (what sets chunks per second), the model's forwards, the memory steps, the
store, decode and mux (on the worker with ``decode_overlap``: then beside, not inside, the wall time),
and stalls. Nothing here asserts a time: machines differ and are shared.

``bench_speed_compare`` measures the arena model's session today (``today``) against the same session
with depth re-projection (``depth``: ``arena_reproject_depth`` with the depth head), in one process and
with the same threads, **interleaved in rounds**: round r runs one session of each arm, today first in
even rounds and depth first in odd ones (A B, B A, ...), so a machine that gets busier or quieter weighs
on both arms alike. Each arm's chunks after ``warmup`` of every round are pooled into its medians; the
ratios depth / today of the median wall and compute (model) times are checked against ``TARGET`` (a
figure, never an assertion); each round's own ratios show how much the machine moved them. The depth arm
runs the packaged depth weights (``arena-depth.safetensors``: the packaged weights plus a trained depth
head) where they are packaged; else, as a head's compute hardly depends on its weights' values, the
packaged weights plus a seeded random depth head (``engine.arena.weights.with_seeded_depth_head``), whose
pictures mean nothing and whose times are about a trained head's (the splat's work grows with the pixels that land in a view and their footprints: with
the renderer's true depth in its place it measured about 10 % less). The 1-minute load average before
and after every session is recorded.
"""
from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

STEPS = ("wall_ms", "compute_ms", "memory_ms", "store_ms", "decode_ms", "stall_ms")
ARMS = ("today", "depth")
RATIOS = ("wall_ms", "compute_ms")   # the ratios the target is for
TARGET = 1.5                         # chunk compute with depth and re-projection <= 1.5x today's
DEPTH_HEAD_SEED = 0
DEPTH_HEAD_NOTE = (f"the depth arm runs the packaged weights plus a seeded random depth head (seed "
                   f"{DEPTH_HEAD_SEED}): its compute is about a trained head's, its pictures are not")

DEPTH_HEAD_TRAINED_NOTE = "the depth arm runs the packaged weights with their trained depth head (arena-depth.safetensors)"


def medians(steady: list[dict]) -> dict:
    """Medians of ``STEPS`` (and chunks a second, the mean wall time) over the chunk records ``steady``."""
    out = {name: statistics.median(r.get(name, 0.0) for r in steady) for name in STEPS} if steady else {}
    wall = out.get("wall_ms") or 0.0
    return {"measured": len(steady), "medians_ms": out, "chunks_per_s": 1000.0 / wall if wall else None,
            "wall_ms_mean": statistics.fmean(r["wall_ms"] for r in steady) if steady else None}


def steady_chunks(records: list[dict], warmup: int) -> list[dict]:
    """The chunk records after ``warmup`` (all of them when there are no more)."""
    chunks = [r for r in records if r.get("type") == "chunk"]
    return chunks[warmup:] or chunks


def chunk_medians(records: list[dict], warmup: int) -> dict:
    """Medians of ``STEPS`` over the chunk records after ``warmup`` (all of them when there are no more)."""
    chunks = sum(1 for r in records if r.get("type") == "chunk")
    return {"chunks": chunks, **medians(steady_chunks(records, warmup))}


def _session(flags: dict, tmp: Path, name: str) -> tuple[list[dict], dict]:
    """Run one session of ``flags`` in ``tmp``: its log's records and how it ran."""
    import torch

    from engine.runtime.cpu_threads import apply_cpu_threads, decode_overlap
    from engine.settings.overlay import resolve_session_config
    from engine.session.loop import Session
    from engine.runtime.telemetry import read_log

    # generation's speed: no look around unless asked for (observed chunks run only the clean pass)
    cfg = resolve_session_config(None, {"save_every": 0, "look_around": 0, **flags, "out": tmp / f"{name}.mp4"})
    session = Session(cfg)
    before = torch.get_num_threads()
    try:
        threads = apply_cpu_threads(cfg, session.device)
        session.load()
        result = session.run()
    finally:
        torch.set_num_threads(before)
    return read_log(cfg.log_path), {"status": result.status, "model": cfg.model, "device": str(session.device),
                                    "threads": threads, "decode_overlap": decode_overlap(cfg, session.device)}


def bench_speed(flags: dict, warmup: int, workdir: Path | None = None) -> dict:
    """Run one session of ``flags`` (generate's, as a nested mapping) and return its medians with the
    threads and decode mode it ran with."""
    with tempfile.TemporaryDirectory(prefix="worldpager-speed-", dir=workdir) as tmp:
        records, facts = _session(flags, Path(tmp), "speed")
    return {**chunk_medians(records, warmup), **facts, "warmup": warmup}


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:   # no load average on this system
        return None


def _ratios(today: dict, depth: dict) -> dict:
    """depth / today of the medians of ``RATIOS`` (None where today's is 0 or missing)."""
    out = {}
    for step in RATIOS:
        a, b = today["medians_ms"].get(step), depth["medians_ms"].get(step)
        out[step] = b / a if a and b is not None else None
    return out


def bench_speed_compare(flags: dict, warmup: int, rounds: int, workdir: Path | None = None) -> dict:
    """Today's arena session against the same with depth re-projection, interleaved in ``rounds`` (see
    the module docstring): per arm its pooled medians, per session its own, the ratios and the target."""
    from engine.arena.weights import packaged_depth_weights_path, packaged_weights_path, with_seeded_depth_head

    pooled: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    sessions, facts = [], {}
    with tempfile.TemporaryDirectory(prefix="worldpager-speed-", dir=workdir) as tmp:
        weights, note = packaged_depth_weights_path(), DEPTH_HEAD_TRAINED_NOTE
        if not weights.exists():
            weights, note = with_seeded_depth_head(packaged_weights_path(), Path(tmp) / "depth-head.safetensors",
                                                   DEPTH_HEAD_SEED), DEPTH_HEAD_NOTE
        overlays = {"today": {}, "depth": {"arena_weights": str(weights), "arena_reproject_depth": True}}
        for r in range(rounds):
            for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
                load_before = _load()
                records, facts = _session({**flags, **overlays[arm]}, Path(tmp), f"{arm}-{r}")
                steady = steady_chunks(records, warmup)
                pooled[arm] += steady
                sessions.append({"arm": arm, "round": r, "status": facts["status"],
                                 "chunks": sum(1 for x in records if x.get("type") == "chunk"),
                                 **medians(steady), "load_before": load_before, "load_after": _load()})
    arms = {arm: medians(pooled[arm]) for arm in ARMS}
    ratio = _ratios(arms["today"], arms["depth"])
    by_round = [{s["arm"]: s for s in sessions if s["round"] == r} for r in range(rounds)]
    round_ratios = [{"round": r, **_ratios(pair["today"], pair["depth"])} for r, pair in enumerate(by_round)]
    loads = [s[k] for s in sessions for k in ("load_before", "load_after") if s[k] is not None]
    return {"compare": "depth", "arms": arms, "ratio": ratio, "round_ratios": round_ratios, "target": TARGET,
            "within_target": {k: None if v is None else v <= TARGET for k, v in ratio.items()},
            "rounds": rounds, "order": "interleaved in rounds: A B, then B A, ...", "depth_head": note,
            "sessions": sessions, "status": "done" if all(s["status"] == "done" for s in sessions) else "failed",
            "load_1min": {"min": min(loads), "max": max(loads)} if loads else None,
            "model": facts.get("model"), "device": facts.get("device"), "threads": facts.get("threads"),
            "decode_overlap": facts.get("decode_overlap"), "warmup": warmup}
