"""``worldpager bench quality --long``: the long benchmark's run (click shell only; the work is in
``engine.quality.long_run`` and ``long_summary``). Prints, for ``--quick``, first the smoke-test line;
then one line per session as it is scored (stderr), the tables (``worldpager_cli.quality_long``), then
one JSON line; writes ``long-rows.jsonl`` (every session's sums), ``long.png`` (the per-minute figure),
``long-strip.png`` (truth and each arm, a frame in the middle of every minute, the first seed) and keeps
the first seed's sessions under ``sessions/``. ``--from-rows`` summarises earlier rows."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from engine.files.output_files import make_output_dir
from engine.quality.rows_read import read_rows, repeated_line
from worldpager_cli.bench_output import echo_json
from engine.bench.machine import machine
from worldpager_cli.quality_long import LONG_SMOKE_LINE, echo_long

ROWS = "long-rows.jsonl"
FIGURE = "long.png"
STRIP = "long-strip.png"


def _rows(paths: tuple[Path, ...]) -> list[dict]:
    rows, repeated = read_rows(paths, long=True)
    if repeated:
        click.echo(repeated_line(repeated))
    return rows


def _strip(plan, rows: list[dict], out_dir: Path) -> dict:
    from engine.quality.long_strip import long_strip

    kept = [out_dir / "sessions" / f"seed{plan.first_seed}-{a.name}" for a in plan.arms]
    order = sorted(kept, key=lambda p: p.name.endswith("-window"))          # window-only last
    sessions = [(p / f"{p.name.split('-', 1)[1]}.log.jsonl", p / f"{p.name.split('-', 1)[1]}.mp4") for p in order]
    names = [p.name.split("-", 1)[1] for p in order]
    names = [n if n != "window" else "window-only" for n in names]
    bins = min(len(r["bins"]) for r in rows)
    return {"strip": str(out_dir / STRIP),
            **long_strip(sessions, bins, plan.bin_s, out_dir / STRIP, names=names)}


def finish_benchmark(kind: str, summary: dict, out_dir: Path, figure_name: str, draw, smoke_line: str, echo,
                     params: dict, strip: dict | None = None) -> None:
    """The end of a per-minute benchmark (``--long``, ``--walk``): its figure drawn into ``out_dir`` by
    ``draw(summary, path)``, the still, the smoke-size line for summarised rows, its tables (``echo``)
    and the last JSON line (``kind``)."""
    make_output_dir(out_dir, "--out-dir", (figure_name,))
    summary["figure"] = str(draw(summary, out_dir / figure_name))
    if strip:
        summary["still"] = strip
    if summary["smoke_test"] and "from_rows" in params:
        click.echo(smoke_line)
    echo(summary)
    echo_json(kind, summary, machine("cpu"), params)


def _finish(rows: list[dict], out_dir: Path, params: dict, strip: dict | None = None) -> None:
    from engine.quality.long_figure import long_figure
    from engine.quality.long_summary import summarise_long

    finish_benchmark("quality-long", summarise_long(rows), out_dir, FIGURE, long_figure, LONG_SMOKE_LINE,
                     echo_long, params, strip)


def _progress(row: dict) -> str:
    bins = row["bins"]

    def mean(b, key="psnr"):
        return b[key] / b["frames"] if b["frames"] else float("nan")

    sharp = [b["detail"] / b["detail_truth"] if b["detail_truth"] else float("nan") for b in bins]
    return (f"long {row['arm']:<10} seed {row['seed']} ({row['chunks']} chunks): PSNR per bin "
            f"{' '.join(f'{mean(b):.2f}' for b in bins)}; sharpness {' '.join(f'{x:.3f}' for x in sharp)}")


def run_long(seeds: int, seed_start: int, arm_names: str, minutes: float, out_dir: Path, weights: Path | None,
             threads: int, from_rows: tuple[Path, ...], quick: bool, baselines: bool = True) -> None:
    import torch

    from engine.quality.long_paths import LONG, LONG_SMOKE
    from engine.quality.long_run import LongPlan, long_arms, long_rows

    if from_rows:
        _finish(_rows(from_rows), out_dir, {"from_rows": [str(p) for p in from_rows]})
        return
    arms = long_arms([a.strip() for a in arm_names.split(",") if a.strip()], baselines)
    shape = LONG_SMOKE if quick else dataclasses.replace(LONG, minutes=minutes).check()
    plan = LongPlan(seeds=1 if quick else seeds, first_seed=seed_start, shape=shape, arms=arms,
                    bin_s=5.0 if quick else 60.0, smoke_test=quick, weights=weights)
    make_output_dir(out_dir, "--out-dir", (ROWS, FIGURE, STRIP))   # before the runs: no FIFO or device
    if quick:
        click.echo(LONG_SMOKE_LINE)
    torch.set_num_threads(threads)
    with open(out_dir / ROWS, "w", encoding="utf-8") as rows_file:
        def on_row(row):
            rows_file.write(json.dumps(row) + "\n")
            rows_file.flush()
            click.echo(_progress(row), err=True)

        rows = long_rows(plan, out_dir, on_row)
    strip = _strip(plan, rows, out_dir)
    params = {"long": True, "seeds": plan.seeds, "seed_start": plan.first_seed, "minutes": shape.minutes,
              "chunks": shape.chunks, "observed_chunks": shape.observed_chunks, "bin_s": plan.bin_s,
              "arms": [a.name for a in arms], "threads": threads, "quick": quick,
              "weights": str(weights) if weights else None}
    _finish(rows, out_dir, params, strip)
