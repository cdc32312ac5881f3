"""``worldpager bench ...``: measurements, one subcommand each, each a human table then one JSON line.

Every subcommand calls one engine function that returns a flat dict of numbers, prints a table of the
figures that matter, and ends with one compact JSON line holding the whole dict plus ``bench`` (the
subcommand), ``machine`` (CPU count and name, the device) and ``params`` (what was asked for), so
scripts read the last line and people read the rest. Nothing here asserts a speed.

To add an experiment, add one ``@bench.command`` function below that does the same.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

import click
from click.core import ParameterSource

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.bench.bench_dir import bench_directory
from engine.config import MODEL_CONFIGS, model_config
from engine.errors import ConfigError
from worldpager_cli.errors import WorldPagerGroup
from worldpager_cli.options import BY_NAME, SessionSize, Size

STORE_KV_SCALE = 0.25     # bench store's default: a quarter of MG2's KV (and chunk time): a minute, not seven
MG2_CHUNK_MS = 1200.0     # MG2's chunk on an RTX 4090 (the paper)

CPU_TOKENS = 256   # the reference (de)quantiser on a CPU takes seconds per full 2640-token chunk
MiB, GiB = 1 << 20, 1 << 30


@click.group(cls=WorldPagerGroup)
def bench() -> None:
    """Measure the pieces that decide whether a session stalls (each prints a table, then JSON)."""


# ---- shared output --------------------------------------------------------------------------------

# The vector extensions a figure depends on (torch's CPU kernels pick their widest), as /proc/cpuinfo's
# flags name them: x86 (AVX2, AVX-512 and its bf16/VNNI, AMX) and Arm (NEON = asimd, SVE).
VECTOR_FLAGS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX-512-BF16"),
                ("avx512_vnni", "AVX-512-VNNI"), ("amx_tile", "AMX"), ("amx_bf16", "AMX-BF16"),
                ("asimd", "NEON"), ("sve", "SVE"))


def _cpuinfo() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20).splitlines()   # one CPU's block is a few KiB; the first names them all
    except OSError:
        return []   # not Linux: what platform knows


def cpu_name(lines: list[str] | None = None) -> str:
    """The CPU model from /proc/cpuinfo where there is one (platform.processor() is often empty; Arm
    kernels give no model name, only an implementer and part number)."""
    for line in _cpuinfo() if lines is None else lines:
        if line.startswith(("model name", "Model", "Hardware")) and ":" in line:
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_vectors(lines: list[str] | None = None) -> list[str]:
    """The vector extensions of ``VECTOR_FLAGS`` the CPU has (its first ``flags``/``Features`` line)."""
    for line in _cpuinfo() if lines is None else lines:
        if line.startswith(("flags", "Features")) and ":" in line:
            have = set(line.split(":", 1)[1].split())
            return [name for flag, name in VECTOR_FLAGS if flag in have]
    return []


def machine(device: str | None = None) -> dict:
    """What made a figure: the CPU's model, cores and vector extensions, the device when one is named."""
    lines = _cpuinfo()
    info = {"cpus": os.cpu_count(), "cpu": cpu_name(lines), "vectors": cpu_vectors(lines)}
    if device is not None:
        info["device"] = device
    return info


def machine_line(info: dict) -> str:
    """``machine``'s figures for people: "AMD EPYC 7B13, 2 CPUs, AVX2 AVX-512 (device cpu)"."""
    vectors = " ".join(info.get("vectors") or []) or "no AVX2/AVX-512/AMX/NEON"
    device = f" (device {info['device']})" if info.get("device") else ""
    return f"machine: {info.get('cpu')}, {info.get('cpus')} CPUs, {vectors}{device}"


def device_label(device: str) -> str:
    import torch

    dev = torch.device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()


