"""``worldpager bench quality``: does memory keep the world consistent? (click shell only; the work is
in ``engine.quality``, the tables' layout in ``worldpager_cli.quality_tables``). Prints, for
``--quick``, first the smoke-test line; then one line per session as it finishes (stderr), the tables,
then one JSON line; writes the figure, side-by-side MP4s and a still, and every session's scores (JSON
Lines). Its flags are checked before anything runs (``worldpager_cli.quality_flags``: ranges, names, the
flags of the other benchmark: usage errors); ``--from-rows`` files are read by ``engine.quality.rows_read``."""
from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import click

from engine.files.output_files import make_output_dir
from worldpager_cli.bench_output import echo_json
from engine.bench.machine import machine
from worldpager_cli.json_output import json_result
from engine.quality.rows_read import read_rows, repeated_line
from worldpager_cli.quality_flags import (MAX_CHUNKS, MAX_MINUTES, MAX_SEED, MAX_SEEDS, MAX_THREADS, BoundedNumber,
                                          check_flags, given)
from worldpager_cli.quality_tables import SMOKE_LINE, echo_tables


def _count(low: int, high: int, unit: str = "") -> BoundedNumber:
    return BoundedNumber(True, low, high, unit=unit)


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _shape(chunks: int, observed: int):
    from engine.quality.revisit_paths import FULL
    from engine.quality.revisits import MIN_GAP_CHUNKS

    if chunks <= MIN_GAP_CHUNKS:
        raise click.BadParameter(f"{chunks}: an episode needs more than {MIN_GAP_CHUNKS} chunks for a frame to "
                                 f"come back {MIN_GAP_CHUNKS} chunks later", param_hint="'--chunks'")
    if not observed < chunks:
        raise click.BadParameter(f"{observed}: give 1 to {chunks - 1} observed chunks of a {chunks}-chunk "
                                 "episode", param_hint="'--observed'")
    return dataclasses.replace(FULL, chunks=chunks, observed_chunks=observed)


@click.command("quality")
@click.option("--seeds", type=_count(1, MAX_SEEDS, "seeds"), default=8, show_default=True,
              help="Held-out arenas; each runs one episode of every kind.")
@click.option("--seed-start", type=_count(0, MAX_SEED), default=0, show_default=True,
              help="First held-out seed (to split a run over processes; read them together with --from-rows).")
@click.option("--kinds", default="glance,spin,walk", show_default=True,
              help="Kinds of revisit episode (with --walk: kinds of walk, default all of onward, loops, near, home).")
@click.option("--chunks", "episode_chunks", type=_count(1, MAX_CHUNKS, "chunks"), default=40, show_default=True,
              help="Chunks of each revisit episode.")
@click.option("--observed", type=_count(1, MAX_CHUNKS, "chunks"), default=4, show_default=True,
              help="Chunks of each episode's observed tour (given to the session as --observe).")
@click.option("--arms", "arm_names", default="",
              help="Revisit arms (comma-separated; window and bf16 always). Default: all.")
@click.option("--position-seeds", type=_count(0, MAX_SEEDS, "seeds"), default=3, show_default=True)
@click.option("--prefix-chunks", type=_count(1, MAX_CHUNKS, "chunks"), default=100, show_default=True,
              help="Still chunks before the leave-and-return path, to run it past the horizon (chunk 80).")
@click.option("--drift-chunks", type=_count(0, MAX_CHUNKS, "chunks"), default=3000, show_default=True,
              help="Length of the long sessions (int4 and bf16); 0 = no drift experiment.")
@click.option("--block", type=_count(1, MAX_CHUNKS, "chunks"), default=100, show_default=True,
              help="Chunks per drift block.")
@click.option("--only", default="revisit,positions,drift", show_default=True, help="Experiments to run.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=Path("quality"), show_default=True,
              help="Where the figure, videos, still and per-session scores go.")
@click.option("--weights", type=click.Path(path_type=Path), help="Arena weights. Default: the packaged ones.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Temporary session folders. Default: the system temp.")
@click.option("--threads", type=_count(1, MAX_THREADS, "threads"), default=1, show_default=True,
              help="Intra-op threads of the model (on a shared CPU, a team of two waits at every barrier for a preempted thread).")
@click.option("--from-rows", "from_rows", multiple=True, type=click.Path(path_type=Path),
              help="Run nothing: summarise these rows files of earlier runs (quality-rows.jsonl; with --long "
                   "long-rows.jsonl, with --walk walk-rows.jsonl) into the tables and figure; once for each file.")
@click.option("--quick", is_flag=True,
              help="A smoke test: one short episode of each kind, window, bf16 and int4 (or --arms); "
                   "positions past a horizon moved to chunk 4. With --long: one 22-second session per arm.")
@click.option("--long", "long_mode", is_flag=True,
              help="Sessions as long as the product's: one path of --minutes per held-out arena (--seeds), "
                   "window-only and int4 memory (--arms may add extend, rerotate6/30/96), scored per minute "
                   "on the decoded MP4 against the rendered truth.")
@click.option("--minutes", type=BoundedNumber(False, 0, MAX_MINUTES, low_open=True, unit="minutes"), default=5.0,
              show_default=True, help=f"With --long or --walk: minutes of video a session (at most {MAX_MINUTES}).")
@click.option("--walk", "walk_mode", is_flag=True,
              help="Walking: per held-out arena (--seeds) one walk of --minutes of each kind (--kinds: onward, "
                   "loops, near, home), window-only, int4 memory and int4 without re-projection (--arms may add "
                   "the long benchmark's), scored per class of frame (new places at least 0.5 units from every "
                   "earlier camera, revisits, ...) on the exact latent frames against the rendered truth.")
