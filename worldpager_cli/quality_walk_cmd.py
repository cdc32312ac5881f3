"""``worldpager bench quality --walk``: the walking benchmark's run (click shell only; the work is in
``engine.quality.walk_run`` and ``walk_summary``). Prints, for ``--quick``, first the smoke-test line;
then one line per session as it is scored (stderr), the tables (``worldpager_cli.quality_walk``), then
one JSON line; writes ``walk-rows.jsonl`` (every session's sums), ``walk.png`` (the per-minute figure),
``walk-strip.png`` (truth and each arm, a frame in the middle of every minute, the first seed's first
kind) and keeps those sessions under ``sessions/``. ``--from-rows`` summarises earlier rows (read by
``engine.quality.rows_read``)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from engine.files.output_files import make_output_dir
from engine.quality.rows_read import read_rows, repeated_line
from worldpager_cli.quality_long_cmd import finish_benchmark
from worldpager_cli.quality_walk import WALK_SMOKE_LINE, echo_walk

ROWS = "walk-rows.jsonl"
FIGURE = "walk.png"
STRIP = "walk-strip.png"
QUICK_MINUTES = 0.3


def _strip(plan, rows: list[dict], out_dir: Path) -> dict:
    from engine.quality.long_strip import long_strip

    kind = plan.kinds[0]
    order = sorted(plan.arms, key=lambda a: a.name == "window")                 # window-only last
    folders = [out_dir / "sessions" / f"seed{plan.first_seed}-{kind}-{a.name}" for a in order]
    sessions = [(f / f"{a.name}.log.jsonl", f / f"{a.name}.mp4") for f, a in zip(folders, order)]
    names = [a.name if a.name != "window" else "window-only" for a in order]
    bins = min(len(r["bins"]) for r in rows)
    return {"strip": str(out_dir / STRIP), "kind": kind,
            **long_strip(sessions, bins, plan.bin_s, out_dir / STRIP, names=names)}


def _finish(rows: list[dict], out_dir: Path, params: dict, strip: dict | None = None) -> None:
    from engine.quality.walk_figure import walk_figure
    from engine.quality.walk_summary import summarise_walk

    finish_benchmark("quality-walk", summarise_walk(rows), out_dir, FIGURE, walk_figure, WALK_SMOKE_LINE,
                     echo_walk, params, strip)


def _progress(row: dict) -> str:
    def mean(cls):
        n = sum(b["classes"][cls]["frames"] for b in row["bins"])
        return f"{sum(b['classes'][cls]['psnr'] for b in row['bins']) / n:.2f} dB ({n})" if n else "none"

    return (f"walk {row['arm']:<11} seed {row['seed']} {row['kind']:<6} ({row['chunks']} chunks): new places "
            f"{mean('new_place')}, revisits {mean('revisit')}, every generated frame {mean('all')}; "
            f"{row['misses']} misses")


def run_walk(seeds: int, seed_start: int, kinds: tuple[str, ...] | None, arm_names: str, minutes: float, out_dir: Path,
             weights: Path | None, threads: int, from_rows: tuple[Path, ...], quick: bool, look_around: bool) -> None:
    import torch

    from engine.quality.walk_paths import WALK_KINDS, WalkShape
    from engine.quality.walk_run import WalkPlan, walk_arms, walk_rows

    if from_rows:
        rows, repeated = read_rows(from_rows, long=False, walk=True)
        if repeated:
            click.echo(repeated_line(repeated))
        _finish(rows, out_dir, {"from_rows": [str(p) for p in from_rows]})
        return
    kinds = tuple(kinds or WALK_KINDS)
    arms = walk_arms([a.strip() for a in arm_names.split(",") if a.strip()])
    shape = WalkShape(QUICK_MINUTES if quick else minutes, look_around).check()
    plan = WalkPlan(seeds=1 if quick else seeds, first_seed=seed_start, kinds=kinds, shape=shape, arms=arms,
                    bin_s=6.0 if quick else 60.0, smoke_test=quick, weights=weights)
    make_output_dir(out_dir, "--out-dir", (ROWS, FIGURE, STRIP))   # before the runs: no FIFO or device
    if quick:
        click.echo(WALK_SMOKE_LINE)
    torch.set_num_threads(threads)
    with open(out_dir / ROWS, "w", encoding="utf-8") as rows_file:
        def on_row(row):
            rows_file.write(json.dumps(row) + "\n")
            rows_file.flush()
            click.echo(_progress(row), err=True)

        rows = walk_rows(plan, out_dir, on_row)
    strip = _strip(plan, rows, out_dir)
    params = {"walk": True, "seeds": plan.seeds, "seed_start": plan.first_seed, "kinds": list(kinds),
              "minutes": shape.minutes, "look_around": look_around, "chunks": shape.chunks,
              "observed_chunks": shape.observed_chunks, "bin_s": plan.bin_s, "arms": [a.name for a in arms],
              "threads": threads, "quick": quick, "weights": str(weights) if weights else None}
    _finish(rows, out_dir, params, strip)