def echo_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Left-aligned first column, right-aligned others (cells arrive formatted)."""
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        first = r[0].ljust(widths[0])
        click.echo("  ".join([first] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip())


def num(value: float | None) -> str:
    """Three significant digits, no exponent for the sizes benchmarks produce."""
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def size(nbytes: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def echo_json(kind: str, result: dict, machine_info: dict, params: dict) -> None:
    """The last line: everything, compact, floats cut to six significant digits."""
    doc = {"bench": kind, **result, "machine": machine_info, "params": params}
    click.echo(machine_line(machine_info))
    emit_json(json_line(_round(doc)))


def _round(value):
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


# ---- bench quant ----------------------------------------------------------------------------------

def resolve_device(name: str) -> str:
    """``auto`` → cuda when present, else cpu; a device that is not here is the user's error."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name!r} (use auto, cpu, cuda or cuda:N)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: no CUDA device is available here")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {name!r} (use auto, cpu, cuda or cuda:N)")
    return str(dev)


@bench.command("quant")
@click.option("--preset", "name", default="mg2-universal", show_default=True,
              type=click.Choice(sorted(MODEL_CONFIGS)), help="Model configuration (the chunk's shape).")
@click.option("--bits", type=click.Choice(["2", "4", "8"]), default="4", show_default=True,
              help="Storage bits per KV value.")
@click.option("--tokens", type=click.IntRange(min=1),
              help=f"Tokens in the chunk. Default: the full chunk on CUDA, at most {CPU_TOKENS} on a CPU.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--backend", "backends", default="auto", show_default=True,
              help="Kernels: auto, reference, fused or triton, or a comma list timed side by side on one "
                   "chunk (triton on a CPU runs the Triton interpreter: slow, for parity only).")
@click.option("--threads", type=click.IntRange(min=1),
              help="torch intra-op threads on a CPU (1: as the store's worker threads run). Default: torch's.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed calls per operation (the median is reported).")
@json_result
def quant(name: str, bits: str, tokens: int | None, device: str, backends: str, threads: int | None,
          repeats: int) -> None:
    """Quantise / dequantise one chunk's KV against a plain copy of it."""
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        _quant(name, bits, tokens, device, backends, repeats)
    finally:
        torch.set_num_threads(before)   # a process that goes on (tests) keeps its own setting


def _quant(name: str, bits: str, tokens: int | None, device: str, backends: str, repeats: int) -> None:
    import torch

    from engine.bench.quant import bench_quant_backends

    cfg = model_config(name)
    dev = resolve_device(device)
    chosen = quant_backends(backends, dev)
    full = cfg.tokens_per_chunk
    reduced = tokens is None and dev == "cpu" and full > CPU_TOKENS
    n = tokens if tokens is not None else (min(full, CPU_TOKENS) if dev == "cpu" else full)
    why = " (reduced on a CPU; --tokens to change)" if reduced else ""
    click.echo(f"bench quant: {name}, int{bits}, {n} of {full} tokens per chunk{why}, "
               f"{cfg.dit.num_layers} layers, device {dev} ({device_label(dev)}), "
               f"{torch.get_num_threads()} intra-op threads, median of {repeats}")
    results = bench_quant_backends(cfg, chosen, bits=int(bits), tokens=n, device=dev, repeats=repeats)
    r = results[0]
    labels = [quant_label(x["backend"], dev) for x in results]
    click.echo(f"backend {', '.join(labels)}; {r['kv_dtype']} KV {size(r['kv_bytes'])} <-> "
               f"{r['format']} block {size(r['block_bytes'])}; GB/s count the KV bytes")
    tag = (lambda label: f" {label}") if len(results) > 1 else (lambda label: "")  # noqa: E731
    rows = [("copy", num(r["copy_s"] * 1e3), num(r["copy_gbps"]), ratio(1.0))]
    for op, key in (("quantise", "quant"), ("dequantise", "dequant")):
        rows += [(f"{op}{tag(label)}", num(x[f"{key}_s"] * 1e3), num(x[f"{key}_gbps"]),
                  ratio(x[f"{key}_vs_copy"])) for x, label in zip(results, labels)]
    echo_table(("op", "ms", "GB/s", "vs copy"), rows)
    side = {"backends": [{k: x[k] for k in QUANT_PER_BACKEND} for x in results]} if len(results) > 1 else {}
    echo_json("quant", {**r, **side}, machine(device_label(dev)),
              {"preset": name, "bits": int(bits), "tokens": n, "full_tokens": full, "device": dev,
               "backend": ",".join(chosen), "threads": torch.get_num_threads(), "repeats": repeats})


