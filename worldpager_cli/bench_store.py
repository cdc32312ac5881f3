"""``worldpager bench store`` and ``bench memory``: the store's modes side by side on the synthetic model,
and host memory over a long session (the real store and disk tier, no model math).
"""
from __future__ import annotations

from pathlib import Path

import click

from worldpager_cli.bench_output import GiB, echo_json, echo_table, num, size
from worldpager_cli.json_output import json_result
from worldpager_cli.options import BY_NAME, SessionSize, Size

from engine.bench.bench_dir import bench_directory
from engine.bench.machine import machine
from engine.errors import ConfigError

STORE_KV_SCALE = 0.25     # bench store's default: a quarter of MG2's KV (and chunk time): a minute, not seven
MG2_CHUNK_MS = 1200.0     # MG2's chunk on an RTX 4090 (the paper)


def split_list(text: str, flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"{flag} needs at least one value, got {text!r}")
    return items


def _bw(value: str) -> str | None:
    return None if value in ("unlimited", "none", "inf") else value


@click.command("store")
@click.option("--spill", type=click.Path(path_type=Path), required=True,
              help="Directory on the drive to test (created if missing, and then removed); each run uses "
                   "(and removes) a sub-directory.")
@click.option("--modes", default="prefetch,on-demand", show_default=True,
              help="Store modes, comma-separated (prefetch, on-demand, sync, dram-only, device-only, window).")
@click.option("--drive-bw", "drive_bws", default=None,
              help="Emulated drive bandwidths in GB/s, comma-separated ('unlimited' = the real drive). Default: "
                   "unlimited,0.25; with --model lingbot-fast 1.0,0.5,0.25 (full-size drives, scaled with --size-scale).")
@click.option("--writeback", "writebacks", default="background", show_default=True,
              help="When stored chunks go to the drive: background (write-back when the pool runs low), "
                   "through (each at once), sync (the loop waits), or several (comma-separated).")
@click.option("--chunks", type=click.IntRange(min=2), default=28, show_default=True)
@click.option("--pool-slots", type=click.IntRange(min=8), default=8, show_default=True,
              help="Host pool in chunks: small, so the pool spills within the first chunks.")
@click.option("--kv-scale", type=float, default=STORE_KV_SCALE, show_default=True,
              help="KV bytes relative to MG2 (1 = 129.4 MB per int4 chunk, 12 GiB of memory on a CPU).")
@click.option("--chunk-ms", type=float, default=None,
              help="Device time per chunk. Default: MG2's 1200 on an RTX 4090 times --kv-scale, so a chunk "
                   "needs MG2's GB/s of the drive (lingbot-fast: 1200).")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--trajectory", type=click.Path(path_type=Path), help="Default: yaw.yaml (revisits every 20 chunks).")
@click.option("--figures", type=click.Path(path_type=Path), default=None,
              help="Also write the runs' report here (worldpager report's figures, overlaid, and its page).")
@click.option("--model", "model", type=click.Choice(["synthetic", "lingbot-fast"]), default="synthetic",
              show_default=True, help="Whose KV per chunk: synthetic (MG2's x --kv-scale) or lingbot-fast's "
                                      "(1.02 GB int4; --kv-scale is then set from it).")
@click.option("--size-scale", type=float, default=1.0, show_default=True,
              help="lingbot-fast: KV bytes and drive bandwidths both times this (a smaller machine; the "
                   "stalls keep the full size's read and write times).")
