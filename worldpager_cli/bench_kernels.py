"""``worldpager bench quant`` and ``bench disk``: the store's two data paths on their own — the int4
(de)quantiser against a plain copy, and the O_DIRECT disk tier against the raw drive.
"""
from __future__ import annotations

import os
from pathlib import Path

import click

from worldpager_cli.bench_output import GiB, MiB, echo_json, echo_table, num, ratio, size
from worldpager_cli.json_output import json_result
from worldpager_cli.options import Size

from engine.bench.machine import device_label, machine, resolve_device
from engine.config import MODEL_CONFIGS, model_config
from engine.errors import ConfigError

CPU_TOKENS = 256   # the reference (de)quantiser on a CPU takes seconds per full 2640-token chunk


@click.command("quant")
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


def _mib(value: float | None, flag: str) -> int | None:
    if value is None:
        return None
    if value <= 0:
        raise ConfigError(f"{flag} must be positive, got {value}")
    return int(value * MiB)


@click.command("disk")
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