QUANT_PER_BACKEND = ("backend", "quant_s", "dequant_s", "quant_gbps", "dequant_gbps", "quant_vs_copy",
                     "dequant_vs_copy")


def quant_backends(spec: str, device: str) -> list[str]:
    """``--backend`` as a list of kernel names; Triton on a CPU is switched to its interpreter here,
    before anything imports it (the flag is read once, at import)."""
    from engine.kernels import ops

    names = [part.strip().lower() for part in spec.split(",")]
    for part in names:
        if part not in ops.BACKENDS:
            raise ConfigError(f"--backend {part!r} is not a kernel backend "
                              f"(choose from {', '.join(ops.BACKENDS)}, or a comma list)")
    if len(set(names)) < len(names):
        raise ConfigError(f"--backend {spec!r} names a backend twice")
    if device.startswith("cuda") and "fused" in names:
        raise ConfigError("--backend fused is the CPU quantiser; on a CUDA device use auto, triton or "
                          "reference")
    if device == "cpu" and "triton" in names:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return names


def quant_label(backend: str, device: str) -> str:
    return f"{backend} (interpreter)" if backend == "triton" and device == "cpu" else backend


# ---- bench disk -----------------------------------------------------------------------------------

def _mib(value: float | None, flag: str) -> int | None:
    if value is None:
        return None
    if value <= 0:
        raise ConfigError(f"{flag} must be positive, got {value}")
    return int(value * MiB)


@bench.command("disk")
@click.option("--spill", type=click.Path(path_type=Path), required=True,
              help="Existing directory on the drive to measure (a sub-directory is used and removed).")
@click.option("--total-gib", type=Size("GiB"), default=4.0, show_default=True,
              help="Bytes per pass (each round writes and reads them twice: raw, then the tier): 4G, 512M; a "
                   "plain number is GiB.")
@click.option("--block-mib", type=Size("MiB"),
              help="Block size (a plain number is MiB). Default: one mg2-universal int4 chunk slot (123.4 MiB), smaller when "
                   "the total holds fewer than 4.")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repeats of the four passes; figures are medians.")
@click.option("--raw", "raw_method", type=click.Choice(["auto", "dd", "python"]), default="auto",
              show_default=True, help="How the raw drive is measured (auto: dd when present).")
@click.option("--piece-mib", type=Size("MiB"), help="The tier's largest single I/O call (a plain number is MiB). Default: the tier's.")
@json_result
def disk(spill: Path, total_gib: float, block_mib: float | None, rounds: int, raw_method: str,
         piece_mib: float | None) -> None:
    """The disk tier's write and read throughput against the raw drive, in the same directory."""
    from engine.bench.disk import bench_disk, check_disk_bench

    if total_gib <= 0:
        raise ConfigError(f"--total-gib must be positive, got {total_gib}")
    total, block, piece = int(total_gib * GiB), _mib(block_mib, "--block-mib"), _mib(piece_mib, "--piece-mib")
    block_bytes, count = check_disk_bench(spill, total, block)   # errors before any output
    click.echo(f"bench disk: {count} blocks of {size(block_bytes)} under {spill}, {rounds} round(s) "
               "of raw write, raw read, tier write, tier read")
    r = bench_disk(spill, total, block, rounds=rounds, raw_method=raw_method, piece_bytes=piece)
    click.echo(f"drive {r['drive'] or 'unknown'}, {'O_DIRECT' if r['o_direct'] else 'buffered'}, "
               f"raw by {r['raw_method']}; {r['blocks']} blocks of {size(r['block_bytes'])} = "
               f"{size(r['total_bytes'])}, tier pieces of {size(r['piece_bytes'])}; medians of {r['rounds']}")
    echo_table(("pass", "s", "GB/s", "vs raw", "per round"), [
        ("raw write", num(r["raw_write_s"]), num(r["raw_write_gbps"]), "", ""),
        ("tier write", num(r["write_s"]), num(r["write_gbps"]), ratio(r["write_vs_raw"]),
         _rounds(r["write_vs_raw_rounds"])),
        ("raw read", num(r["raw_read_s"]), num(r["raw_read_gbps"]), "", ""),
        ("tier read", num(r["read_s"]), num(r["read_gbps"]), ratio(r["read_vs_raw"]),
         _rounds(r["read_vs_raw_rounds"])),
        ("crc32 in memory", "", num(r["crc_gbps"]), "", ""),
    ])
    for note in r["notes"]:
        click.echo(f"note: {note}")
    echo_json("disk", r, machine(),
              {"spill": str(spill), "total_gib": total_gib, "block_mib": block_mib, "rounds": rounds,
               "raw": raw_method, "piece_mib": piece_mib})


