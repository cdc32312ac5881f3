"""The figure of ``worldpager bench quality``, from the summary's plain numbers, drawn by ``engine.plots``.

Owns which panels the figure has: revisit PSNR against the truth per arm and gap; retention of bf16
memory's gain per arm (reference lines at 100 % and 95 %; intervals in the panel's note); positions
past the horizon against the same path below it; PSNR per block of the long session, int4 against bf16.
"""
from __future__ import annotations

from pathlib import Path

from engine.plots import Figure, Panel, RefLine, Series, save_png


def quality_figure(summary: dict, path: Path) -> Path:
    panels = []
    revisit = summary.get("revisit")
    if revisit:
        table = revisit["table"]
        arms = list(table)
        gaps = sorted({g for arm in table.values() for g in arm}, key=int)
        panels.append(Panel("Returning frames: PSNR against the truth", tuple(
            Series(f"gap {g} chunks", [a for a in arms if g in table[a]],
                   [table[a][g]["psnr_truth"] for a in arms if g in table[a]]) for g in gaps),
            ylabel="dB", kind="bar"))
        keeps = {a: r["psnr_truth"] for a, r in revisit["retention"].items() if a != "bf16"}
        note = ", ".join(f"{a} [{keeps[a]['ci_pct'][0]:.0f}, {keeps[a]['ci_pct'][1]:.0f}]"
                         for a in ("int4", "int2") if a in keeps)
        panels.append(Panel("Retention of bf16 memory's gain over window-only (PSNR)",
                            (Series("retention %", list(keeps), [r["retention_pct"] for r in keeps.values()]),),
                            ylabel="%", kind="bar", note="95 % CI: " + note,
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
    return save_png(Figure("Does memory keep the world consistent? (arena model, held-out arenas)",
                           tuple(panels), columns=2, panel_size=(7.0, 3.0), dpi=70), path)
