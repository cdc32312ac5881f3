"""``worldpager plan``: will a session fit, where does it spill, will it stall — before running it.

Thin shell over ``engine.planner`` (the analytical model; no torch) and ``engine.planner_probe`` (a
quick O_DIRECT write+read in ``--spill DIR``). Prints a table, then one JSON line last.
"""
from __future__ import annotations

import json

import click

from engine import planner
from engine.config import session_model_config
from engine.errors import ConfigError
from engine.overlay import resolve_session_config
from engine.planner_probe import DEFAULT_PROBE_BYTES, probe_drive

GiB = 1 << 30
PLAN_BASE = {"model": "mg2-universal"}   # the planner models MG2-shaped KV: MG2 unless a preset says otherwise
MiB = 1 << 20


def memory_flags(host_mem, device_mem, kv_bits, drive_bw, spill, store) -> dict:
    """Only the flags the user gave, as a ``memory`` overlay (flags override the preset)."""
    given = {"host_mem_gib": host_mem, "device_mem_gib": device_mem, "kv_bits": kv_bits,
             "drive_bw": drive_bw, "spill": spill, "store": store}
    given = {k: v for k, v in given.items() if v is not None}
    return {"memory": given} if given else {}


def resolve_drive(cfg, probe_bytes: int, say) -> tuple[planner.DriveRates | None, int | None, str]:
    """(drive rates or None for no disk tier, free bytes of the spill dir, where the rates came from)."""
    cap = planner.parse_drive_rates(cfg.memory.drive_bw)
    spill = cfg.memory.spill
    if spill is None:
        return (cap, None, "--drive-bw") if cfg.memory.drive_bw is not None else (None, None, "none")
    probe = probe_drive(spill, probe_bytes)
    mode = "O_DIRECT" if probe.direct else "buffered: the file system refused O_DIRECT, reads may be optimistic"
    say(f"probe: {spill}: {probe.nbytes / MiB:.0f} MiB written at {probe.write_Bps / 1e9:.3f} GB/s, "
        f"read at {probe.read_Bps / 1e9:.3f} GB/s ({mode}); {probe.free_bytes / GiB:.1f} GiB free")
    measured = planner.DriveRates(probe.read_Bps, probe.write_Bps)
    return planner.cap_rates(measured, cap), probe.free_bytes, "probe"


def _gbps(rate: float | None) -> str:
    return "uncapped" if rate is None else f"{rate / 1e9:.3f} GB/s"


def _at(model, chunks: int | None) -> str:
    """``chunk N (m:ss of video)`` or ``unbounded``."""
    if chunks is None:
        return "unbounded"
    s = planner.video_seconds(model, chunks)
    return f"chunk {chunks} ({int(s // 60)}:{s % 60:04.1f} of video)"


def table_lines(p: planner.Plan, model, budgets: planner.Budgets, drive_source: str) -> list[str]:
    """The human table; every figure is also in the JSON line."""
    lines = [f"plan: {p.model}, store {p.store}, {p.format} KV, k={p.retrieve_k}, {p.chunks} chunks "
             f"({p.video_s / 60:.1f} min of video), chunk {p.chunk_s * 1e3:.0f} ms",
             f"host {budgets.host / GiB:.2f} GiB - baseline {budgets.host_baseline / GiB:.2f} - margin "
             f"{budgets.margin / GiB:.2f} = pool {p.pool_bytes / GiB:.2f} GiB"
             + ("" if budgets.device is None else
                f"; device {budgets.device / GiB:.2f} GiB - baseline {budgets.device_baseline / GiB:.2f} GiB "
                f"- window/current/staging bf16 buffers"),
             "",
             f"{'format':<8}{'bytes/chunk':>14}{'slot bytes':>14}",]
    slots = planner.slot_bytes(model)
    lines += [f"{f:<8}{b:>14,}{slots[f]:>14,}" for f, b in p.bytes_by_format.items()]
    lines += ["", f"{'tier-format':<14}{'spill chunk':>12}  video before it"]
    lines += [f"{tier:<14}{n:>12}  {planner.video_seconds(model, n) / 60:6.2f} min" for tier, n in p.spill_chunk.items()]
    disk = ("none (give --spill DIR or --drive-bw GBPS)" if not p.disk_tier else
            f"read {_gbps(p.drive.read)}, write {_gbps(p.drive.write)} ({drive_source})")
    lines += ["",
              f"drive             {disk}",
              f"storage (all KV)  {p.storage_bytes / GiB:.1f} GiB ({p.chunks} x {p.slot_bytes:,} B)",
              f"disk tier holds   {p.disk_bytes / GiB:.1f} GiB"
              + (f" (chunks from {p.session_spill_chunk} on)" if p.uses_disk else "")
              + ("" if p.disk_free_bytes is None else f"; {p.disk_free_bytes / GiB:.1f} GiB free"
                 + (" - TOO SMALL" if p.disk_bytes > p.disk_free_bytes else "")),
              f"write-back need   {p.writeback_Bps / 1e9:.3f} GB/s (b / chunk time)",
              f"read need         {p.read_Bps / 1e9:.3f} GB/s ({p.disk_reads_per_chunk:g} chunk(s) per chunk "
              f"from the drive)",
              f"stalls            {_stall_text(p)}",
              f"on-demand stall   {p.on_demand_stall_ms:.0f} ms per chunk once reading from the drive",
              f"session stops     {_at(model, p.stop_chunk) if p.stop_chunk is not None else 'no'}",
              f"longest zero-stall session  {_at(model, p.max_zero_stall_chunks)}"]
    return lines