def _rounds(ratios: list[float]) -> str:
    return " ".join(ratio(x) for x in ratios)


# ---- store experiments (synthetic model) ----------------------------------------------------------

def _split(text: str, flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ConfigError(f"{flag} needs at least one value, got {text!r}")
    return items


def _bw(value: str) -> str | None:
    return None if value in ("unlimited", "none", "inf") else value


@bench.command("store")
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
    emulated = {b: (scaled.drive_bw(b) if scaled is not None else b) for b in _split(drive_bws, "--drive-bw")}
    if dry_run:
        _store_plan(modes, emulated, writebacks, chunks, pool_slots, kv_scale, chunk_ms, scaled)
        return
    grid = [(m, b, w) for m in _split(modes, "--modes") for b in _split(drive_bws, "--drive-bw")
            for w in _split(writebacks, "--writeback")]
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
            for m in _split(modes, "--modes") for b, e in emulated.items() for w in _split(writebacks, "--writeback")]
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


@bench.command("memory")
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


@bench.command("predict")
@click.option("--trajectories", default="yaw.yaml,b1_ws.yaml,revisit_loop.yaml", show_default=True,
              help="Trajectory files (paths, or names in trajectories/), comma-separated.")
@click.option("--chunks", type=click.IntRange(min=5), default=60, show_default=True)
@click.option("--k", "retrieve_k", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--lookahead", type=click.IntRange(min=1), default=1, show_default=True,
              help="Chunks ahead the prediction is made.")
@json_result
def predict(trajectories: str, chunks: int, retrieve_k: int, lookahead: int) -> None:
    """How often the set selected from the predicted pose equals the set from the real pose."""
    from engine.config import model_config as named_model
    from engine.io.trajectory import load_trajectory, packaged_trajectory
    from engine.retrieval.hit_rate import prediction_hit_rate
    from engine.retrieval.predict import ConstantVelocityPredictor, ReuseCurrentPredictor
    from engine.retrieval.select import ChunkGrid, FovOverlapPolicy

    model = named_model("mg2-universal")
    grid = ChunkGrid.of_video(model.video_grid())
    rows, results = [], []
    for name in _split(trajectories, "--trajectories"):
        path = Path(name) if Path(name).is_file() else packaged_trajectory(name)
        poses = load_trajectory(path, model.mode, model.video_frames_total(chunks)).poses
        rates = {}
        for label, predictor in (("constant-velocity", ConstantVelocityPredictor(lookahead=lookahead)),
                                 ("reuse-current", ReuseCurrentPredictor(lookahead=lookahead))):
            rates[label] = prediction_hit_rate(poses, chunks, predictor, FovOverlapPolicy(), retrieve_k,
                                               grid=grid)
        cv, rc = rates["constant-velocity"], rates["reuse-current"]
        rows.append((Path(path).name, ratio(cv["hit_rate"]), ratio(rc["hit_rate"]), str(cv["chunks_scored"]),
                     f"{cv['mean_true_size']:.2f}"))
        results.append({"trajectory": Path(path).name, "constant_velocity": cv["hit_rate"],
                        "reuse_current": rc["hit_rate"], "chunks_scored": cv["chunks_scored"],
                        "mean_set_size": cv["mean_true_size"]})
    click.echo(f"bench predict: retrieval-set hit rate of the predicted pose, k={retrieve_k}, "
               f"{chunks} chunks, lookahead {lookahead} (the paper: 0.66-0.94 vs 0.03-0.52)")
    echo_table(("trajectory", "const-velocity", "reuse-current", "chunks", "mean set"), rows)
    echo_json("predict", {"trajectories": results}, machine(),
              {"trajectories": trajectories, "chunks": chunks, "k": retrieve_k, "lookahead": lookahead})


