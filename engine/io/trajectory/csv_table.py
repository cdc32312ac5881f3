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
from typing import Any, Iterator

from engine.io.poses import Calibration
from engine.io.trajectory.action_csv import _action_csv
from engine.io.trajectory.build import _Actions
from engine.io.trajectory.fields import _content_lines, _Context
from engine.io.trajectory.pose_csv import _POSE_COLUMNS, _pose_csv


def _load_csv(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int, **_: Any) -> _Actions:
    rows = list(_csv_records(ctx, text))
    if not rows:
        raise ctx.error("no header line (only comments)")
    header_line, header = rows[0][0], [h.lower() for h in rows[0][1]]
    for name in header:
        if header.count(name) > 1 or not name:
            raise ctx.error(f"column {name!r} is empty or repeated", header_line, "header")
    table = []
    for number, fields in rows[1:]:
        if len(fields) != len(header):
            raise ctx.error(f"expected {len(header)} values ({', '.join(header)}), got {len(fields)}", number)
        table.append((number, dict(zip(header, fields))))
    if not table:
        raise ctx.error("no data rows after the header", header_line)
    if set(header) & {"t", "roll", *_POSE_COLUMNS}:
        return _pose_csv(ctx, header, header_line, table, mode, cal, frames)
    return _action_csv(ctx, header, header_line, table, mode)


def _csv_records(ctx: _Context, text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped fields) of every line that is neither blank nor a ``#`` comment."""
    for number, line in _content_lines(text):
        try:
            fields = next(csv.reader([line], skipinitialspace=True, strict=True))
        except csv.Error as exc:
            raise ctx.error(f"invalid CSV ({exc})", number) from None
        yield number, [f.strip() for f in fields]
