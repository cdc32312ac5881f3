"""The tables ``worldpager bench quality`` prints (click output only; the numbers are the summary's).

Owns their layout: the smoke-test line, the revisit table (one row per class of frame and arm: frames,
PSNR pooled over frames, the per-episode mean beside it, SSIM, self-consistency, memory's gain over
window-only with the share of episodes it wins, retention), the start-pose share, the paired
differences, what the figures do not cover, then the positions and drift tables. An interval is printed
only from 8 episodes on; below, ``n/a (N episodes)``.
"""
from __future__ import annotations

import click

from worldpager_cli.bench_output import echo_table


def shown(ci, episodes: int, digits: int = 2, sign: str = "") -> str:
    """``engine.quality.retention.shown``, imported when a table is drawn (it needs numpy, and the
    command line's start imports neither numpy nor torch)."""
    from engine.quality.retention import shown as interval

    return interval(ci, episodes, digits, sign)

SMOKE_LINE = ("smoke test (--quick): one short episode of each kind in one held-out arena; it checks that "
              "the benchmark runs end to end. Its figures come from a handful of frames: not the benchmark's.")
ROWS = (("observed", "observed returns"), ("start", "  at the start pose"), ("observed_away", "  elsewhere"),
        ("generated", "generated returns"), ("all", "all generated frames"))
NOT_COVERED = ("Not covered: the decoded video (latent frames are scored), models other than the arena model, "
               "paths with pitch or clamped at walls, sessions longer than the episodes (see the long-session "
               "drift), arenas beyond these held-out seeds.")


def _f(value: float | None, digits: int = 2, sign: str = "") -> str:
    return "" if value is None or value != value else f"{value:{sign}.{digits}f}"


def echo_tables(summary: dict) -> None:
    if summary.get("revisit"):
        echo_revisit(summary["revisit"])
    if summary.get("positions"):
        echo_positions(summary["positions"])
    if summary.get("drift"):
        echo_drift(summary["drift"])


def _gain(g: dict | None) -> tuple[str, str]:
    if not g or g["db"] is None:
        return "", ""
    better = round(g["better_share"] * g["episodes"])
    return f"{_f(g['db'], sign='+')} {shown(g['ci'], g['episodes'])}", f"{better} of {g['episodes']}"


def _retention(arm: str, r: dict | None) -> str:
    if not r or arm == "bf16":
        return "100" if arm == "bf16" else ""
    return f"{_f(r['retention_pct'], 0)} {shown(r['ci_pct'], r['episodes'], 0)}"


def echo_revisit(rv: dict) -> None:
    kinds = ", ".join(f"{k} {n}" for k, n in rv["kinds"].items())
    click.echo(f"Revisit frames against the truth, pooled over frames (every frame weighs the same; "
               f"'ep. mean' = the mean of per-episode means); {rv['episodes']} episodes ({kinds}), held-out arenas")
    rows = []
    for cls, label in ROWS:
        for arm, figures in rv["classes"].items():
            c = figures[cls]
            gain, better = _gain(rv["gain_over_window"].get(arm, {}).get(cls))
            rows.append((label, arm, str(c["frames"]), _f(c["psnr"]), _f(c["psnr_episode_mean"]),
                         _f(c["ssim"], 3), _f(c["psnr_first"]), gain, better,
                         _retention(arm, rv["retention"].get(arm, {}).get(cls))))
    echo_table(("class", "arm", "frames", "PSNR", "ep. mean", "SSIM", "vs first visit", "gain over window dB [95% CI]",
                "better in", "retention % [95% CI]"), rows)
    s = rv["start_pose"]
    if s:
        click.echo(f"start pose: {s['start_frames']} of {s['revisit_frames']} revisit frames "
                   f"({_f(100 * (s['of_revisits'] or 0), 0)} %) return to chunk 0's cameras (the view the session "
                   f"is handed); all are observed returns ({s['start_frames']} of {s['observed_frames']})")
    for key, what in (("stale_fallback_cost_db", "stale-set fallback (int4 prefetch - on-demand)"),
                      ("prefetch_minus_sync_db", "int4 prefetch - sync (the exact set only, slots emptied every chunk)"),
                      ("int2_minus_bf16_db", "int2 - bf16")):
        d = rv[key]
        if d["pairs"]:
            click.echo(f"{what}, every revisit frame: {_f(d['mean'], 3, '+')} dB "
                       f"{shown(d['ci'], d['pairs'], 3, '+')}")
    if rv["hits"] or rv["misses"]:  # none: the int4 arm was not run
        click.echo(f"int4 memory counters: {rv['hits']} hits, {rv['misses']} misses, {rv['stale']} stale slots")
    click.echo(NOT_COVERED)


def echo_positions(pos: dict) -> None:
    click.echo(f"Positions (returning at chunk {pos.get('return_chunk_past')}; below = the same path from chunk 0)")

    def diff(d):
        return "" if not d or d["mean"] is None else f"{d['mean']:+.2f} {shown(d['ci'], d['pairs'], sign='+')}"

    echo_table(("arm", "PSNR vs truth", "SSIM", "PSNR vs first", "vs below dB [95% CI]"),
               [(arm, _f(p["psnr_truth"]), _f(p["ssim_truth"], 3), _f(p["psnr_first"]),
                 diff(p.get("vs_below_db"))) for arm, p in pos.items() if isinstance(p, dict)])


def echo_drift(drift: dict) -> None:
    click.echo("Long session: PSNR / SSIM against the truth per block")
    arms = list(drift)
    starts = drift[arms[0]]["block_start"]
    echo_table(("block", *arms), [(str(s), *[f"{_f(drift[a]['psnr'][i])} / {_f(drift[a]['ssim'][i], 3)}"
                                               for a in arms]) for i, s in enumerate(starts)])
