"""The tables ``worldpager bench quality --walk`` prints (click output only; the numbers are the summary's).

Owns their layout, per setting (with and without the observed look-around): what was run; one row per
class of frame and arm (frames, PSNR with its interval, SSIM, sharpness, self-consistency beside the
truth's own figure between the same views, the gain over window-only with its interval); the new
places' PSNR and the misses per minute of video; the new places' PSNR per kind of walk; what the
figures do not cover. An interval is printed only from 8 episodes on; below, ``n/a (N episodes)``.
"""
from __future__ import annotations

import click

from worldpager_cli.bench_output import echo_table
from worldpager_cli.quality_long import _ci, _f

WALK_SMOKE_LINE = ("smoke test (--walk --quick): one short walk of each kind per arm in one held-out arena; it "
                   "checks that the walking benchmark runs end to end. Its figures come from a few seconds of "
                   "video: not the benchmark's.")
CLASS_NAMES = {"new_place": "new place (>= 0.5 from every earlier camera)", "seen_surface": "  seeing surfaces seen before",
               "never_seen": "never-seen view", "revisit": "revisit (near, view seen before)",
               "return_observed": "  to an observed place", "return_generated": "  to a generated place",
               "near_new_view": "near, a new view", "all": "every generated frame"}
NOT_COVERED = ("Not covered: the decoded blends between latent frames, models other than the arena model, paths "
               "with pitch, beyond the arenas' pillar-free middle or clamped at walls, arenas beyond these held-out "
               "seeds; the intervals describe these arenas' episodes (one walk of each kind per arena).")


def _setting(name: str, s: dict) -> None:
    look = "after the observed look-around" if name == "look_around" else "without a look-around (chunk 0 given)"
    click.echo(f"Walking, {look}: {s['episodes']} episode(s) (kinds {', '.join(s['kinds'])}), "
               f"{s['minutes']:.2f} min of video ({s['chunks']} chunks, {s['observed_chunks']} observed); arms "
               f"{', '.join(s['arms'])}. Exact latent frames of the decoded MP4 against the rendered truth, "
               "pooled over frames; 95 % intervals over episodes.")
    per, gains = s["per_arm"], s["gain_over_window"]
    header = ("class", "arm", "frames", "PSNR", "SSIM", "sharp", "self-consist.", "truth views", "PSNR - window")
    rows = []
    for cls, label in CLASS_NAMES.items():
        for i, arm in enumerate(s["arms"]):
            c = per[arm]["classes"][cls]
            g = gains.get(arm, {}).get(cls, {}).get("psnr")
            rows.append((label if i == 0 else "", arm, str(c["frames"]), _ci(c["psnr"]), _f(c["ssim"], 3),
                         _f(c["sharpness"], 3), _f(c["self_consistency"]), _f(c["truth_consistency"]),
                         _ci(g, sign="+") if g else ""))
    echo_table(header, rows)
    unit = "minute" if s["bin_s"] == 60 else f"{s['bin_s']:g} s bin"
    for arm in s["arms"]:
        d = per[arm]
        click.echo(f"{arm}: per {unit}, new places PSNR {' '.join(_f(b['new_place']['psnr']) for b in d['bins'])} "
                   f"dB, sharpness {' '.join(_f(b['new_place']['sharpness'], 3) for b in d['bins'])}; retrieval "
                   f"misses per minute {_ci(d['misses_per_minute'], 1)} ({d['hits']} hits, {d['misses']} misses, "
                   f"{d['stale']} stale slots)")
    for kind in s["kinds"]:
        parts = [f"{arm} {_f(per[arm]['kinds'][kind]['new_place'])} / {_f(per[arm]['kinds'][kind]['revisit'])}"
                 for arm in s["arms"]]
        click.echo(f"{kind}: PSNR at new places / revisits: " + "; ".join(parts))


def echo_walk(summary: dict) -> None:
    for name, s in summary["settings"].items():
        _setting(name, s)
    click.echo(NOT_COVERED)
