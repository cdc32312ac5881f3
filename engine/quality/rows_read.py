"""Rows of benchmark runs read back (``bench quality --from-rows``, given once or more): the one reader
of rows files, for the revisit benchmark, the long one and the walking one (no numpy, no torch).

Owns reading them and what makes two rows the same measurement.

* ``read_rows(paths, long, walk=False)`` — every file through the bounded JSON Lines reader
  (``engine.files.bounded_json.iter_json_lines``: the input gate refuses a FIFO, a device, a directory or a
  file under ``/proc`` before it is opened; a line's size, UTF-8 and nesting depth are checked), every
  row an object whose fields have the kinds its summary reads (``engine.quality.rows_fields``). A row of
  another benchmark (a ``long`` row without ``--long``, a ``walk`` row without ``--walk``, a revisit,
  positions or drift row with either) is refused naming the flag to read it with; a file with no rows is refused. Rows that name the same
  experiment, arm and episode are kept once, the first: two runs merged both hold the baselines
  (window-only, bf16, int4) of the same episodes, which would otherwise count twice in every pooled
  figure. What is left must fit together (``engine.quality.rows_checks``).
* ``repeated_line(n)`` — the note printed when rows were dropped so.

Anything wrong is one ``JsonInputError`` (exit 1) naming the file and the line.
"""
from __future__ import annotations

from pathlib import Path

from engine.files.bounded_json import STRING, JsonInputError, expect_object, iter_json_lines
from engine.files.input_files import shown
from engine.quality.rows_checks import check_together
from engine.quality.rows_fields import FIELDS, check_row

FLAG = "--from-rows"
MAX_LINE_BYTES = 4 << 20       # a long row of a day of video (1,440 bins of ~600 bytes) fits
ROW_IDENTITY = ("experiment", "arm", "seed", "kind", "arena_seed", "block_start", "chunks", "look_around")
FLAGS = {"long": "--long", "walk": "--walk"}
REVISIT_EXPERIMENTS = ("revisit", "positions", "drift")


def _benchmark(row: dict, what: str, long: bool, walk: bool = False) -> None:
    """A row of the benchmark being summarised (``long``: ``bench quality --long``; ``walk``: ``--walk``),
    else the flag to use."""
    experiment = row["experiment"]
    if experiment not in FIELDS:
        raise JsonInputError(f"{what}: experiment {experiment!r} is none of {', '.join(FIELDS)}: is it a rows "
                             "file of bench quality?")
    wanted = "long" if long else "walk" if walk else None
    if wanted and experiment != wanted:
        benchmark = "the long benchmark" if wanted == "long" else "the walking benchmark"
        read = f"read it with {FLAGS[experiment]}" if experiment in FLAGS else f"read it without {FLAGS[wanted]}"
        raise JsonInputError(f"{what} is a {experiment} row of bench quality, not a row of {benchmark} ({read})")
    if not wanted and experiment in FLAGS:
        name = "long" if experiment == "long" else "walking"
        raise JsonInputError(f"{what} is a row of the {name} benchmark (bench quality {FLAGS[experiment]}): read "
                             f"it with {FLAGS[experiment]}")
    if experiment == "revisit" and "classes" not in row:
        raise JsonInputError(f"{what} is a revisit row of the earlier leave-and-return benchmark (no frame "
                             "classes); run the revisit experiment again")


def _rows_of(path: Path, long: bool, walk: bool = False) -> list[tuple[dict, str]]:
    """Each row of the file at ``path``, checked, with where it is (``--from-rows F line N``)."""
    found = []
    for number, value in iter_json_lines(path, FLAG, MAX_LINE_BYTES):
        what = f"{FLAG} {shown(path)} line {number}"
        row = expect_object(value, what, {"experiment": STRING})
        _benchmark(row, what, long, walk)
        found.append((check_row(row, what), what))
    if not found:
        raise JsonInputError(f"{FLAG} {shown(path)} holds no rows: is it the right file?")
    return found


def read_rows(paths, long: bool, walk: bool = False) -> tuple[list[dict], int]:
    """The rows of every file in ``paths``, checked, each measurement once (the first), and how many
    rows were dropped as repeats (see the module docstring)."""
    seen, kept = set(), []
    total = 0
    for path in paths:
        for row, what in _rows_of(Path(path), long, walk):
            total += 1
            key = tuple(row.get(k) for k in ROW_IDENTITY)
            if key not in seen:
                seen.add(key)
                kept.append((row, what))
    check_together(kept)
    return [row for row, _ in kept], total - len(kept)


def repeated_line(repeated: int) -> str:
    return (f"{repeated} row(s) named the same arm and episode as an earlier one (the baselines of two runs "
            "merged): the first of each was kept")
