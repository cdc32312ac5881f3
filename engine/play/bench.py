"""``worldpager bench play``: live play measured, with scripted input through the page's own socket path.

Contract. ``play_arm(overlay, workdir, name, seed, chunks, burner)`` runs one played session (the real
server, bound to loopback on a free port; the session on a thread of this process) driven by
``engine.play.client.drive`` with ``human_script(seed)``, then replays its recording from the file as
``generate`` would (same settings, a fresh spill directory), and returns a flat dict: frames, frames
shown per second of the viewer's clock and made per second of generation (wall time less the pauses
for input), key-to-frame latency P50 / P99, stall P50 / P99 of the log and the chunks that stalled (above
the log's threshold, ``engine.play.run.stalled``), playback underruns, and the
prefetch hit rate (hits / (hits + misses), after ``warmup`` chunks) live and replayed from the file,
and for an arena arm ``walk``: its frames per walking class (below; None for other models).
``burner``: one process spinning on a CPU core for the arm's whole run (both halves).

An arena arm's played session is then scored as ``bench quality --walk`` scores a walk, from its files
alone once the timed part is over (``walk_classes``): its exact latent frames (every ``temporal``-th
frame of the MP4) against the arena's rendered truth at their cameras, in the walking benchmark's
classes of frame (``engine.quality.walk_classes``: new place, seeing surfaces seen before, never-seen
view, revisit, to an observed / generated place, near with a new view, every generated frame) with its
scoring (``engine.quality.walk_score``) and its figures pooled over frames (``engine.quality
.walk_summary``): per class frames, PSNR, SSIM, sharpness, self-consistency and the truth's own
consistency. The replay writes the same MP4 bytes (``tests/play/test_play_session.py``): it is not
scored again.
"""
from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from engine.model.registry import model_spec
from engine.settings.overlay import resolve_session_config
from engine.play.client import drive, human_script
from engine.play.run import play_config, prepare_play, stalled
from engine.session.loop import Session
from engine.runtime.telemetry import percentile, read_log

BURNER = "while True: pass"


def _chunk_records(log: Path) -> list[dict]:
    return [r for r in read_log(log) if r.get("type") == "chunk"]


def hit_rate(records: list[dict], warmup: int) -> float | None:
    rows = [r for r in records if r["chunk"] >= warmup]
    hits, misses = sum(r.get("hits", 0) for r in rows), sum(r.get("misses", 0) for r in rows)
    return hits / (hits + misses) if hits + misses else None


def _pct(values: list[float], p: float) -> float | None:
    return percentile(values, p) if values else None


def walk_classes(log: Path, video: Path) -> dict:
    """The played arena session (``log``, ``video``) scored per walking class (the module docstring):
    ``observed_chunks`` (chunk 0, the prompt, counts as observed), ``latent_frames`` and per class of
    ``engine.quality.walk_classes.CLASSES`` its ``frames`` and each figure of ``walk_summary.FIGURES``
    (None where the class has no frame)."""
    from engine.quality.long_run import _counters
    from engine.quality.walk_classes import CLASSES
    from engine.quality.walk_score import score_walk
    from engine.quality.walk_summary import FIGURES, figure

    observed = _counters(log)["observed_chunks"]
    row, _ = score_walk(log, video, observed)
    classes = {}
    for cls in CLASSES:
        frames = int(sum(b["classes"][cls]["frames"] for b in row["bins"]))
        classes[cls] = {"frames": frames, **{name: figure([row], cls, name)["value"] for name, _, _ in FIGURES}}
    return {"observed_chunks": observed, "latent_frames": row["latent_frames"], "classes": classes}


def play_arm(overlay: dict, workdir: Path, name: str, seed: int, chunks: int, burner: bool = False,
             warmup: int = 3) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    spin = subprocess.Popen([sys.executable, "-c", BURNER]) if burner else None
    try:
        live = _live(overlay, workdir, name, seed, chunks)
        replay = _replay(overlay, workdir, name, live["recording"], chunks + 2)
    finally:
        if spin is not None:
            spin.kill()
            spin.wait()
    records, replayed = _chunk_records(live["log"]), _chunk_records(replay)
    made = [r for r in records if r["chunk"] >= warmup]
    gen_s = sum(max(0.0, r["wall_ms"] - r.get("paused_ms", 0.0)) for r in made) / 1e3
    stalls = [r.get("stall_ms", 0.0) for r in made]
    played = live["played"]
    return {"name": name, "chunks": len(records), "frames": played.frames,
            "shown_fps": played.frames / played.shown_s if played.shown_s > 0 else None,
            "made_fps": sum(r["frames"] for r in made) / gen_s if gen_s > 0 else None,
            "latency_p50_ms": _pct(played.latencies_ms, 50), "latency_p99_ms": _pct(played.latencies_ms, 99),
            "latencies": len(played.latencies_ms), "stall_p50_ms": _pct(stalls, 50), "stall_p99_ms": _pct(stalls, 99),
            "stalled_chunks": sum(1 for r in made if stalled(r)), "underruns": played.underruns,
            "hit_rate_live": hit_rate(records, warmup), "hit_rate_replay": hit_rate(replayed, warmup),
            "replay_chunks": len(replayed), "status": live["status"],
            "walk": walk_classes(live["log"], live["video"]) if overlay.get("model") == "arena" else None}


def _config(overlay: dict, workdir: Path, name: str, chunks: int | None = None):
    spill = workdir / f"{name}.spill"
    shutil.rmtree(spill, ignore_errors=True)
    spill.mkdir()
    memory = {**overlay.get("memory", {}), "spill": str(spill)}
    # live play measured: no look around unless the arm asks for one (its chunks take no input)
    cfg = resolve_session_config(None, {"look_around": 0, **overlay, "memory": memory,
                                        "out": str(workdir / f"{name}.mp4"),
                                        **({"chunks": chunks} if chunks is not None else {})})
    return cfg


def _live(overlay: dict, workdir: Path, name: str, seed: int, chunks: int) -> dict:
    cfg = play_config(_config(overlay, workdir, name, chunks=chunks + 2))
    for stale in (cfg.out, cfg.log_path, cfg.config_path, cfg.trajectory):
        Path(stale).unlink(missing_ok=True)
    run = prepare_play(cfg, model_spec(cfg), "127.0.0.1", 0)
    outcome: dict = {}
    try:
        run.session.load()
        worker = threading.Thread(target=lambda: outcome.update(result=run.run()), name="wp-bench-play")
        worker.start()
        seconds = chunks * model_spec(cfg).grid.frames_per_chunk / model_spec(cfg).grid.fps + 30
        played = asyncio.run(drive(run.url, human_script(seed, seconds), chunks))
        run.source.finish()
        worker.join()
    finally:
        run.close()
    return {"played": played, "log": cfg.log_path, "video": cfg.out, "recording": cfg.trajectory,
            "status": outcome["result"].status if "result" in outcome else "failed"}


def _replay(overlay: dict, workdir: Path, name: str, recording: Path, chunks: int) -> Path:
    cfg = dataclasses.replace(_config(overlay, workdir, f"{name}-replay", chunks), trajectory=recording)
    # (the recording ends the session where the live one ended)
    for stale in (cfg.out, cfg.log_path, cfg.config_path):
        Path(stale).unlink(missing_ok=True)
    Session(cfg).run()
    return cfg.log_path
