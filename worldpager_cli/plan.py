"""``worldpager plan``: will a session fit, where does it spill, will it stall — before running it.

Thin shell over ``engine.planner.model`` (the analytical model; no torch), ``engine.planner.device`` (the
whole device: weights, KV, activations, PCIe, compute) and ``engine.planner.probe`` (a quick O_DIRECT
write+read in ``--spill DIR``). It takes ``generate``'s flags (``worldpager_cli.options``) and resolves the
same config from them (presets and ``pool_slots`` included), plus its own: the measured chunk time, the
process baseline (a figure, or a session log's header), the probe's size, the GPU and the PCIe rate.
Prints a table (``engine.planner.table``), then one JSON line last.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.planner import model as planner
from engine.config import ARENA_MODEL
from engine.errors import ConfigError
from engine.settings.overlay import resolve_session_config, with_user_config
from engine.planner.device import PCIE_GBS
from engine.planner.gpus import GPUS, gpu
from engine.planner.inputs import baseline_bytes
from engine.planner.measured import measured_inputs
from engine.planner.probe import DEFAULT_PROBE_BYTES, probe_drive
from engine.planner.quota import quota_prediction
from engine.planner.session_device import given_settings, session_device_inputs
from engine.planner.table import PlanInputs, quota_lines, table_lines
from worldpager_cli.help import SectionedCommand
from worldpager_cli.options import CheckedNumber, Size, chunks_for_length, session_options, session_overlay

GiB = 1 << 30
PLAN_BASE = {"model": "mg2-universal"}   # the planner models MG2-shaped KV: MG2 unless a preset says otherwise
PLAN_PRESET = "mg2-4090-32g"             # the paper's platform, when neither a preset nor a model is given
MiB = 1 << 20


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


def planned_device(cfg) -> str:
    """Where the session would run: ``auto`` is CUDA when this machine has an NVIDIA device node
    (the plan imports no torch to ask), else the CPU."""
    if cfg.device != "auto":
        return "cpu" if cfg.device == "cpu" else "cuda"
    return "cuda" if Path("/dev/nvidia0").exists() else "cpu"


def plan_config(opts: dict):
    """The session config ``generate`` would run with the same flags; without --preset, --model and
    --checkpoint, the paper's platform (``PLAN_PRESET``): ``generate``'s default arena model is not
    MG2-shaped."""
    preset = opts["preset"]
    if preset is None and opts["model"] is None and opts["checkpoint"] is None:
        preset = PLAN_PRESET
    flags = session_overlay(opts)
    base = with_user_config(PLAN_BASE)
    cfg = resolve_session_config(preset, flags, base)
    given = given_settings(preset, flags, base, cfg)
    if cfg.model == ARENA_MODEL:
        raise ConfigError("plan models MG2-shaped KV (--model mg2-*, tiny, micro, synthetic or lingbot-*); "
                          "the arena model is not one")
    m = planner.planned_model(cfg)
    n = chunks_for_length(opts["chunks"], opts["seconds"], opts["minutes"], m.fps,
                          m.grid.frames_of_chunk(0), m.grid.frames_of_chunk(1))
    if n is not None:
        cfg = resolve_session_config(preset, {**flags, "chunks": n}, base)
    return cfg, m, given


def plan_budgets(cfg, model, host_baseline: int, device_baseline_gib: float | None, device) -> planner.Budgets:
    """The budgets as the session would size them (its pool, its CPU staging slots; on CUDA the host's pinned
    copies of streamed blocks and per-layer KV); the device baseline is ``--device-baseline-gib``, else the model's
    weights and runtime of the whole-device plan. ``device``: the session's ``DeviceInputs``."""
    host = cfg.memory.host_mem_gib
    budget = None if device.budget is None else device.budget / GiB
    base = planner.Budgets.from_gib(_host_gib(cfg), budget, 0.0, planner.device_baseline_bytes(model) / GiB
                                    if device_baseline_gib is None else device_baseline_gib)
    mem = cfg.memory
    staging = (planner.cpu_staging_bytes(model, mem.store, mem.retrieve_k, mem.hedge_slots, mem.device_cache)
               if planned_device(cfg) == "cpu" else 0)
    whole = planner.check_device_fits(model, base, mem.retrieve_k, mem.sink, device)
    if device_baseline_gib is None:          # the plan's weights and runtime: beside them the KV, then a device tier
        base = replace(base, device_baseline=whole.total - whole.kv_bytes)
    return replace(base, host_baseline=host_baseline, pool_slots=cfg.memory.pool_slots,
                   host_staging=staging + (whole.host_bytes if planned_device(cfg) == "cuda" else 0),
                   host_given=host is not None)


