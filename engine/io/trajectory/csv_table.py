"""The ``.csv`` trajectory as a table: lines read with the ``csv`` module (so quoted fields, e.g. from
``csv.writer(..., quoting=csv.QUOTE_ALL)``, work), leading and interleaved ``#`` comment lines and blank
lines skipped, header names case-insensitive; then the columns decide between a pose CSV (``pose_csv``)
and a raw action CSV (``action_csv``).

Owns the table shape: one header, then rows of as many fields, each kept with its line number in the
file for the messages. Each line is one record (a quoted field cannot span lines); malformed quoting is
an error naming the line.
"""
from __future__ import annotations

import csv
import itertools
from typing import Any, Iterator

from engine.io.poses import Calibration
from engine.io.trajectory.action_csv import _action_csv
from engine.io.trajectory.build import _Actions
from engine.io.trajectory.fields import _content_lines, _Context
from engine.io.trajectory.pose_csv import _POSE_COLUMNS, _pose_csv


def _load_csv(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int, **_: Any) -> _Actions:
    rows = _csv_records(ctx, text)
    first = next(rows, None)
    if first is None:
        raise ctx.error("no header line (only comments)")
    header_line, header = first[0], [h.lower() for h in first[1]]
    for name in header:
        if header.count(name) > 1 or not name:
            raise ctx.error(f"column {name!r} is empty or repeated", header_line, "header")
    table = _rows(ctx, header, rows)
    head = next(table, None)
    if head is None:
        raise ctx.error("no data rows after the header", header_line)
    table = itertools.chain([head], table)
    if set(header) & {"t", "roll", *_POSE_COLUMNS}:
        # Rows are read as far as the session needs them (a long pose file is never held whole);
        # the file's last row tells how long it is.
        last = _rows(ctx, header, iter([_last_record(ctx, text)]))
        return _pose_csv(ctx, header, header_line, table, mode, cal, frames, last=next(last))
    return _action_csv(ctx, header, header_line, list(table), mode)


def _rows(ctx: _Context, header: list[str], rows) -> Iterator[tuple[int, dict[str, str]]]:
    for number, fields in rows:
        if len(fields) != len(header):
            raise ctx.error(f"expected {len(header)} values ({', '.join(header)}), got {len(fields)}", number)
        yield number, dict(zip(header, fields))


def _last_record(ctx: _Context, text: str) -> tuple[int, list[str]]:
    """The file's last content line, parsed, found from the end (no pass over the file)."""
    pos = len(text)
    while pos > 0:
        start = text.rfind("\n", 0, pos) + 1
        pieces = text[start:pos].splitlines()   # what ``_content_lines`` would see of this stretch
        for k in range(len(pieces) - 1, -1, -1):
            line = pieces[k].strip()
            if line and not line.startswith("#"):
                number = text.count("\n", 0, start) + 1 + k
                return next(_csv_records(ctx, "\n" * (number - 1) + line))
        pos = start - 1
    raise AssertionError("a file with data rows has a last content line")


def _csv_records(ctx: _Context, text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) of every line that is neither blank nor a ``#`` comment."""
    for number, line in _content_lines(text):
        try:
            fields = next(csv.reader([line], skipinitialspace=True, strict=True))
        except csv.Error as exc:
            raise ctx.error(f"invalid CSV ({exc})", number) from None
        yield number, [f.strip() for f in fields]
