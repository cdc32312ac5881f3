"""The per-minute figure of ``bench quality --long``, from the summary's plain numbers (``engine.report.plots``).

Owns its panels, one line per arm over the minutes of video: PSNR of every generated frame against the
truth; the sharpness ratio (the truth = 1); returns to observed views against the truth; returns to
generated views against the first visit (self-consistency), with memory's different-view control
dotted. A smoke test's figure says so in its title.
"""
from __future__ import annotations

from pathlib import Path

from engine.report.plots import Figure, Panel, RefLine, Series, save_png

LABELS = {"window": "window-only", "int4": "memory (int4)"}


def _v(entry: dict) -> float:
    return float("nan") if entry["value"] is None else float(entry["value"])


def _series(summary: dict, name: str, suffix: str = "") -> tuple[Series, ...]:
    x = [(b + 1) * summary["bin_s"] / 60.0 for b in range(summary["bins"])]
    return tuple(Series(LABELS.get(arm, arm) + suffix, x, [_v(b[name]) for b in d["bins"]])
                 for arm, d in summary["per_arm"].items())


def long_figure(summary: dict, path: Path) -> Path:
    unit = "minute" if summary["bin_s"] == 60 else f"{summary['bin_s']:g} s bin"
    xlabel = f"end of the {unit} of video (minutes)"
    control = summary["per_arm"].get("int4")
    consistency = _series(summary, "self_consistency")
    if control:
        consistency += (Series("memory (int4): a different view (control)",
                               [s for s in consistency[0].x], [_v(b["control"]) for b in control["bins"]]),)
    panels = (
        Panel("Every generated frame: PSNR against the truth", _series(summary, "psnr"), xlabel=xlabel,
              ylabel="dB", from_zero=False),
        Panel("Sharpness: the frames' Laplacian variance over the truth's", _series(summary, "sharpness"),
              xlabel=xlabel, ylabel="ratio", refs=(RefLine(0.3, "0.3"),)),
        Panel("Returns to observed views: PSNR against the truth", _series(summary, "observed_psnr"),
              xlabel=xlabel, ylabel="dB", from_zero=False),
        Panel("Returns to generated views: PSNR against the first visit", consistency, xlabel=xlabel,
              ylabel="dB", from_zero=False),
    )
    title = (f"Long sessions: {summary['episodes']} held-out arenas, {summary['minutes']:.1f} min of video each "
             "(arena model, pooled over frames)")
    if summary.get("smoke_test"):
        title += " SMOKE TEST: not the benchmark's figures"
    return save_png(Figure(title, panels, columns=2, panel_size=(7.0, 3.0), dpi=70), path)