PLAN_SECTIONS = {**dict.fromkeys(("wall_ms", "timing_from", "stage_ms", "probe_mib", "baseline_gib", "baseline_from",
                                  "device_baseline_gib", "disk_reads_per_chunk", "reads_from", "gpu", "pcie_gbs"),
                                 "Planning"),
                 "quiet": "Output"}


@click.command(cls=SectionedCommand, sections=PLAN_SECTIONS, examples=(
    "# the arena model for 10 minutes on this machine, with its defaults",
    "worldpager plan --minutes 10",
    "# MG2 on a 32 GiB host: where the pool spills, and whether this drive keeps up (a short probe)",
    "worldpager plan --preset mg2-4090-32g --minutes 30 --spill /mnt/nvme/wp",
    "# only the JSON line, for a script",
    "worldpager plan --preset mg2-4090-32g --minutes 30 --quiet | jq .stall_predicted",
    "# LingBot-World-Fast on a 24 GiB card: how its weights and KV sit, and the predicted chunk time",
    "worldpager plan --model lingbot-fast --device-mem 24 --gpu rtx4090 --minutes 5",
))
@session_options
@click.option("--wall-ms", type=float, help="A chunk's wall time without stalls, ms (e.g. a log's wall_ms - "
              "stall_ms). Default: --chunk-ms (MG2 on an RTX 4090: 1200).")
@click.option("--stage-ms", type=float, default=planner.STAGE_S * 1e3, show_default=True,
              help="On-demand: dequantising one loaded chunk on the loop's path, ms (a GPU: about 0).")
@click.option("--probe-mib", type=Size("MiB", integer=True, low=1, low_open=False), default=DEFAULT_PROBE_BYTES // MiB, show_default=True,
              help="MiB the --spill probe writes and reads (or a size: 64M, 1G).")
@click.option("--baseline-gib", type=Size("GiB", low=0, low_open=False),
              help=f"Host memory of the process before the pool (a plain number is GiB). Default: {planner.HOST_BASELINE_GIB} (MG2 on CUDA).")
@click.option("--baseline-from", type=click.Path(path_type=Path),
              help="Take the process baseline a session measured from its log's header (host_baseline_bytes).")
@click.option("--device-baseline-gib", type=Size("GiB", low=0, low_open=False),
              help=f"Device memory of weights + runtime (a plain number is GiB). Default: the model's bf16 weights + "
                   f"{planner.DEVICE_RUNTIME_GIB} GiB of runtime (assumed: MG2 on an RTX 4090).")
@click.option("--disk-reads-per-chunk", type=float, default=planner.DISK_READS_PER_CHUNK, show_default=True,
              help="Retrieved chunks per chunk that must come from the drive.")
@click.option("--reads-from", type=int, help="First chunk whose retrieval comes back to a chunk the pool has "
              "evicted (the trajectory's first revisit). Default: the chunk after the spill, the earliest.")
@click.option("--timing-from", type=click.Path(path_type=Path),
              help="Take the chunk time (median wall_ms - stall_ms - paused_ms after chunk 0) and the process "
                   "baseline from a session's log, instead of the assumed ones.")
@click.option("--gpu", "gpu_name", type=click.Choice(sorted(GPUS)),
              help="Predict the chunk time on this card (assumed spec-sheet throughput; its memory is the device "
                   "budget unless --device-mem is given). Default: no prediction.")
@click.option("--pcie-gbs", type=CheckedNumber(False, 0, True, "GB/s"), default=PCIE_GBS, show_default=True,
              help="Host-to-device copy rate, GB/s (default: PCIe 4.0 x16 effective, assumed).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the JSON line.")
