"""``worldpager bench speed``: a session's chunk time step by step, and ``--compare depth`` side by side."""
from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from worldpager_cli.bench_output import echo_json, echo_table, num
from worldpager_cli.json_output import json_result

from engine.bench.machine import device_label, machine


@click.command("speed")
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
