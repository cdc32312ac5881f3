"""``worldpager bench play``: live play measured through the page's socket path (``engine.play.bench``).

Owns the command's flags, its arms and its table, then the last line of JSON. Arms: the arena model
idle and beside a CPU burner (``--chunks``), and prefetch against on-demand at MG2's KV size
(``--model synthetic --kv-scale 1``) under a ``--drive-bw`` cap (``--synthetic-chunks``; 0 skips them).
Each arm is played by a scripted human-like player (``--seed``), then replayed from its recording. The
arena arms' played sessions are then scored per walking class as ``bench quality --walk`` scores a walk
(exact latent frames against the rendered truth; ``engine.play.bench.walk_classes``): a second table.
Without aiohttp (the server and the player) it is one line naming the install command, as ``play``.
"""
from __future__ import annotations

from pathlib import Path

import click

from worldpager_cli.json_output import json_result

from engine.errors import ConfigError
from worldpager_cli.bench_output import echo_json, echo_table, num, ratio
from engine.bench.machine import machine
from worldpager_cli.play import need_web_server


@click.command("play")
@click.option("--spill", type=click.Path(path_type=Path), required=True,
              help="Directory for the arms' spill directories, videos, logs and recordings (kept).")
@click.option("--chunks", type=click.IntRange(min=4), default=40, show_default=True,
              help="Chunks each arena arm is played for (0.75 s of video each: real time).")
@click.option("--synthetic-chunks", type=click.IntRange(min=0), default=16, show_default=True,
              help="Chunks of each synthetic arm (0: no synthetic arms).")
@click.option("--drive-bw", default="0.25", show_default=True, help="The synthetic arms' drive cap, GB/s.")
@click.option("--pool-slots", type=click.IntRange(min=2), default=8, show_default=True,
              help="Host pool in chunks (small: the memory spills early).")
@click.option("--seed", type=int, default=0, show_default=True, help="The scripted player's seed.")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True,
              help="Chunks left out of the stall and hit-rate figures.")
@json_result
def bench_play(spill: Path, chunks: int, synthetic_chunks: int, drive_bw: str, pool_slots: int, seed: int,
               warmup: int) -> None:
    """Live play: fps, key-to-frame latency, stalls, hit rate live vs replayed (scripted player)."""
    need_web_server("worldpager bench play")
    from engine.play.bench import play_arm

    if not spill.is_dir():
        raise ConfigError(f"--spill directory not found: {spill}")
    arena = {"model": "arena", "memory": {"pool_slots": pool_slots}}
    arms = [("arena", arena, chunks, False), ("arena+burner", arena, chunks, True)]
    if synthetic_chunks:
        for store in ("prefetch", "on-demand"):
            overlay = {"model": "synthetic", "kv_scale": 1.0,
                       "memory": {"store": store, "pool_slots": pool_slots, "drive_bw": drive_bw}}
            arms.append((f"synthetic-{store}", overlay, synthetic_chunks, False))
    results, rows = [], []
    for name, overlay, n, burner in arms:
        click.echo(f"  {name}: {n} chunks played{' beside a CPU burner' if burner else ''} …", err=True)
        r = play_arm(overlay, spill / "bench-play", name, seed, n, burner=burner, warmup=warmup)
        results.append(r)
        rows.append((name, str(r["chunks"]), num(r["shown_fps"]), num(r["made_fps"]), num(r["latency_p50_ms"]),
                     num(r["latency_p99_ms"]), num(r["stall_p50_ms"]), num(r["stall_p99_ms"]),
                     f"{r['stalled_chunks']}", str(r["underruns"]), ratio(r["hit_rate_live"]),
                     ratio(r["hit_rate_replay"])))
    click.echo(f"bench play: scripted player (seed {seed}) through the socket; video 16 fps; pool {pool_slots} "
               f"chunks; synthetic arms at MG2's KV size, drive {drive_bw} GB/s; figures after {warmup} chunks")
    echo_table(("arm", "chunks", "shown fps", "made fps", "key→frame p50", "p99", "stall p50", "p99",
                "stalled", "underruns", "hit live", "hit replay"), rows)
    _echo_walk(results)
    echo_json("play", {"runs": results}, machine("cpu"),
              {"chunks": chunks, "synthetic_chunks": synthetic_chunks, "drive_bw": drive_bw,
               "pool_slots": pool_slots, "seed": seed, "warmup": warmup})


def _echo_walk(results: list[dict]) -> None:
    """Per walking class (``bench quality --walk``'s names) and arena arm: the played frames' figures."""
    from worldpager_cli.quality_long import _f
    from worldpager_cli.quality_walk import CLASS_NAMES

    scored = [r for r in results if r.get("walk")]
    if not scored:
        return
    click.echo("Played sessions per walking class (bench quality --walk's classes): exact latent frames of the "
               "MP4 against the rendered truth, pooled over frames; chunk 0 (the prompt) counts as observed")
    rows = []
    for cls, label in CLASS_NAMES.items():
        for i, r in enumerate(scored):
            c = r["walk"]["classes"][cls]
            entry = {k: {"value": c[k]} for k in ("psnr", "ssim", "sharpness", "self_consistency", "truth_consistency")}
            rows.append((label if i == 0 else "", r["name"], str(c["frames"]), _f(entry["psnr"]), _f(entry["ssim"], 3),
                         _f(entry["sharpness"], 3), _f(entry["self_consistency"]), _f(entry["truth_consistency"])))
    echo_table(("class", "arm", "frames", "PSNR", "SSIM", "sharp", "self-consist.", "truth views"), rows)