@json_result
def plan(wall_ms, stage_ms, probe_mib, baseline_gib, baseline_from, device_baseline_gib, disk_reads_per_chunk,
         reads_from, timing_from, gpu_name, pcie_gbs, quiet, **opts) -> None:
    """Predict spill points, storage, bandwidth needs and stalls of the session `generate` would run
    with the same flags; the last line is JSON. Inputs nobody measured (the chunk time, the process and
    device baselines) are the paper's MG2-on-an-RTX-4090 figures, marked "assumed" in the table and
    listed under "assumed" in the JSON."""
    if wall_ms is not None and not (math.isfinite(wall_ms) and wall_ms > 0):
        raise ConfigError(f"--wall-ms must be a positive number of ms, got {wall_ms}")
    if wall_ms is not None and timing_from is not None:
        raise ConfigError("give only one of --wall-ms, --timing-from (both set the chunk time)")
    cfg, m, (weights_given, paging_given) = plan_config(opts)
    say = (lambda text: None) if quiet else click.echo
    measured = None if timing_from is None else measured_inputs(timing_from)
    if measured is not None:
        wall_ms = measured.chunk_s * 1e3
        say(f"measured: {timing_from}: chunk {wall_ms:.0f} ms (median of {measured.chunks} chunks, "
            f"{measured.model or 'model unknown'})"
            + ("" if measured.host_baseline is None else
               f"; process baseline {measured.host_baseline / GiB:.2f} GiB"))
        if measured.model is not None and measured.model != cfg.model:
            click.echo(f"worldpager: warning: --timing-from {timing_from} measured {measured.model}, "
                       f"this plan is for {cfg.model}", err=True)
    inputs = PlanInputs.of(cfg, opts, wall_ms, baseline_gib, baseline_from, device_baseline_gib, measured)
    raw = "float32" if planned_device(cfg) == "cpu" else "bfloat16"
    device = session_device_inputs(cfg, m, None if gpu_name is None else gpu(gpu_name), weights_given=weights_given,
                                   paging_given=paging_given, pcie_gbs=pcie_gbs,
                                   device_baseline_gib=device_baseline_gib, raw_dtype=raw)
    budgets = plan_budgets(cfg, m, baseline_bytes(baseline_gib, baseline_from, measured), device_baseline_gib, device)
    if probe_mib < 1:
        raise ConfigError(f"--probe-mib must be at least 1, got {probe_mib}")
    drive, free, source = resolve_drive(cfg, probe_mib * MiB, say)
    predicted = planner.check_device_fits(m, budgets, cfg.memory.retrieve_k, cfg.memory.sink, device).chunk_s_predicted
    if wall_ms is None and opts.get("chunk_ms") is None and predicted:
        wall_ms = predicted * 1e3          # the named GPU's predicted chunk time (still assumed)
    p = planner.plan_session(cfg, budgets, drive=drive, disk_free_bytes=free,
                             chunk_s=None if wall_ms is None else wall_ms / 1e3,
                             disk_reads_per_chunk=disk_reads_per_chunk, stage_s=stage_ms / 1e3,
                             reads_from=reads_from, raw_dtype=raw, device=device)
    quota = quota_prediction(cfg, p, planner.window_chunks(m))
    for line in table_lines(p, m, budgets, source, inputs) + quota_lines(quota, m) + inputs.footnote(budgets):
        say(line)
    emit_json(json_line({**p.summary(), "drive_source": source, "host_baseline_bytes": budgets.host_baseline,
                         "device_weights_bytes": planner.device_weight_bytes(m),
                         "device_baseline_bytes": budgets.device_baseline if budgets.device is not None else None,
                         "device": {"kind": planned_device(cfg), **p.device.summary()},
                         "assumed": inputs.assumed(budgets), **({"quota": quota} if quota else {})}))


def _host_gib(cfg) -> float:
    """The configured host budget, else this machine's available memory (as the session takes it)."""
    if cfg.memory.host_mem_gib is not None:
        return cfg.memory.host_mem_gib
    import psutil

    return psutil.virtual_memory().available / GiB
