"""The pose CSV: timed camera poses (``t`` seconds or ``frame``, then ``x, y, z, yaw, pitch`` and
optional ``roll`` in degrees, columns in any order), tracked into actions.

Owns the pose columns and their checks; the table itself is read by ``csv_table``.
"""
from __future__ import annotations

import numpy as np

from engine.geometry import quat_from_euler
from engine.io.poses import FPS, Calibration
from engine.io.trajectory.build import _Actions
from engine.io.trajectory.fields import _check_times, _Context, _coordinate, _integer, _number, _pitch
from engine.io.trajectory.tracker import _pose_targets, _track

_POSE_COLUMNS = ("x", "y", "z", "yaw", "pitch")


def _pose_csv(ctx: _Context, header: list[str], header_line: int, table, mode: str, cal: Calibration,
              frames: int, last: tuple[int, dict]) -> _Actions:
    """``table``: (line, row) pairs, read lazily; ``last``: the file's last row (how long the file is)."""
    if ("t" in header) == ("frame" in header):
        raise ctx.error("pose CSV needs exactly one of the columns t (seconds) or frame", header_line, "header")
    known = ("t", "frame", *_POSE_COLUMNS, "roll")
    for name in header:
        if name not in known:
            raise ctx.error(f"unknown column {name!r} (pose columns: t|frame, x, y, z, yaw, pitch[, roll])",
                            header_line, "header")
    for name in _POSE_COLUMNS:
        if name not in header:
            raise ctx.error(f"missing column {name!r}", header_line, "header")
    column = "t" if "t" in header else "frame"

    def when(number: int, row: dict) -> float:
        if column == "t":
            return _number(ctx, row["t"], number, "t", text=True)
        return _integer(ctx, row["frame"], number, "frame", 0, text=True) / FPS

    times, lines, values, shown = [], [], [], []
    for number, row in table:   # only as far as the session's frames reach (and one row past them)
        times.append(when(number, row))
        lines.append(number)
        shown.append(f"t {row['t']} s" if column == "t" else f"frame {row['frame']}")
        values.append([_coordinate(ctx, row[c], number, c, text=True) for c in ("x", "y", "z")]
                      + [_number(ctx, row["yaw"], number, "yaw", text=True)]
                      + [_pitch(ctx, row["pitch"], number, "pitch", text=True),
                         _number(ctx, row.get("roll", "0"), number, "roll", text=True)])
        if times[-1] - times[0] >= frames / FPS:
            break
    _check_times(ctx, times, shown, lines, lambda i: column)
    last_line, last_row = last
    end = when(last_line, last_row)
    if last_line > lines[-1] and end <= times[-1]:
        shown_end = f"t {last_row['t']} s" if column == "t" else f"frame {last_row['frame']}"
        raise ctx.error(f"time goes backwards: the last row's {shown_end} is not after {shown[-1]}", last_line,
                        column)
    a = np.asarray(values)
    targets, file_frames = _pose_targets(ctx, np.asarray(times), a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5]),
                                         frames, last_line, column, end=max(end, times[-1]))
    return _track(ctx, targets, mode, cal, "pose csv", file_frames)
