"""Rows of several runs that must fit together before they are summarised (``bench quality --from-rows``).

Owns the checks across rows (each row alone is ``engine.quality.rows_fields``'s). The summaries pair rows
by arm and episode, so rows merged from runs of different settings would be paired wrong or not at all:

* one row per measurement — arm and episode (revisit: seed and kind; positions and long: seed; drift:
  block; walk: seed, kind and whether the look-around was observed) — after identical repeats are
  dropped: a second one comes from a run of other settings (``--chunks``, ``--observed``,
  ``--prefix-chunks``, ``--minutes``);
* a revisit episode's frames of each class the same for every arm (the cameras are the path's);
* every drift arm the same blocks; every long row the same bin length, and a seed every arm ran; every
  walk row the same bin length and minutes of video, and, with and without the look-around, an episode
  (seed and kind) every arm of that setting ran.

Each failure is one ``JsonInputError`` naming the row (``--from-rows F line N``) or the arms.
"""
from __future__ import annotations

from engine.files.bounded_json import JsonInputError

MEASUREMENT = {"revisit": ("arm", "seed", "kind"), "positions": ("arm", "seed"), "drift": ("arm", "block_start"),
               "long": ("arm", "seed"), "walk": ("arm", "seed", "kind", "look_around")}
SETTINGS = "merge rows of runs with the same settings (--chunks, --observed, --prefix-chunks, --block, --minutes)"


def _once(rows: list[tuple[dict, str]]) -> None:
    first: dict = {}
    for row, what in rows:
        key = (row["experiment"], *(row[k] for k in MEASUREMENT[row["experiment"]]))
        if key in first:
            raise JsonInputError(f"{what} measures {row['experiment']} arm {row['arm']!r} of the same episode as "
                                 f"{first[key]}, with other settings; {SETTINGS}")
        first[key] = what


def _revisit_frames(rows: list[tuple[dict, str]]) -> None:
    first: dict = {}
    for row, what in rows:
        if row["experiment"] != "revisit":
            continue
        frames = {cls: entry["frames"] for cls, entry in row["classes"].items() if isinstance(entry, dict)}
        key = (row["seed"], row["kind"])
        if key not in first:
            first[key] = (frames, what)
        elif frames != first[key][0]:
            raise JsonInputError(f"{what}: the frames of each class ({frames}) are not those of the same episode "
                                 f"at {first[key][1]} ({first[key][0]}); {SETTINGS}")


def _drift_blocks(rows: list[tuple[dict, str]]) -> None:
    blocks: dict = {}
    for row, what in rows:
        if row["experiment"] == "drift":
            blocks.setdefault(row["arm"], (what, []))[1].append(row["block_start"])
    shapes = {arm: sorted(starts) for arm, (_, starts) in blocks.items()}
    lead, lead_starts = next(iter(shapes.items()), (None, None))
    for arm, starts in shapes.items():
        if starts != lead_starts:
            raise JsonInputError(f"{blocks[arm][0]}: drift arm {arm!r} has blocks from chunks {starts[:6]}, arm "
                                 f"{lead!r} from {lead_starts[:6]}; {SETTINGS}")


def _long_rows(rows: list[tuple[dict, str]]) -> None:
    long = [(row, what) for row, what in rows if row["experiment"] == "long"]
    if not long:
        return
    lead, lead_what = long[0]
    for row, what in long:
        if row["bin_s"] != lead["bin_s"]:
            raise JsonInputError(f"{what}: bins of {row['bin_s']} s, not the {lead['bin_s']} s of {lead_what} "
                                 "(a smoke test's rows merged with a benchmark's?); merge rows of the same kind of run")
    seeds: dict = {}
    for row, _ in long:
        seeds.setdefault(row["arm"], set()).add(row["seed"])
    if not set.intersection(*seeds.values()):
        ran = "; ".join(f"{arm}: {sorted(s)[:6]}" for arm, s in seeds.items())
        raise JsonInputError(f"--from-rows: no held-out seed has rows of every arm (seeds {ran}); the figures pair "
                             "arms on the same seeds: merge runs of the same --seeds and --seed-start")


def _walk_rows(rows: list[tuple[dict, str]]) -> None:
    walk = [(row, what) for row, what in rows if row["experiment"] == "walk"]
    for row, what in walk:
        lead, lead_what = walk[0]
        if (row["bin_s"], row["frames"]) != (lead["bin_s"], lead["frames"]):
            raise JsonInputError(f"{what}: {row['frames']} video frames in bins of {row['bin_s']} s, not the "
                                 f"{lead['frames']} in bins of {lead['bin_s']} s of {lead_what}; {SETTINGS}")
    for look in (True, False):
        episodes: dict = {}
        for row, _ in walk:
            if row["look_around"] == look:
                episodes.setdefault(row["arm"], set()).add((row["seed"], row["kind"]))
        if episodes and not set.intersection(*episodes.values()):
            raise JsonInputError("--from-rows: no walk episode (seed and kind) has rows of every arm; the figures "
                                 "pair arms on the same episodes: merge runs of the same --seeds, --seed-start and "
                                 "--kinds")


def check_together(rows: list[tuple[dict, str]]) -> None:
    """The rows (each with where it was read) fit together (see the module docstring)."""
    _once(rows)
    _revisit_frames(rows)
    _drift_blocks(rows)
    _long_rows(rows)
    _walk_rows(rows)