@click.option("--spill-max", "spill_max", type=SessionSize(BY_NAME["spill_max"]), help="Disk quota of each run's spill directory (as generate's --spill-max).")
@click.option("--dry-run", is_flag=True, help="Print the runs that would be made (sizes, bandwidths) and stop.")
@json_result
def store(spill: Path, modes: str, drive_bws: str | None, writebacks: str, chunks: int, pool_slots: int,
          kv_scale: float, chunk_ms: float, warmup: int, trajectory: Path | None, figures: Path | None,
          model: str, size_scale: float, dry_run: bool, spill_max: str | None) -> None:
    """Stalls and per-chunk cost of store modes side by side (synthetic model, real store and disk).
    The default run (4 runs of 28 chunks at a quarter of MG2's KV and chunk time) takes about a minute."""
    from engine.bench.lingbot_store import LINGBOT_DRIVE_BWS, scaled_store

    scaled = scaled_store(size_scale) if model == "lingbot-fast" else None
    if chunk_ms is None:
        chunk_ms = MG2_CHUNK_MS * (1.0 if scaled is not None else kv_scale)
    if scaled is not None:
        kv_scale = scaled.kv_scale
    drive_bws = drive_bws or (LINGBOT_DRIVE_BWS if scaled is not None else "unlimited,0.25")
    emulated = {b: (scaled.drive_bw(b) if scaled is not None else b) for b in split_list(drive_bws, "--drive-bw")}
    if dry_run:
        _store_plan(modes, emulated, writebacks, chunks, pool_slots, kv_scale, chunk_ms, scaled)
        return
    grid = [(m, b, w) for m in split_list(modes, "--modes") for b in split_list(drive_bws, "--drive-bw")
            for w in split_list(writebacks, "--writeback")]
    with bench_directory(spill, "--spill") as spill:
        if figures is not None:
            from engine.report.write import prepare_out

            prepare_out(figures / "logs")   # before the runs: an unwritable --figures fails at once
        rows, results = _store_runs(grid, spill, emulated, chunks, kv_scale, chunk_ms, pool_slots, spill_max,
                                    trajectory, figures, warmup)
    _store_report(rows, results, grid, spill, modes, drive_bws, writebacks, chunks, pool_slots, kv_scale,
                  chunk_ms, warmup, model, size_scale, spill_max, scaled, figures)


def _store_runs(grid, spill, emulated, chunks, kv_scale, chunk_ms, pool_slots, spill_max, trajectory, figures,
                warmup):
    from engine.bench.experiments import run_synthetic

    rows, results = [], []
    for i, (mode, bw, wb) in enumerate(grid):
        click.echo(f"bench store: run {i + 1}/{len(grid)}: {mode}, drive {bw}, write-back {wb}, {chunks} chunks",
                   err=True)
        overlay = {"chunks": chunks, "kv_scale": kv_scale, "chunk_ms": chunk_ms,
                   "memory": {"store": mode, "pool_slots": pool_slots, "drive_bw": _bw(emulated[bw]),
                              "writeback": wb}}
        if spill_max is not None:
            overlay["memory"]["spill_max"] = spill_max
        if trajectory is not None:
            overlay["trajectory"] = str(trajectory)
        keep = figures / "logs" / f"{mode}-{bw}-{wb}.log.jsonl" if figures is not None else None
        r = run_synthetic(overlay, spill, warmup=warmup, name=f"{mode}-{bw}-{wb}", keep_log=keep, progress=True)
        results.append({"store": mode, "drive_bw": bw, "drive_bw_emulated": emulated[bw], "writeback": wb, **r})
        rows.append((mode, bw if emulated[bw] == bw else f"{bw} ({emulated[bw]})", wb, num(r["stall_p50_ms"]), num(r["stall_p99_ms"]), num(r["stall_max_ms"]),
                     str(r["stalled_chunks"]), num(r["chunk_ms_p50"]), num(r["store_ms_p50"]),
                     str(r["spill_chunk"]), str(r["first_read_chunk"]),
                     f"{r['hits']}/{r['misses']}/{r['stale']}", size(r["disk_bytes_read"]),
                     size(r["disk_bytes_written"]), r["status"] if r["status"] == "done" else f"{r['status']} at {r['chunks']}"))
        click.echo(f"  {mode} / drive {bw} / write-back {wb}: stall p99 {r['stall_p99_ms']:.1f} ms", err=True)
        if "disk_alloc_max" in r:
            click.echo(f"  --spill-max {spill_max}: spill directory at most {size(r['disk_alloc_max'])} (quota "
                       f"{size(r['spill_max_bytes'])}), {r['dropped']} chunks dropped, first choice kept "
                       f"{(r['first_choice_rate'] or 0) * 100:.1f} %; allocated at each tenth: "
                       + ", ".join(f"{c}:{size(b)}" for c, b in r["disk_alloc_series"]), err=True)
    return rows, results


