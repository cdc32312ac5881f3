"""``worldpager bench quality``: does memory keep the world consistent? (click shell only; the work is
in ``engine.quality``). Prints one line per session as it finishes (stderr), the tables, then one
JSON line; writes the figure, side-by-side MP4s and a still, and every session's scores (JSON Lines)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import click

from engine.errors import ConfigError
from worldpager_cli.bench import echo_json, echo_table, machine

EXPERIMENTS = ("revisit", "positions", "drift")


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{name} {text!r}: give whole numbers separated by commas") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{name} {text!r}: each must be at least 1")
    return values


def _f(value: float, digits: int = 2) -> str:
    return "" if value != value else f"{value:.{digits}f}"


@click.command("quality")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True, help="Held-out arenas per gap.")
@click.option("--seed-start", type=click.IntRange(min=0), default=0, show_default=True,
              help="First held-out seed (to split a run over processes; read them together with --from-rows).")
@click.option("--gaps", default="10,50,200", show_default=True, help="Chunks away from the place before returning.")
@click.option("--arms", "arm_names", default="", help="Revisit arms (comma-separated). Default: all.")
@click.option("--long-gaps", default="200", show_default=True,
              help="Gaps that run only window, bf16 and int4 (their sessions are the longest).")
@click.option("--position-seeds", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--prefix-chunks", type=click.IntRange(min=1), default=100, show_default=True,
              help="Still chunks before the leave-and-return path, to run it past the horizon (chunk 80).")
@click.option("--drift-chunks", type=click.IntRange(min=0), default=3000, show_default=True,
              help="Length of the long sessions (int4 and bf16); 0 = no drift experiment.")
@click.option("--block", type=click.IntRange(min=1), default=100, show_default=True, help="Chunks per drift block.")
@click.option("--only", default="revisit,positions,drift", show_default=True, help="Experiments to run.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=Path("quality"), show_default=True,
              help="Where the figure, videos, still and per-session scores go.")
@click.option("--weights", type=click.Path(path_type=Path), help="Arena weights. Default: the packaged ones.")
@click.option("--workdir", type=click.Path(path_type=Path), help="Temporary session folders. Default: the system temp.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Intra-op threads of the model (on a shared CPU, a team of two waits at every barrier for a preempted thread).")
@click.option("--from-rows", "from_rows", multiple=True, type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Run nothing: summarise these quality-rows.jsonl files (of earlier runs) into the tables and figure.")
@click.option("--quick", is_flag=True, help="Every arm on one short episode; positions past a horizon moved to chunk 4.")
def bench_quality(seeds, seed_start, gaps, arm_names, long_gaps, position_seeds, prefix_chunks, drift_chunks, block, only,
                  out_dir, weights, workdir, threads, from_rows, quick) -> None:
    """Revisit consistency, retention, positions past the horizon and drift, against the rendered truth."""
    import torch

    from engine.quality.arms import arms_named
    from engine.quality.quick import quick_plan
    from engine.quality.report import run_plan
    from engine.quality.run import Plan

    wanted = tuple(e for e in only.split(",") if e)
    if not wanted or any(e not in EXPERIMENTS for e in wanted):
        raise ConfigError(f"--only {only!r}: choose from {', '.join(EXPERIMENTS)}")
    arms = arms_named([a for a in arm_names.split(",") if a])
    if from_rows:
        _from_rows(from_rows, out_dir)
        return
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(prefix="worldpager-quality-", dir=workdir) as tmp:
        if quick:
            plan = quick_plan(Path(tmp), weights)
        else:
            plan = Plan(seeds=seeds, first_seed=seed_start, gaps=_ints(gaps, "--gaps"), arms=arms,
                        long_gaps=_ints(long_gaps, "--long-gaps") if long_gaps else (),
                        position_seeds=position_seeds, prefix_chunks=prefix_chunks, drift_chunks=drift_chunks,
                        block=block, weights=weights, workdir=Path(tmp))
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / "quality-rows.jsonl", "w", encoding="utf-8") as rows_file:
            def on_row(row):
                rows_file.write(json.dumps(row) + "\n")
                rows_file.flush()
                click.echo(_progress(row), err=True)

            summary = run_plan(plan, wanted, out_dir, on_row)
    _tables(summary)
    params = {"seeds": plan.seeds, "seed_start": plan.first_seed, "gaps": list(plan.gaps), "long_gaps": list(plan.long_gaps),
              "arms": [a.name for a in plan.arms], "position_seeds": plan.position_seeds,
              "prefix_chunks": plan.prefix_chunks, "position_gap": plan.position_gap,
              "drift_chunks": plan.drift_chunks, "block": plan.block, "threads": threads, "quick": quick,
              "only": list(wanted)}
    echo_json("quality", summary, machine("cpu"), params)


def _from_rows(paths: tuple[Path, ...], out_dir: Path) -> None:
    from engine.quality.report import summary_from_rows

    rows = []
    for path in paths:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise ConfigError(f"--from-rows {path}: line {n} is not JSON") from None
    summary = summary_from_rows(rows, out_dir)
    _tables(summary)
    echo_json("quality", summary, machine("cpu"), {"from_rows": [str(p) for p in paths], "rows": len(rows)})


def _progress(row: dict) -> str:
    if row["experiment"] == "drift":
        return (f"drift {row['arm']} block from chunk {row['block_start']}: PSNR {row['psnr_truth']:.2f}, "
                f"SSIM {row['ssim_truth']:.3f}")
    return (f"{row['experiment']} {row['arm']:<10} seed {row['seed']} gap {row['gap']} ({row['chunks']} chunks): "
            f"returning PSNR {row['psnr_truth']:.2f} vs truth, {row['psnr_first']:.2f} vs first visit")


def _tables(summary: dict) -> None:
    rv = summary.get("revisit")
    if rv:
        table = rv["table"]
        gaps = sorted({g for arm in table.values() for g in arm}, key=int)
        click.echo("Returning frames (PSNR dB / SSIM against the truth; PSNR against the first visit)")
        echo_table(("arm", *[f"gap {g}" for g in gaps], *[f"vs first {g}" for g in gaps], "retention % [95% CI]"),
                   [(arm, *[f"{_f(t[g]['psnr_truth'])} / {_f(t[g]['ssim_truth'], 3)}" if g in t else "" for g in gaps],
                     *[_f(t[g]["psnr_first"]) if g in t else "" for g in gaps], _retention(rv["retention"].get(arm)))
                    for arm, t in table.items()])
        s = rv["stale_fallback_cost_db"]
        x = rv["prefetch_minus_sync_db"]
        click.echo(f"stale-set fallback (prefetch - on-demand, int4): {_f(s['mean'], 3)} dB "
                   f"[{_f(s['ci'][0], 3)}, {_f(s['ci'][1], 3)}] over {s['pairs']} episodes; "
                   f"{rv['stale_slots']} stale slots, {rv['misses']} misses, {rv['hits']} hits")
        click.echo(f"prefetch - sync (the exact set only, slots emptied every chunk): {_f(x['mean'], 3)} dB "
                   f"[{_f(x['ci'][0], 3)}, {_f(x['ci'][1], 3)}]")
        d = rv["int2_minus_bf16_db"]
        click.echo(f"int2 - bf16: {_f(d['mean'], 3)} dB [{_f(d['ci'][0], 3)}, {_f(d['ci'][1], 3)}]")
    pos = summary.get("positions")
    if pos:
        click.echo(f"Positions (returning at chunk {pos.get('return_chunk_past')}; below = the same path from chunk 0)")
        echo_table(("arm", "PSNR vs truth", "SSIM", "PSNR vs first", "vs below dB [95% CI]"),
                   [(arm, _f(p["psnr_truth"]), _f(p["ssim_truth"], 3), _f(p["psnr_first"]),
                     _diff(p.get("vs_below_db"))) for arm, p in pos.items() if isinstance(p, dict)])
    drift = summary.get("drift")
    if drift:
        click.echo("Long session: PSNR / SSIM against the truth per block")
        arms = list(drift)
        starts = drift[arms[0]]["block_start"]
        echo_table(("block", *arms), [(str(s), *[f"{_f(drift[a]['psnr'][i])} / {_f(drift[a]['ssim'][i], 3)}"
                                                   for a in arms]) for i, s in enumerate(starts)])


def _retention(r: dict | None) -> str:
    if not r:
        return ""
    p = r["psnr_truth"]
    return f"{p['retention_pct']:.0f} [{p['ci_pct'][0]:.0f}, {p['ci_pct'][1]:.0f}]"


def _diff(d: dict | None) -> str:
    return "" if not d else f"{d['mean']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]"
