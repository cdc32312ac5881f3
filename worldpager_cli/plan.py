"""``worldpager plan``: will a session fit, where does it spill, will it stall — before running it.

Thin shell over ``engine.planner.model`` (the analytical model; no torch) and ``engine.planner.probe`` (a
quick O_DIRECT write+read in ``--spill DIR``). It takes ``generate``'s flags (``worldpager_cli.options``)
and resolves the same config from them (presets and ``pool_slots`` included), plus its own: the measured
chunk time, the process baseline (a figure, or a session log's header) and the probe's size. Prints a
table, then one JSON line last.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.planner import model as planner
from engine.config import ARENA_MODEL
from engine.errors import ConfigError
from engine.settings.overlay import resolve_session_config, with_user_config
from engine.planner.measured import measured_inputs
from engine.planner.probe import DEFAULT_PROBE_BYTES, probe_drive
from worldpager_cli.help import SectionedCommand
from engine.planner.quota import quota_prediction
from worldpager_cli.options import Size, chunks_for_length, session_options, session_overlay

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


def _gbps(rate: float | None) -> str:
    return "uncapped" if rate is None else f"{rate / 1e9:.3f} GB/s"


def _at(model, chunks: int | None) -> str:
    """``chunk N (m:ss of video)`` or ``unbounded``."""
    if chunks is None:
        return "unbounded"
    s = planner.video_seconds(model, chunks)
    return f"chunk {chunks} ({int(s // 60)}:{s % 60:04.1f} of video)"


def table_lines(p: planner.Plan, model, budgets: planner.Budgets, drive_source: str,
                inputs: "PlanInputs | None" = None) -> list[str]:
    """The human table; every figure is also in the JSON line. Assumed inputs are marked as such."""
    mark = (lambda name: "") if inputs is None else (lambda name: inputs.mark(name, budgets))
    weights = planner.device_weight_bytes(model)
    lines = [f"plan: {p.model}, store {p.store}, {p.format} KV, k={p.retrieve_k}, {p.chunks} chunks "
             f"({p.video_s / 60:.1f} min of video), chunk {p.chunk_s * 1e3:.0f} ms{mark('chunk_ms')}",
             _pool_line(p, budgets) + mark("host_baseline"),
             *([] if budgets.device is None else
               [f"device {budgets.device / GiB:.2f} GiB - weights {weights / GiB:.2f} GiB (bf16, "
                f"{model.device_params / 1e9:.2f} G parameters) - runtime "
                f"{(budgets.device_baseline - weights) / GiB:.2f} GiB{mark('device_runtime')} - "
                f"window/current/staging bf16 buffers"]),
             "",
             f"{'format':<8}{'bytes/chunk':>14}{'slot bytes':>14}",]
    lines += [f"{f:<8}{b:>14,}{-(-b // 4096) * 4096:>14,}" for f, b in p.bytes_by_format.items()]
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
              f"shared drive      reads {p.read_s * 1e3:.0f} ms + write-back {p.write_s * 1e3:.0f} ms per chunk "
              f"(once reading from the drive)",
              f"on-demand stall   {p.on_demand_stall_ms:.0f} ms per chunk once reading from the drive",
              f"timeline          {_timeline_text(p)}",
              f"session stops     {_at(model, p.stop_chunk) if p.stop_chunk is not None else 'no'}",
              f"longest zero-stall session  {_at(model, p.max_zero_stall_chunks)}"]
    return lines


def _pool_line(p: planner.Plan, budgets: planner.Budgets) -> str:
    if budgets.pool_slots is not None:
        return f"pool {p.pool_slots} slots of {p.slot_bytes:,} B (--pool-slots) = {p.pool_bytes / GiB:.2f} GiB"
    staging = "" if not budgets.host_staging else f" - CPU staging {budgets.host_staging / GiB:.2f}"
    return (f"host {budgets.host / GiB:.2f} GiB - baseline {budgets.host_baseline / GiB:.2f}{staging} - margin "
            f"{budgets.margin / GiB:.2f} = pool {p.pool_bytes / GiB:.2f} GiB ({p.pool_slots} slots)")


def _timeline_text(p: planner.Plan) -> str:
    if p.reads_from is None:
        return "not replayed (no drive reads in this session, or a store it does not model)"
    first = "no chunk waits" if p.first_stall_chunk is None else f"first wait at chunk {p.first_stall_chunk}"
    reads = f"reads from chunk {p.reads_from}" if p.reads_from < p.chunks else "no reads from the drive"
    return (f"{reads}: {first}; stall P50 {p.stall_p50_ms:.0f} / P99 {p.stall_p99_ms:.0f} / max "
            f"{p.stall_max_ms:.0f} ms from the first eviction (chunk {p.session_spill_chunk}) on")


def _stall_text(p: planner.Plan) -> str:
    if p.store == "sync" and p.stall_predicted:
        return "YES: sync copies the retrieved set synchronously every chunk"
    if p.store == "on-demand" and p.stall_predicted:
        return f"YES: every read from the drive is waited for (about {p.on_demand_stall_ms:.0f} ms per chunk)"
    if not p.uses_disk:
        return "none (the session never reads from the drive)"
    if not p.stall_predicted and p.prefetch_stall_ms <= 0:
        return f"none predicted (no wait at {p.threshold_Bps / 1e9:.3f} GB/s or more, even in strict turns)"
    if p.first_stall_chunk is not None:
        return (f"YES: from chunk {p.first_stall_chunk}, P50 {p.stall_p50_ms:.0f} / P99 {p.stall_p99_ms:.0f} ms "
                f"(timeline); at most {p.prefetch_stall_ms:.0f} ms if reads and write-back took strict turns")
    return (f"none in this session (timeline); reads and write-back in strict turns would wait "
            f"{p.prefetch_stall_ms:.0f} ms a chunk (one drive needs {p.threshold_Bps / 1e9:.3f} GB/s)")


def log_baseline(path: Path) -> int:
    """The process baseline a session's store measured (``host_baseline_bytes`` in its log header)."""
    from engine.files.input_files import open_input
    from engine.runtime.telemetry import MAX_LINE_BYTES, line_problem
    try:
        with open_input(path, "--baseline-from") as f:   # a FIFO or /proc file: refused, not waited on
            header, problem = line_problem(f.readline(MAX_LINE_BYTES + 2) or b"{}")
    except OSError as exc:
        raise ConfigError(f"--baseline-from {path}: not a readable session log ({exc.strerror or exc})") from None
    if problem is not None:
        raise ConfigError(f"--baseline-from {path}: not a readable session log (line 1 is {problem})")
    value = header.get("host_baseline_bytes") if isinstance(header, dict) and header.get("type") == "header" else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"--baseline-from {path}: its header has no host_baseline_bytes "
                          "(not a session log, or a session without a host pool)")
    return value


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
    if cfg.model == ARENA_MODEL:
        raise ConfigError("plan models MG2-shaped KV (--model mg2-*, tiny, micro, synthetic or lingbot-*); "
                          "the arena model is not one")
    m = planner.planned_model(cfg)
    n = chunks_for_length(opts["chunks"], opts["seconds"], opts["minutes"], m.fps,
                          m.grid.frames_of_chunk(0), m.grid.frames_of_chunk(1))
    if n is not None:
        cfg = resolve_session_config(preset, {**flags, "chunks": n}, base)
    return cfg, m