# ---- bench device ---------------------------------------------------------------------------------

def _step_budgets(values: tuple[str, ...]) -> dict[str, float]:
    from engine.bench.device_check import STEPS

    out = {}
    for value in values:
        name, _, seconds = (part.strip() for part in value.partition("="))
        try:
            out[name] = float(seconds)
        except ValueError:
            raise ConfigError(f"--step-budget {value!r} (use STEP=SECONDS, e.g. dit_mg2=60)") from None
        if name not in STEPS:
            raise ConfigError(f"--step-budget {value!r}: no step {name!r} (choose from {', '.join(STEPS)})")
        if not 0 < out[name] < float("inf"):
            raise ConfigError(f"--step-budget {value!r}: seconds must be positive")
    return out


@bench.command("device")
@click.option("--dry-run", is_flag=True,
              help="The same steps on the CPU at tiny sizes (Triton under its interpreter): for CI, and to "
                   "know the check works before a GPU is lent.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("device_check"), show_default=True,
              help="Directory for device_check.json, device_check.md and device_check.log.")
@click.option("--steps", "steps_spec", help="Comma list of steps to run (default: all, in order).")
@click.option("--budget-s", type=float, help="Seconds for the whole check. Default: 450 (150 in a dry run).")
@click.option("--step-budget", "step_budget", multiple=True, metavar="STEP=SECONDS",
              help="Override one step's budget (repeatable).")
@click.option("--spill", type=click.Path(path_type=Path),
              help="Directory for the synthetic sessions' disk tier. Default: a temporary directory.")
@json_result
def device(dry_run: bool, out: Path, steps_spec: str | None, budget_s: float | None, step_budget: tuple[str, ...],
           spill: Path | None) -> None:
    """Everything that needs a GPU, in one run of a few minutes: one JSON document and a Markdown table."""
    import torch

    from engine.bench.device_check import run_device_check, step_names

    names = step_names(steps_spec)
    budgets = _step_budgets(step_budget)
    if budget_s is not None and not budget_s > 0:
        raise ConfigError(f"--budget-s must be positive, got {budget_s}")
    if not dry_run and not torch.cuda.is_available():
        raise ConfigError("bench device: no CUDA device here (use --dry-run to exercise the check on the CPU)")
    click.echo(f"bench device: {len(names)} steps{' (dry run on the CPU)' if dry_run else ''}, output in {out}",
               err=True)
    doc = run_device_check(out, dry_run=dry_run, names=names, budget_s=budget_s, step_budgets=budgets, spill=spill,
                           echo=lambda line: click.echo(f"  {line}", err=True))
    click.echo((out / "device_check.md").read_text(), nl=False)
    echo_json("device", doc, machine(doc["device"]),
              {"dry_run": dry_run, "steps": names, "budget_s": doc["budget_s"], "spill": str(spill) if spill else None})


# ---- bench quota (--spill-max on the arena model's revisits) ------------------------------------------

