"""``worldpager bench predict``, ``bench device`` and ``bench quota``: the predictor's hit rate, the GPU
check in one run, and the spill quota's cost on the arena model's revisits.
"""
from __future__ import annotations

from pathlib import Path

import click

from worldpager_cli.bench_output import echo_json, echo_table, num, ratio, round_figures, size
from worldpager_cli.bench_store import split_list
from worldpager_cli.json_output import json_line, json_result

from engine.bench.machine import machine
from engine.errors import ConfigError


@click.command("predict")
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
    for name in split_list(trajectories, "--trajectories"):
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


def _step_budgets(values: tuple[str, ...]) -> dict[str, float]:
    from engine.bench.device_step_names import STEP_NAMES as STEPS

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


@click.command("device")
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
    from engine.bench.device_step_names import step_names

    names = step_names(steps_spec)   # the options are checked before torch is imported
    budgets = _step_budgets(step_budget)
    if budget_s is not None and not budget_s > 0:
        raise ConfigError(f"--budget-s must be positive, got {budget_s}")
    import torch

    from engine.bench.device_check import run_device_check

    if not dry_run and not torch.cuda.is_available():
        raise ConfigError("bench device: no CUDA device here (use --dry-run to exercise the check on the CPU)")
    click.echo(f"bench device: {len(names)} steps{' (dry run on the CPU)' if dry_run else ''}, output in {out}",
               err=True)
    doc = run_device_check(out, dry_run=dry_run, names=names, budget_s=budget_s, step_budgets=budgets, spill=spill,
                           echo=lambda line: click.echo(f"  {line}", err=True))
    click.echo((out / "device_check.md").read_text(), nl=False)
    echo_json("device", doc, machine(doc["device"]),
              {"dry_run": dry_run, "steps": names, "budget_s": doc["budget_s"], "spill": str(spill) if spill else None})


@click.command("quota")
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

    fractions = tuple(float(s) for s in split_list(shares, "--shares"))
    if any(not 0 < f <= 1 for f in fractions):
        raise ConfigError(f"--shares must be in (0, 1], got {shares!r}")
    shape = dataclasses.replace(FULL, chunks=chunks, observed_chunks=observed)
    kind_list = tuple(split_list(kinds, "--kinds"))
    click.echo(f"bench quota: arena model, {seeds} seed(s) x {', '.join(kind_list)}, {chunks}-chunk episodes "
               f"({observed} observed), int4, k 3, pool 4 chunks, no save points", err=True)
    rows = run_quota(list(range(seeds)), kind_list, shape, fractions,
                     on_row=lambda r: click.echo(f"  row {json_line(round_figures(r))}", err=True),
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
