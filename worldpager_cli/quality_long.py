"""The tables ``worldpager bench quality --long`` prints (click output only; the numbers are the summary's).

Owns their layout: what was run, one row per bin of video (a minute) with memory against window-only,
the last minute against the first, sharpness after the first seconds, the whole session's returns
with memory's gain, and what the figures do not cover. An interval is printed only from 8 episodes on;
below, ``n/a (N episodes)``.
"""
from __future__ import annotations

import click

from worldpager_cli.bench_output import echo_table
from worldpager_cli.quality_tables import shown

LONG_SMOKE_LINE = ("smoke test (--long --quick): one short session per arm in one held-out arena; it checks that "
                   "the long benchmark runs end to end. Its figures come from a few seconds of video: not the "
                   "benchmark's.")
NOT_COVERED = ("Not covered: models other than the arena model, paths with pitch or clamped at walls, arenas "
               "beyond these held-out seeds; the intervals describe these arenas' episodes (one path each).")


def _f(entry: dict | None, digits: int = 2) -> str:
    if not entry or entry.get("value") is None:
        return "-"
    return f"{entry['value']:.{digits}f}"


def _ci(entry: dict | None, digits: int = 2, sign: str = "") -> str:
    if not entry or (entry.get("value", entry.get("mean")) is None):
        return "-"
    value = entry.get("value", entry.get("mean"))
    return f"{value:{sign}.{digits}f} {shown(entry['ci'], entry.get('episodes', entry.get('pairs', 0)), digits, sign)}"


def echo_long(s: dict) -> None:
    arms = s["arms"]
    mem, ref = s["memory_arm"], "window"
    seeds = s["arena_seeds"]
    click.echo(f"Long sessions: {s['episodes']} held-out arena(s) ({seeds[0]}-{seeds[-1]}), one path each, "
               f"{s['minutes']:.2f} min of video ({s['chunks']} chunks, {s['observed_chunks']} observed); arms "
               f"{', '.join(arms)}. Scored on the decoded MP4 against the rendered truth, pooled over frames; "
               "95 % intervals over episodes.")
    per = s["per_arm"]
    unit = "min" if s["bin_s"] == 60 else "bin"
    lead = mem if mem in per else arms[0]   # a run of named arms only (--no-baselines) leads with its first
    header = (unit, "frames", f"PSNR {lead}", "window", "SSIM mem / win", "sharp mem / win",
              "obs. returns mem / win", "gen. returns vs truth", "self-consist. mem / win", "other view")
    rows = []
    for b in range(s["bins"]):
        m = per[lead]["bins"][b]
        w = per[ref]["bins"][b] if ref in per else dict.fromkeys(m)
        rows.append((str(b + 1), str(m["frames"]), _ci(m["psnr"]), _f(w["psnr"]),
                     f"{_f(m['ssim'], 3)} / {_f(w['ssim'], 3)}", f"{_f(m['sharpness'], 3)} / {_f(w['sharpness'], 3)}",
                     f"{_f(m['observed_psnr'])} / {_f(w['observed_psnr'])}",
                     f"{_f(m['generated_psnr'])} / {_f(w['generated_psnr'])}",
                     f"{_f(m['self_consistency'])} / {_f(w['self_consistency'])}", _f(m["control"])))
    echo_table(header, rows)
    for arm in arms:
        d = per[arm]
        click.echo(f"{arm}: last {unit} against the first: PSNR {_ci(d['last_minus_first_db'], sign='+')} dB, "
                   f"sharpness x {_ci(d['last_over_first_sharpness'], 3)}; sharpness in the first 3 s of "
                   f"generation {_ci(d['early']['sharpness'], 3)}, after them {_ci(d['late']['sharpness'], 3)}; "
                   f"self-consistency beyond a different view {_ci(d['specific_db'], sign='+')} dB")
        if "late_stood" in d:
            stood, new = d["late_stood"], d["late_new"]
            share = stood["frames"] / max(1, stood["frames"] + new["frames"])
            click.echo(f"{arm}: after the first 3 s, where the camera has stood before ({share:.0%} of the frames): "
                       f"sharpness {_ci(stood['sharpness'], 3)}, PSNR {_ci(stood['psnr'])} dB; at places new to "
                       f"the session: sharpness {_ci(new['sharpness'], 3)}, PSNR {_ci(new['psnr'])} dB")
    for arm, g in s["gain_over_window"].items():
        d, w = per[arm]["session"], per[ref]["session"]
        click.echo(f"{arm} over window-only, whole sessions: returns to observed views {_f(d['observed_psnr'])} / "
                   f"{_f(w['observed_psnr'])} dB, {_ci(g['session']['observed_psnr'], sign='+')}; returns to "
                   f"generated views against the first visit {_f(d['self_consistency'])} / "
                   f"{_f(w['self_consistency'])} dB, {_ci(g['session']['self_consistency'], sign='+')} (a different "
                   f"earlier view: {_f(d['control'])}), against the truth {_f(d['generated_psnr'])} / "
                   f"{_f(w['generated_psnr'])}; every generated frame {_ci(g['session']['psnr'], sign='+')}")
    for arm, d in s.get("against_memory", {}).items():
        parts = [f"{name} {' '.join(_ci(e, sign='+') for e in d[key])}"
                 for name, key in (("PSNR", "psnr"), ("observed returns", "observed_psnr"),
                                   ("self-consistency", "self_consistency"))]
        click.echo(f"{arm} - {mem} per {unit}: " + "; ".join(parts))
    if mem in per:
        m = per[mem]
        click.echo(f"memory through the store ({mem}): {m['hits']} hits, {m['misses']} misses, {m['stale']} stale "
                   f"slots, {m['disk_bytes_read'] / 2**20:.1f} MiB read back from the spill directory")
    click.echo(NOT_COVERED)