@bench.command("quota")
@click.option("--seeds", type=click.IntRange(min=1), default=2, show_default=True, help="Quality seeds (arenas).")
@click.option("--kinds", default="glance,spin,walk", show_default=True, help="Kinds of revisit episode.")
@click.option("--chunks", type=click.IntRange(min=20), default=200, show_default=True,
              help="Episode length: long, so that the memory outgrows the quota.")
@click.option("--observed", type=click.IntRange(min=1), default=4, show_default=True, help="Observed chunks first.")
@click.option("--shares", default="1,0.25,0.1,0.05", show_default=True,
              help="Quotas as shares of the unbounded session's disk, comma-separated.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Temporary session folders. Default: the system temp.")
@json_result
def quota(seeds: int, kinds: str, chunks: int, observed: int, shares: str, workdir: Path | None) -> None:
    """Disk, first-choice retrieval rate, revisit PSNR and stalls under --spill-max quotas (arena model)."""
    import dataclasses

    from engine.quality.quota import run_quota, summarise
    from engine.quality.revisit_paths import FULL

    fractions = tuple(float(s) for s in _split(shares, "--shares"))
    if any(not 0 < f <= 1 for f in fractions):
        raise ConfigError(f"--shares must be in (0, 1], got {shares!r}")
    shape = dataclasses.replace(FULL, chunks=chunks, observed_chunks=observed)
    kind_list = tuple(_split(kinds, "--kinds"))
    click.echo(f"bench quota: arena model, {seeds} seed(s) x {', '.join(kind_list)}, {chunks}-chunk episodes "
               f"({observed} observed), int4, k 3, pool 4 chunks, no save points", err=True)
    rows = run_quota(list(range(seeds)), kind_list, shape, fractions,
                     on_row=lambda r: click.echo(f"  row {json_line(_round(r))}", err=True),
                     workdir=workdir)
    lines = summarise(rows)
    echo_table(("quota", "episodes", "disk written", "disk peak", "1st choice", "PSNR obs", "PSNR gen", "stall ms"), [
        (l["arm"], f"{l['episodes']}" + (f" ({l['refused']} refused)" if l["refused"] else ""),
         size(l["disk_bytes_written"]) if l["episodes"] else "",
         size(l["disk_alloc_max"]) if l.get("disk_alloc_max") else "",
         f"{l['first_choice_rate'] * 100:.1f} %" if l["episodes"] else "",
         num(l.get("psnr_observed")), num(l.get("psnr_generated")), num(l.get("stall_ms"))) for l in lines])
    echo_json("quota", {"summary": lines, "rows": rows}, machine("cpu"),
              {"seeds": seeds, "kinds": kind_list, "chunks": chunks, "observed": observed, "shares": fractions})


# ---- bench speed ----------------------------------------------------------------------------------

@bench.command("speed")
@click.option("--model", default="arena", show_default=True, help="A registered model (generate's --model).")
@click.option("--chunks", type=click.IntRange(min=2), default=300, show_default=True,
              help="Chunks of each session (with --compare: of each arm in each round).")
@click.option("--warmup", type=click.IntRange(min=0), default=20, show_default=True,
              help="Chunks left out of the medians (start-up, first allocations).")
@click.option("--threads", type=click.IntRange(min=1),
              help="Intra-op threads on a CPU (generate's --threads). Default: as generate.")
@click.option("--decode-overlap/--no-decode-overlap", "overlap", default=None,
              help="Decode on a worker while the next chunk denoises. Default: as generate (on for a CPU).")
@click.option("--device", default=None, help="cpu or cuda. Default: as generate.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Where the temporary session goes. Default: the system temp.")
@click.option("--compare", type=click.Choice(["depth"]),
              help="depth: the arena session today against the same with the depth head and depth re-projection "
                   "(--arena-reproject-depth), interleaved in --rounds in this process; the ratio depth / today.")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --compare: rounds of one session per arm (today first, then depth first, ...).")