@click.option("--no-look-around", "no_look_around", is_flag=True,
              help="With --walk: start walking at once (no observed turn on the spot first; chunk 0 is given).")
@click.option("--no-baselines", "no_baselines", is_flag=True,
              help="With --long: run only the --arms named, not window and int4 (merge their rows with "
                   "another run's by --from-rows).")
@json_result
@click.pass_context
def bench_quality(ctx, seeds, seed_start, kinds, episode_chunks, observed, arm_names, position_seeds, prefix_chunks,
                  drift_chunks, block, only, out_dir, weights, workdir, threads, from_rows, quick, long_mode,
                  minutes, walk_mode, no_look_around, no_baselines) -> None:
    """Revisits to observed and to generated views, retention, positions past the horizon and drift,
    against the rendered truth; --long: per minute of sessions minutes long; --walk: walking, per class
    of frame."""
    check_flags(ctx, long_mode, only, kinds, arm_names, no_baselines, walk_mode)
    if weights is not None and not from_rows:
        from engine.arena.weights import config_of

        config_of(weights)   # a weights file, readable, with an arena config: else one line before any run
    if walk_mode:
        from worldpager_cli.quality_walk_cmd import run_walk

        walk_kinds = _names(kinds) if given(ctx, "kinds") else None
        run_walk(seeds, seed_start, walk_kinds, arm_names, minutes, out_dir, weights, threads, from_rows, quick,
                 look_around=not no_look_around)
        return
    if long_mode:
        from worldpager_cli.quality_long_cmd import run_long

        run_long(seeds, seed_start, arm_names, minutes, out_dir, weights, threads, from_rows, quick,
                 baselines=not no_baselines)
        return
    shape = _shape(episode_chunks, observed)
    if from_rows:
        _from_rows(from_rows, out_dir)
        return

    import torch

    from engine.quality.arms import arms_named
    from engine.quality.quick import quick_plan
    from engine.quality.report import run_plan
    from engine.quality.run import Plan

    wanted, names, kinds = _names(only), list(_names(arm_names)), _names(kinds)
    arms = arms_named(names)
    make_output_dir(out_dir, "--out-dir", ("quality-rows.jsonl", "quality.png"))   # before the runs
    if quick:
        click.echo(SMOKE_LINE)
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="worldpager-quality-", dir=workdir) as tmp:
        if quick:
            plan = quick_plan(Path(tmp), weights, *([arms] if names else []))
        else:
            plan = Plan(seeds=seeds, first_seed=seed_start, kinds=kinds, shape=shape, arms=arms,
                        position_seeds=position_seeds, prefix_chunks=prefix_chunks, drift_chunks=drift_chunks,
                        block=block, weights=weights, workdir=Path(tmp))
        with open(out_dir / "quality-rows.jsonl", "w", encoding="utf-8") as rows_file:
            def on_row(row):
                row.setdefault("smoke_test", plan.smoke_test)
                rows_file.write(json.dumps(row) + "\n")
                rows_file.flush()
                click.echo(_progress(row), err=True)

            summary = run_plan(plan, wanted, out_dir, on_row)
    echo_tables(summary)
    params = {"seeds": plan.seeds, "seed_start": plan.first_seed, "kinds": list(plan.kinds),
              "chunks": plan.shape.chunks, "observed_chunks": plan.shape.observed_chunks,
              "arms": [a.name for a in plan.arms], "position_seeds": plan.position_seeds,
              "prefix_chunks": plan.prefix_chunks, "position_gap": plan.position_gap,
              "drift_chunks": plan.drift_chunks, "block": plan.block, "threads": threads, "quick": quick,
              "only": list(wanted)}
    echo_json("quality", summary, machine("cpu"), params)


def _from_rows(paths: tuple[Path, ...], out_dir: Path) -> None:
    from engine.quality.report import summary_from_rows

    rows, repeated = read_rows(paths, long=False)
    make_output_dir(out_dir, "--out-dir", ("quality.png",))
    summary = summary_from_rows(rows, out_dir)
    if summary.get("smoke_test"):
        click.echo(SMOKE_LINE)
    if repeated:
        click.echo(repeated_line(repeated))
    echo_tables(summary)
    echo_json("quality", summary, machine("cpu"), {"from_rows": [str(p) for p in paths], "rows": len(rows)})


def _progress(row: dict) -> str:
    if row["experiment"] == "drift":
        return (f"drift {row['arm']} block from chunk {row['block_start']}: PSNR {row['psnr_truth']:.2f}, "
                f"SSIM {row['ssim_truth']:.3f}")
    if row["experiment"] == "revisit":
        c = row["classes"]

        def mean(cls):
            n = c[cls]["frames"]
            return f"{c[cls]['psnr'] / n:.2f} dB ({n} frames)" if n else "none"

        return (f"revisit {row['arm']:<10} seed {row['seed']} {row['kind']:<6} ({row['chunks']} chunks, "
                f"{row['observed_chunks']} observed): observed returns {mean('observed')}, generated returns "
                f"{mean('generated')}, all generated frames {mean('all')}")
    return (f"{row['experiment']} {row['arm']:<10} seed {row['seed']} gap {row['gap']} ({row['chunks']} chunks): "
            f"returning PSNR {row['psnr_truth']:.2f} vs truth, {row['psnr_first']:.2f} vs first visit")