def _stall_text(p: planner.Plan) -> str:
    if p.store == "sync" and p.stall_predicted:
        return "YES: sync copies the retrieved set synchronously every chunk"
    if p.store == "on-demand" and p.stall_predicted:
        return f"YES: every read from the drive is waited for (about {p.on_demand_stall_ms:.0f} ms per chunk)"
    if not p.uses_disk:
        return "none (the session never reads from the drive)"
    if not p.stall_predicted:
        return f"none predicted (prefetch stalls below {p.threshold_Bps / 1e9:.3f} GB/s)"
    return f"YES: about {p.prefetch_stall_ms:.0f} ms per chunk (needs {p.threshold_Bps / 1e9:.3f} GB/s)"


@click.command()
@click.option("--preset", default="mg2-4090-32g", show_default=True,
              help="Session preset (presets/NAME.yaml) or a YAML file; flags override it.")
@click.option("--host-mem", type=float, help="Host memory budget, GiB. Default: the preset's, else what this machine has available.")
@click.option("--device-mem", type=float, help="Device memory, GiB (the whole GPU). Default: the preset's.")
@click.option("--kv-bits", type=int, help="Storage format of the retrieval memory: 16 (bf16), 8, 4 or 2.")
@click.option("--store", help="Store mode (prefetch, on-demand, sync, dram-only, device-only, window).")
@click.option("--minutes", type=float, help="Session length in minutes of video (16 fps).")
@click.option("--chunks", type=int, help="Session length in chunks. Default: the preset's.")
@click.option("--chunk-ms", type=float, default=planner.CHUNK_S * 1e3, show_default=True,
              help="Compute time of one chunk, ms (MG2 on an RTX 4090: 1200).")
@click.option("--drive-bw", help="Drive bandwidth, GB/s: 0.25 or r=0.5,w=0.2 (caps the probe with --spill).")
@click.option("--spill", type=click.Path(), help="Spill directory: probe its drive (O_DIRECT write+read, removed).")
@click.option("--probe-mib", type=int, default=DEFAULT_PROBE_BYTES // MiB, show_default=True,
              help="MiB the --spill probe writes and reads.")
@click.option("--baseline-gib", type=float, default=planner.HOST_BASELINE_GIB, show_default=True,
              help="Host memory of the process before the pool, GiB (MG2 on CUDA).")
@click.option("--device-baseline-gib", type=float, default=planner.DEVICE_BASELINE_GIB, show_default=True,
              help="Device memory of model + runtime, GiB (MG2 on a 24 GiB RTX 4090).")
@click.option("--disk-reads-per-chunk", type=float, default=planner.DISK_READS_PER_CHUNK, show_default=True,
              help="Retrieved chunks per chunk that must come from the drive.")
def plan(preset, host_mem, device_mem, kv_bits, store, minutes, chunks, chunk_ms, drive_bw, spill, probe_mib,
         baseline_gib, device_baseline_gib, disk_reads_per_chunk) -> None:
    """Predict spill points, storage, bandwidth needs and stalls; the last line is JSON."""
    from worldpager_cli.main import chunks_for_length   # main imports this module: resolve at call time

    flags = memory_flags(host_mem, device_mem, kv_bits, drive_bw, spill, store)
    m = session_model_config(resolve_session_config(preset, flags, PLAN_BASE))
    n = chunks_for_length(chunks, None, minutes, m.fps, m.video_frames_of_chunk(0), m.video_frames_of_chunk(1))
    cfg = resolve_session_config(preset, {**flags, **({"chunks": n} if n is not None else {})}, PLAN_BASE)
    budgets = planner.Budgets.from_gib(_host_gib(cfg), cfg.memory.device_mem_gib, baseline_gib,
                                       device_baseline_gib)
    if probe_mib < 1:
        raise ConfigError(f"--probe-mib must be at least 1, got {probe_mib}")
    drive, free, source = resolve_drive(cfg, probe_mib * MiB, click.echo)
    p = planner.plan_session(cfg, budgets, drive=drive, disk_free_bytes=free, chunk_s=chunk_ms / 1e3,
                             disk_reads_per_chunk=disk_reads_per_chunk)
    for line in table_lines(p, m, budgets, source):
        click.echo(line)
    click.echo(json.dumps({**p.summary(), "drive_source": source}, separators=(",", ":")))


def _host_gib(cfg) -> float:
    """The configured host budget, else this machine's available memory (as the session takes it)."""
    if cfg.memory.host_mem_gib is not None:
        return cfg.memory.host_mem_gib
    import psutil

    return psutil.virtual_memory().available / GiB
