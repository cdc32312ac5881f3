"""The fields a row of ``bench quality`` must hold to be summarised, and their kinds (no numpy, no torch).

Owns the schema of each kind of row, taken from the code that reads them: a ``revisit`` row
(``engine.quality.pooled``: per class of frame a count and score sums), a ``positions`` and a ``drift``
row (``engine.quality.run``'s summaries), a ``long`` row (``engine.quality.long_summary``: per bin of
video and per phase, sums and counts), a ``walk`` row (``engine.quality.walk_summary``: per bin of video,
per class of frame sums and counts, and the bin's memory counters). ``check_row`` checks one row against its experiment's fields
(``engine.files.bounded_json.expect_object``), counts of frames at least 0, a frame rate and a bin length
above 0; anything else is one ``JsonInputError`` naming ``what`` (the file and line) and the field.
Fields a summary does not read are left alone.
"""
from __future__ import annotations

from engine.files.bounded_json import (BOOL, INTEGER, LIST, NUMBER, OBJECT, STRING, JsonInputError, expect_object)

REVISIT_CLASSES = ("observed", "start", "observed_away", "generated", "revisit", "all")   # engine.quality.revisits
WALK_CLASSES = ("new_place", "seen_surface", "never_seen", "revisit", "return_observed", "return_generated",
                "near_new_view", "all")                                                   # engine.quality.walk_classes
COUNTERS = {"hits": INTEGER, "misses": INTEGER, "stale": INTEGER, "disk_bytes_read": INTEGER}
COMMON = {"smoke_test": BOOL, **COUNTERS}

FIELDS = {
    "revisit": ({"arm": STRING, "seed": INTEGER, "kind": STRING, "classes": OBJECT},
                {"arena_seed": INTEGER, "chunks": INTEGER, "observed_chunks": INTEGER, **COMMON}),
    "positions": ({"arm": STRING, "seed": INTEGER, "psnr_truth": NUMBER, "return_chunk": INTEGER},
                  {"ssim_truth": NUMBER, "psnr_first": NUMBER, "ssim_first": NUMBER, "psnr_first_truth": NUMBER,
                   "arena_seed": INTEGER, "chunks": INTEGER, **COMMON}),
    "drift": ({"arm": STRING, "block_start": INTEGER, "psnr_truth": NUMBER, "ssim_truth": NUMBER},
              {"chunks": INTEGER, **COMMON}),
    "long": ({"arm": STRING, "seed": INTEGER, "arena_seed": INTEGER, "chunks": INTEGER, "observed_chunks": INTEGER,
              "frames": INTEGER, "fps": NUMBER, "bin_s": NUMBER, "bins": LIST, "early": OBJECT, "late": OBJECT},
             {"late_stood": OBJECT, "late_new": OBJECT, **COMMON}),
    "walk": ({"arm": STRING, "seed": INTEGER, "kind": STRING, "look_around": BOOL, "arena_seed": INTEGER,
              "chunks": INTEGER, "observed_chunks": INTEGER, "frames": INTEGER, "fps": NUMBER, "bin_s": NUMBER,
              "bins": LIST},
             {"latent_frames": INTEGER, **COMMON}),
}
CLASS = ({"frames": INTEGER, "psnr": NUMBER}, {"ssim": NUMBER, "psnr_first": NUMBER})
PHASE = {"frames": INTEGER, "psnr": NUMBER, "detail": NUMBER, "detail_truth": NUMBER}
BIN = {**PHASE, "ssim": NUMBER, "observed": OBJECT, "generated": OBJECT}
OBSERVED = {"frames": INTEGER, "psnr": NUMBER, "ssim": NUMBER}
WALK_BIN = {"classes": OBJECT, "hits": INTEGER, "misses": INTEGER, "stale": INTEGER}
WALK_CLASS = {"frames": INTEGER, "psnr": NUMBER, "ssim": NUMBER, "detail": NUMBER, "detail_truth": NUMBER,
              "first_frames": INTEGER, "psnr_first": NUMBER, "psnr_first_truth": NUMBER}
GENERATED = {"frames": INTEGER, "psnr": NUMBER, "psnr_first": NUMBER, "control_frames": INTEGER,
             "psnr_control": NUMBER}


def _counted(entry: dict, what: str, fields=("frames",)) -> dict:
    for field in fields:
        if entry[field] < 0:
            raise JsonInputError(f"{what}: field {field!r} is {entry[field]}, expected a count (0 or more)")
    return entry


def _part(row: dict, field: str, what: str, required: dict, optional: dict | None = None, counts=("frames",)):
    return _counted(expect_object(row[field], f"{what}: field {field!r}", required, optional),
                    f"{what}: field {field!r}", counts)


def _positive(row: dict, field: str, what: str) -> None:
    if not row[field] > 0 or row[field] == float("inf"):
        raise JsonInputError(f"{what}: field {field!r} is {row[field]}, expected a positive finite number")


def _long(row: dict, what: str) -> None:
    _counted(row, what)
    _positive(row, "fps", what)
    _positive(row, "bin_s", what)
    if not row["bins"]:
        raise JsonInputError(f"{what}: field 'bins' is empty, expected one entry per bin of video")
    if ("late_stood" in row) != ("late_new" in row):
        raise JsonInputError(f"{what} has one of the fields 'late_stood' and 'late_new' without the other")
    for phase in ("early", "late", "late_stood", "late_new"):
        if phase in row:
            _part(row, phase, what, PHASE)
    for b, entry in enumerate(row["bins"]):
        where = f"{what}: bin {b + 1}"
        _counted(expect_object(entry, where, BIN), where)
        _part(entry, "observed", where, OBSERVED)
        _part(entry, "generated", where, GENERATED, counts=("frames", "control_frames"))


def _walk(row: dict, what: str) -> None:
    _counted(row, what)
    _positive(row, "fps", what)
    _positive(row, "bin_s", what)
    if not row["bins"]:
        raise JsonInputError(f"{what}: field 'bins' is empty, expected one entry per bin of video")
    for b, entry in enumerate(row["bins"]):
        where = f"{what}: bin {b + 1}"
        _counted(expect_object(entry, where, WALK_BIN), where, ("hits", "misses", "stale"))
        for cls in WALK_CLASSES:
            if cls not in entry["classes"]:
                raise JsonInputError(f"{where}: field 'classes' has no class {cls!r}")
            _part(entry["classes"], cls, f"{where}: field 'classes'", WALK_CLASS, counts=("frames", "first_frames"))


def check_row(row: dict, what: str) -> dict:
    """``row`` (an object whose ``experiment`` is one of ``FIELDS``) when it holds what its summary reads."""
    experiment = row["experiment"]
    required, optional = FIELDS[experiment]
    expect_object(row, what, required, optional)
    if experiment == "revisit":
        for cls in REVISIT_CLASSES:
            if cls not in row["classes"]:
                raise JsonInputError(f"{what}: field 'classes' has no class {cls!r}")
            _part(row["classes"], cls, f"{what}: field 'classes'", *CLASS)
    elif experiment == "long":
        _long(row, what)
    elif experiment == "walk":
        _walk(row, what)
    return row