def _store_report(rows, results, grid, spill, modes, drive_bws, writebacks, chunks, pool_slots, kv_scale, chunk_ms,
                  warmup, model, size_scale, spill_max, scaled, figures) -> None:
    if scaled is not None:
        click.echo(f"bench store: lingbot-fast KV x{size_scale:g} = {size(scaled.chunk_bytes)} int4 a chunk "
                   f"(full size {size(scaled.lingbot_chunk_bytes)}); drives are full-size GB/s (emulated GB/s)")
    click.echo(f"bench store: synthetic MG2 KV x{kv_scale:g}, {chunks} chunks of {chunk_ms:g} ms, pool "
               f"{pool_slots} chunks, spill under {spill}, stalls after {warmup} warm-up chunks")
    echo_table(("store", "drive", "write-back", "stall p50", "p99", "max", "stalled", "chunk ms", "store ms",
                "spill@", "1st read@", "hit/miss/stale", "disk read", "disk write", "status"), rows)
    if figures is not None:
        from engine.report.write import write_report

        logs = [figures / "logs" / f"{m}-{b}-{w}.log.jsonl" for m, b, w in grid]
        page = write_report(logs, figures, title=f"bench store: {chunks} chunks, pool {pool_slots}").page
        click.echo(f"figures: {figures} (page {page})")
    echo_json("store", {"runs": results}, machine("cpu"),
              {"spill": str(spill), "modes": modes, "drive_bw": drive_bws, "writeback": writebacks,
               "chunks": chunks, "pool_slots": pool_slots, "kv_scale": kv_scale, "chunk_ms": chunk_ms,
               "warmup": warmup, "model": model, "size_scale": size_scale,
               "spill_max": spill_max})


def _store_plan(modes, emulated, writebacks, chunks, pool_slots, kv_scale, chunk_ms, scaled) -> None:
    """``bench store --dry-run``: the grid of runs, nothing run."""
    runs = [{"store": m, "drive_bw": b, "drive_bw_emulated": e, "writeback": w}
            for m in split_list(modes, "--modes") for b, e in emulated.items() for w in split_list(writebacks, "--writeback")]
    from engine.config import synthetic_model_config
    from engine.facts.kv_format import byte_figures

    chunk_bytes = byte_figures(synthetic_model_config(kv_scale).kv_layout())["int4"]
    click.echo(f"bench store (dry run): {len(runs)} runs of {chunks} chunks of {chunk_ms:g} ms, pool {pool_slots} "
               f"chunks, {size(chunk_bytes)} int4 a chunk (kv_scale {kv_scale:.4g})")
    echo_table(("store", "drive GB/s", "emulated GB/s", "write-back"),
               [(r["store"], r["drive_bw"], r["drive_bw_emulated"], r["writeback"]) for r in runs])
    echo_json("store_plan", {"runs": runs}, machine("cpu"),
              {"chunks": chunks, "pool_slots": pool_slots, "kv_scale": kv_scale, "chunk_ms": chunk_ms,
               "chunk_bytes_int4": chunk_bytes,
               "lingbot_chunk_bytes_int4": None if scaled is None else scaled.lingbot_chunk_bytes,
               "size_scale": None if scaled is None else scaled.size_scale})


@click.command("memory")
@click.option("--spill", type=click.Path(path_type=Path), required=True,
              help="Directory on the drive for the disk tier (a sub-directory is used and removed).")