def plan_budgets(cfg, model, host_baseline: int, device_baseline_gib: float | None) -> planner.Budgets:
    """The budgets as the session would size them (its pool, its CPU staging slots); the device baseline
    is ``--device-baseline-gib``, else the model's bf16 weights and the assumed runtime."""
    host = cfg.memory.host_mem_gib
    if device_baseline_gib is None:
        device_baseline_gib = planner.device_baseline_bytes(model) / GiB
    base = planner.Budgets.from_gib(_host_gib(cfg), cfg.memory.device_mem_gib, 0.0, device_baseline_gib)
    mem = cfg.memory
    staging = (planner.cpu_staging_bytes(model, mem.store, mem.retrieve_k, mem.hedge_slots, mem.device_cache)
               if planned_device(cfg) == "cpu" else 0)
    return replace(base, host_baseline=host_baseline, pool_slots=cfg.memory.pool_slots,
                   host_staging=staging, host_given=host is not None)


PLAN_SECTIONS = {**dict.fromkeys(("wall_ms", "timing_from", "stage_ms", "probe_mib", "baseline_gib", "baseline_from",
                                  "device_baseline_gib", "disk_reads_per_chunk", "reads_from"), "Planning"),
                 "quiet": "Output"}


@click.command(cls=SectionedCommand, sections=PLAN_SECTIONS, examples=(
    "# the arena model for 10 minutes on this machine, with its defaults",
    "worldpager plan --minutes 10",
    "# MG2 on a 32 GiB host: where the pool spills, and whether this drive keeps up (a short probe)",
    "worldpager plan --preset mg2-4090-32g --minutes 30 --spill /mnt/nvme/wp",
    "# only the JSON line, for a script",
    "worldpager plan --preset mg2-4090-32g --minutes 30 --quiet | jq .stall_predicted",
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
@click.option("--quiet", "-q", is_flag=True, help="Print only the JSON line.")
@json_result
def plan(wall_ms, stage_ms, probe_mib, baseline_gib, baseline_from, device_baseline_gib, disk_reads_per_chunk,
         reads_from, timing_from, quiet, **opts) -> None:
    """Predict spill points, storage, bandwidth needs and stalls of the session `generate` would run
    with the same flags; the last line is JSON. Inputs nobody measured (the chunk time, the process and
    device baselines) are the paper's MG2-on-an-RTX-4090 figures, marked "assumed" in the table and
    listed under "assumed" in the JSON."""
    if wall_ms is not None and not (math.isfinite(wall_ms) and wall_ms > 0):
        raise ConfigError(f"--wall-ms must be a positive number of ms, got {wall_ms}")
    if wall_ms is not None and timing_from is not None:
        raise ConfigError("give only one of --wall-ms, --timing-from (both set the chunk time)")
    cfg, m = plan_config(opts)
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
    budgets = plan_budgets(cfg, m, _baseline_bytes(baseline_gib, baseline_from, measured), device_baseline_gib)
    if probe_mib < 1:
        raise ConfigError(f"--probe-mib must be at least 1, got {probe_mib}")
    drive, free, source = resolve_drive(cfg, probe_mib * MiB, say)
    p = planner.plan_session(cfg, budgets, drive=drive, disk_free_bytes=free,
                             chunk_s=None if wall_ms is None else wall_ms / 1e3,
                             disk_reads_per_chunk=disk_reads_per_chunk, stage_s=stage_ms / 1e3,
                             reads_from=reads_from, raw_dtype="float32" if planned_device(cfg) == "cpu" else "bfloat16")
    quota = quota_prediction(cfg, p, planner.window_chunks(m))
    for line in table_lines(p, m, budgets, source, inputs) + _quota_lines(quota, m) + inputs.footnote(budgets):
        say(line)
    emit_json(json_line({**p.summary(), "drive_source": source, "host_baseline_bytes": budgets.host_baseline,
                           "device_weights_bytes": planner.device_weight_bytes(m),
                           "device_baseline_bytes": budgets.device_baseline if budgets.device is not None else None,
                           "device": planned_device(cfg), "assumed": inputs.assumed(budgets),
                           **({"quota": quota} if quota else {})}))


@dataclass(frozen=True)
class PlanInputs:
    """Which of the plan's inputs were given or measured, and which are assumed (the paper's MG2 on an
    RTX 4090): the chunk time, the host process baseline, the device runtime beside the weights."""

    chunk_given: bool
    host_baseline_given: bool
    device_runtime_given: bool

    @classmethod
    def of(cls, cfg, opts, wall_ms, baseline_gib, baseline_from, device_baseline_gib, measured) -> "PlanInputs":
        chunk = wall_ms is not None or opts.get("chunk_ms") is not None
        host = baseline_gib is not None or baseline_from is not None or (
            measured is not None and measured.host_baseline is not None)
        return cls(chunk, host, device_baseline_gib is not None)

    def assumed(self, budgets: planner.Budgets) -> list[str]:
        names = [("chunk_ms", self.chunk_given), ("host_baseline", self.host_baseline_given),
                 ("device_runtime", self.device_runtime_given or budgets.device is None)]
        return [name for name, known in names if not known]

    def mark(self, name: str, budgets: planner.Budgets) -> str:
        return " (assumed*)" if name in self.assumed(budgets) else ""

    def footnote(self, budgets: planner.Budgets) -> list[str]:
        assumed = self.assumed(budgets)
        if not assumed:
            return []
        how = ", ".join(ASSUMED[name] for name in assumed)
        return ["", f"* assumed: the paper's MG2 on an RTX 4090, not measured here; replace with {how}"]


ASSUMED = {"chunk_ms": "--wall-ms or --timing-from LOG (the chunk time)",
           "host_baseline": "--baseline-from or --timing-from LOG (the process baseline)",
           "device_runtime": "--device-baseline-gib (weights + runtime)"}


def _quota_lines(quota: dict | None, model) -> list[str]:
    """``--spill-max``: the disk with and without the quota, and where drops start."""
    if quota is None:
        return []
    return [f"disk, unbounded  {quota['disk_bytes_unbounded'] / GiB:.2f} GiB (blocks and index)",
            f"disk, --spill-max {quota['spill_max_bytes'] / GiB:.2f} GiB: {quota['disk_bytes_quota'] / GiB:.2f} GiB, "
            f"{quota['keep']} chunks kept; drops from {_at(model, quota['drops_from_chunk'])}"
            if quota["drops_from_chunk"] is not None else
            f"disk, --spill-max {quota['spill_max_bytes'] / GiB:.2f} GiB: {quota['disk_bytes_quota'] / GiB:.2f} GiB; "
            "nothing dropped (the session fits)"]


def _baseline_bytes(baseline_gib: float | None, baseline_from: Path | None, measured=None) -> int:
    if baseline_gib is not None and baseline_from is not None:
        raise ConfigError("give only one of --baseline-gib, --baseline-from")
    if baseline_from is not None:
        return log_baseline(baseline_from)
    if baseline_gib is None and measured is not None and measured.host_baseline is not None:
        return measured.host_baseline
    gib = planner.HOST_BASELINE_GIB if baseline_gib is None else baseline_gib
    if not (math.isfinite(gib) and gib >= 0):
        raise ConfigError(f"--baseline-gib must be a non-negative number of GiB, got {gib}")
    return int(gib * GiB)


def _host_gib(cfg) -> float:
    """The configured host budget, else this machine's available memory (as the session takes it)."""
    if cfg.memory.host_mem_gib is not None:
        return cfg.memory.host_mem_gib
    import psutil

    return psutil.virtual_memory().available / GiB
