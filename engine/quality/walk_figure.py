"""The per-minute figure of ``bench quality --walk``, from the summary's plain numbers (``engine.report.plots``).

Owns its panels, one line per arm over the minutes of video (the first setting of the summary: with
the look-around when it was run): PSNR at new places; their sharpness ratio (the truth = 1); PSNR of
revisits (near an earlier camera, the view mostly seen before); self-consistency of returns to
generated places; retrieval misses per minute. A smoke test's figure says so in its title.
"""
from __future__ import annotations

from pathlib import Path

from engine.report.plots import Figure, Panel, Series, save_png

LABELS = {"window": "window-only", "int4": "memory (int4, rotation-only re-projection)",
          "noreproject": "memory, no re-projection"}


def _v(entry: dict) -> float:
    return float("nan") if entry["value"] is None else float(entry["value"])


def _series(s: dict, cls: str | None, name: str) -> tuple[Series, ...]:
    x = [(b + 1) * s["bin_s"] / 60.0 for b in range(s["bins"])]
    return tuple(Series(LABELS.get(arm, arm), x, [_v(b[cls][name] if cls else b[name]) for b in d["bins"]])
                 for arm, d in s["per_arm"].items())


def walk_figure(summary: dict, path: Path) -> Path:
    setting, s = next(iter(summary["settings"].items()))
    unit = "minute" if s["bin_s"] == 60 else f"{s['bin_s']:g} s bin"
    xlabel = f"end of the {unit} of video (minutes)"
    panels = (
        Panel("New places (>= 0.5 units from every earlier camera): PSNR", _series(s, "new_place", "psnr"),
              xlabel=xlabel, ylabel="dB", from_zero=False),
        Panel("New places: sharpness (Laplacian variance over the truth's)", _series(s, "new_place", "sharpness"),
              xlabel=xlabel, ylabel="ratio"),
        Panel("Revisits (near an earlier camera, view seen before): PSNR", _series(s, "revisit", "psnr"),
              xlabel=xlabel, ylabel="dB", from_zero=False),
        Panel("Returns to generated places: PSNR against the earlier frame",
              _series(s, "return_generated", "self_consistency"), xlabel=xlabel, ylabel="dB", from_zero=False),
        Panel("Retrieval misses per minute of video", _series(s, None, "misses_per_minute"), xlabel=xlabel,
              ylabel="misses / min"),
    )
    title = (f"Walking: {s['episodes']} episodes ({', '.join(s['kinds'])}), {s['minutes']:.1f} min each, "
             f"{'with' if setting == 'look_around' else 'without'} the observed look-around (exact latent frames)")
    if summary.get("smoke_test"):
        title += " SMOKE TEST: not the benchmark's figures"
    return save_png(Figure(title, panels, columns=2, panel_size=(7.0, 3.0), dpi=70), path)