@click.option("--chunks", type=click.IntRange(min=2), default=320, show_default=True)
@click.option("--kv-scale", type=float, default=1.0, show_default=True,
              help="KV bytes relative to MG2 (1 = 129.4 MB per int4 chunk).")
@click.option("--pool-slots", type=click.IntRange(min=8),
              help="Host pool in chunks. Default: 16, or sized from --host-mem when that is given.")
@click.option("--host-mem", "host_mem", type=Size("GiB"),
              help="Host budget (24G, 512M; a plain number is GiB): the pool is budget - process - 2 GiB (as generate sizes it).")
@click.option("--chunk-ms", type=float, default=0.0, show_default=True,
              help="Device time per chunk (0: only the store's own work, the most allocations per second).")
@click.option("--warmup", type=click.IntRange(min=0), default=20, show_default=True)
@click.option("--block", type=click.IntRange(min=1), default=100, show_default=True,
              help="Chunks per block; each block is reduced to its median RSS.")
@click.option("--trajectory", type=click.Path(path_type=Path), help="Default: yaw.yaml (revisits every 20 chunks).")
@json_result
def memory(spill: Path, chunks: int, kv_scale: float, pool_slots: int | None, host_mem: float | None,
           chunk_ms: float, warmup: int, block: int, trajectory: Path | None) -> None:
    """Host RSS over a long session: medians of blocks of chunks (synthetic model, real store and disk)."""
    from engine.bench.memory import bench_memory

    if host_mem is not None and not 0 < host_mem < float("inf"):
        raise ConfigError(f"--host-mem must be a positive number of GiB, got {host_mem}")
    if chunks <= warmup:
        raise ConfigError(f"--chunks {chunks} leaves nothing after --warmup {warmup}")
    if pool_slots is None and host_mem is None:
        pool_slots = 16
    with bench_directory(spill, "--spill"):
        r = bench_memory(chunks, kv_scale, spill, pool_slots=pool_slots, host_mem_gib=host_mem, chunk_ms=chunk_ms,
                         warmup=warmup, block=block, trajectory=trajectory)
    alloc = r["allocator"] or {}
    pinned = (f"malloc thresholds pinned at {size(alloc['mmap_threshold'])}" if alloc.get("applied")
              else f"malloc thresholds not pinned ({alloc.get('reason', 'unknown')})")
    budget = f"--host-mem {host_mem:g} GiB" if host_mem is not None else f"pool of {pool_slots} chunks"
    baseline = r["host_baseline_bytes"]
    click.echo(f"bench memory: synthetic MG2 KV x{kv_scale:g}, {r['chunks']} chunks of {chunk_ms:g} ms, {budget} "
               f"({size(r['pool_bytes'])}), spill under {spill}; {pinned}; process before the pool "
               f"{size(baseline) if baseline else 'unknown'}; RSS medians of {block}-chunk blocks after {warmup}")
    first = r["blocks"][0]["rss_median_bytes"] if r["blocks"] else 0
    echo_table(("chunks", "RSS median", "vs first"), [
        (f"{b['first_chunk']}-{b['first_chunk'] + b['chunks'] - 1}", f"{b['rss_median_bytes'] / GiB:.3f} GiB",
         f"{(b['rss_median_bytes'] / first - 1) * 100:+.2f} %") for b in r["blocks"]])
    click.echo(f"drift {r['drift'] * 100:.2f} %, spread {r['spread'] * 100:.2f} %, RSS max {size(r['rss_max_bytes'])}, "
               f"chunk ms p50 {num(r['chunk_ms_p50'])}, status {r['status']}")
    echo_json("memory", {**r, "host_mem_gib": host_mem}, machine("cpu"),
              {"spill": str(spill), "chunks": chunks, "kv_scale": kv_scale, "pool_slots": pool_slots,
               "host_mem_gib": host_mem, "chunk_ms": chunk_ms, "warmup": warmup, "block": block,
               "trajectory": str(trajectory) if trajectory else None})