@json_result
def speed(model: str, chunks: int, warmup: int, threads: int | None, overlap: bool | None, device: str | None,
          workdir: Path | None, compare: str | None, rounds: int) -> None:
    """A session's chunk time step by step: medians after --warmup, chunks a second."""
    from engine.bench.speed import STEPS, bench_speed

    flags = {"model": model, "chunks": chunks, "threads": threads, "decode_overlap": overlap, "device": device}
    flags = {k: v for k, v in flags.items() if v is not None}
    if compare is None and click.get_current_context().get_parameter_source("rounds") is ParameterSource.COMMANDLINE:
        raise click.BadOptionUsage("rounds", "--rounds is for --compare (one session otherwise)")
    if compare is not None:
        if model != "arena":
            raise click.BadOptionUsage("compare", f"--compare {compare} is for the arena model (not --model {model})")
        _speed_compare(flags, warmup, rounds, workdir)
        return
    r = bench_speed(flags, warmup, workdir)
    m = r["medians_ms"]
    decode = "decode on a worker" if r["decode_overlap"] else "decode in the loop"
    click.echo(f"bench speed: {r['model']} on {r['device']}, {r['threads']} intra-op thread(s), {decode}; medians of "
               f"chunks {warmup}-{r['chunks'] - 1} ({r['measured']} chunks), status {r['status']}")
    echo_table(("step", "median ms"), [(name.removesuffix("_ms"), num(m[name])) for name in STEPS])
    rate = r["chunks_per_s"]
    click.echo(f"{'n/a' if rate is None else f'{rate:.1f}'} chunks/s (median chunk); mean chunk {num(r['wall_ms_mean'])} ms"
               + ("; decode runs beside the wall time, on the worker" if r["decode_overlap"] else ""))
    echo_json("speed", r, machine(r["device"]), {"chunks": chunks, "warmup": warmup, **flags})


def _speed_compare(flags: dict, warmup: int, rounds: int, workdir: Path | None) -> None:
    """``bench speed --compare depth``: one table, a column per arm, the ratio and the target's verdict."""
    from engine.bench.speed import ARMS, RATIOS, STEPS, bench_speed_compare

    r = bench_speed_compare(flags, warmup, rounds, workdir)
    arms, target = r["arms"], r["target"]
    decode = "decode on a worker" if r["decode_overlap"] else "decode in the loop"
    load = "n/a" if r["load_1min"] is None else f"{r['load_1min']['min']:.2f}-{r['load_1min']['max']:.2f}"
    click.echo(f"bench speed --compare depth: {r['model']} on {r['device']} ({device_label(r['device'])}), "
               f"{r['threads']} intra-op thread(s), {decode}; {rounds} round(s) of {flags['chunks']} chunks per arm, "
               f"interleaved (today first, then depth first, ...); medians of the chunks after {warmup} of each "
               f"session, pooled per arm; load (1 min) {load}; "
               f"status {r['status']}")
    click.echo(f"({r['depth_head']})")
    rows = []
    for name in STEPS:
        ratio = r["ratio"].get(name)
        verdict = "" if name not in RATIOS or ratio is None else ("pass" if ratio <= target else "fail")
        rows.append((name.removesuffix("_ms"), *(num(arms[a]["medians_ms"].get(name)) for a in ARMS),
                     "" if ratio is None else _times(ratio), verdict))
    echo_table(("step", *(f"{a} ms" for a in ARMS), "depth / today", f"<= {target:g}x"), rows)
    per_round = ", ".join(f"{name.removesuffix('_ms')} " + " ".join(_times(x[name]) for x in r["round_ratios"])
                          for name in RATIOS)
    click.echo("; ".join(f"{a}: {num(arms[a]['chunks_per_s'])} chunks/s ({arms[a]['measured']} chunks)" for a in ARMS)
               + f"; depth / today per round: {per_round}")
    echo_json("speed", r, machine(r["device"]), {"chunks": flags["chunks"], "warmup": warmup, "rounds": rounds,
                                                 "compare": "depth", **flags})


def _times(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"
