"""The figure of ``worldpager bench quality``, from the summary's plain numbers, drawn by ``engine.report.plots``.

Owns which panels the figure has: PSNR of revisit frames against the truth per arm, pooled over frames,
for returns to observed views, returns to generated views and every generated frame; retention of bf16
memory's gain per arm, observed and generated returns apart (reference lines at 100 % and 95 %; int4's
intervals in the panel's note, or why there are none); positions past the horizon against the same
path below it; PSNR per block of the long session, int4 against bf16. A smoke test's figure says so in
its title.
"""
from __future__ import annotations

from pathlib import Path

from engine.report.plots import Figure, Panel, RefLine, Series, save_png
from engine.quality.retention import shown

PANEL_CLASSES = ("observed", "generated", "all")
LABELS = {"observed": "returns to observed views", "generated": "returns to generated views",
          "all": "every generated frame"}


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def quality_figure(summary: dict, path: Path) -> Path:
    panels = []
    revisit = summary.get("revisit")
    if revisit:
        figures = revisit["classes"]
        arms = list(figures)
        panels.append(Panel("Revisit frames: PSNR against the truth, pooled over frames", tuple(
            Series(LABELS[c], arms, [_nan(figures[a][c]["psnr"]) for a in arms]) for c in PANEL_CLASSES),
            ylabel="dB", kind="bar"))
        keeps = {a: r for a, r in revisit["retention"].items() if a != "bf16"}
        int4 = keeps.get("int4", {})
        note = "; ".join(f"int4 {c} {shown(int4[c]['ci_pct'], int4[c]['episodes'], 0)}"
                         for c in ("observed", "generated") if c in int4)
        panels.append(Panel("Retention of bf16 memory's gain over window-only (PSNR, pooled)", tuple(
            Series(LABELS[c], list(keeps), [_nan(r[c]["retention_pct"]) for r in keeps.values()])
            for c in ("observed", "generated")), ylabel="%", kind="bar", note="95 % CI: " + note,
            refs=(RefLine(100.0, "bf16 (100 %)"), RefLine(95.0, "95 %", style="dotted"))))
    pos = summary.get("positions")
    if pos:
        arms = [a for a in pos if isinstance(pos[a], dict)]
        panels.append(Panel(f"Positions: returning at chunk {pos.get('return_chunk_past', '?')} vs from chunk 0", (
            Series("against the truth", arms, [pos[a]["psnr_truth"] for a in arms]),
            Series("against the first visit", arms, [pos[a]["psnr_first"] for a in arms])), ylabel="dB", kind="bar"))
    drift = summary.get("drift")
    if drift:
        panels.append(Panel("Long session: PSNR per block of chunks", tuple(
            Series(arm, d["block_start"], d["psnr"]) for arm, d in drift.items()),
            xlabel="block's first chunk", ylabel="dB"))
    title = "Does memory keep the world consistent? (arena model, held-out arenas)"
    if summary.get("smoke_test"):
        title += " SMOKE TEST (--quick): not the benchmark's figures"
    return save_png(Figure(title,
                           tuple(panels), columns=2, panel_size=(7.0, 3.0), dpi=70), path)
