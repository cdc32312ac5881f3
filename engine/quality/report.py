"""One benchmark run of ``worldpager bench quality``: the experiments of a plan, their summary, the
figure, the side-by-side videos and the still.

Owns the order of work and the files it leaves in ``out_dir``: ``quality.png`` (the figure),
``sidebyside-<arm>.mp4`` (truth | arm | window-only, the first seed's ``KEEP_KIND`` episode) and
``sidebyside-int4.png`` (a still of it: a return to a generated view). The summary says whether the
run was the smoke test (``smoke_test``: ``--quick``). ``summary_from_rows`` makes the same
summary and figure from the per-session rows of one or more runs (``quality-rows.jsonl``), so that
the experiments can run as separate processes and be read together.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from engine.quality.figure import quality_figure
from engine.quality.pooled import summarise_revisit
from engine.quality.run import Kept, Plan, drift, positions, revisit, summarise_drift, summarise_positions
from engine.quality.sidebyside import side_by_side, still_from_video, write_video

KEEP_KIND = "spin"


def run_plan(plan: Plan, experiments: tuple[str, ...], out_dir: Path, on_row: Callable[[dict], None]) -> dict:
    summary: dict = {"smoke_test": plan.smoke_test}
    if "revisit" in experiments:
        rows, kept = revisit(plan, on_row, keep_kind=KEEP_KIND if KEEP_KIND in plan.kinds else plan.kinds[0])
        summary["revisit"] = summarise_revisit(rows)
        if kept is not None:
            summary["videos"] = write_videos(kept, out_dir)
    if "positions" in experiments and plan.position_seeds:
        summary["positions"] = summarise_positions(positions(plan, on_row))
    if "drift" in experiments and plan.drift_chunks:
        summary["drift"] = summarise_drift(drift(plan, on_row))
    summary["figure"] = str(quality_figure(summary, out_dir / "quality.png"))
    return summary


def summary_from_rows(rows: list[dict], out_dir: Path) -> dict:
    summary: dict = {"smoke_test": any(r.get("smoke_test") for r in rows)}
    kinds = {kind: [r for r in rows if r["experiment"] == kind] for kind in ("revisit", "positions", "drift")}
    if kinds["revisit"]:
        summary["revisit"] = summarise_revisit(kinds["revisit"])
    if kinds["positions"]:
        summary["positions"] = summarise_positions(kinds["positions"])
    if kinds["drift"]:
        summary["drift"] = summarise_drift(kinds["drift"])
    out_dir.mkdir(parents=True, exist_ok=True)
    summary["figure"] = str(quality_figure(summary, out_dir / "quality.png"))
    return summary


def write_videos(kept: Kept, out_dir: Path) -> dict:
    """Truth | arm | window-only for each arm; a still of int4 at a return to a generated view."""
    window = kept.frames["window"]
    shown = {}
    for arm, frames in kept.frames.items():
        if arm == "window":
            continue
        rows = side_by_side(kept.truth, frames, window, labels=["truth", f"memory ({arm})", "window-only"])
        path = out_dir / f"sidebyside-{arm}.mp4"
        write_video(path, rows)
        shown[arm] = str(path)
        if arm == "int4":
            index = kept.still_frame
            still_from_video(path, index, out_dir / "sidebyside-int4.png")
            shown["still"] = str(out_dir / "sidebyside-int4.png")
            shown["still_frame"] = index
    shown["episode"] = {"arena_seed": kept.episode.arena_seed, "kind": kept.episode.kind}
    return shown
