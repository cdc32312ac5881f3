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
              frames: int) -> _Actions:
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
    times, lines, values = [], [], []
    column = "t" if "t" in header else "frame"
    for number, row in table:
        if column == "t":
            times.append(_number(ctx, row["t"], number, "t", text=True))
        else:
            times.append(_integer(ctx, row["frame"], number, "frame", 0, text=True) / FPS)
        lines.append(number)
        values.append([_coordinate(ctx, row[c], number, c, text=True) for c in ("x", "y", "z")]
                      + [_number(ctx, row["yaw"], number, "yaw", text=True)]
                      + [_pitch(ctx, row["pitch"], number, "pitch", text=True),
                         _number(ctx, row.get("roll", "0"), number, "roll", text=True)])
    shown = [f"t {row['t']} s" if column == "t" else f"frame {row['frame']}" for _, row in table]
    _check_times(ctx, times, shown, lines, lambda i: column)
    a = np.asarray(values)
    targets, file_frames = _pose_targets(ctx, np.asarray(times), a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5]),
                                         frames, lines[-1], column)
    return _track(ctx, targets, mode, cal, "pose csv", file_frames)
