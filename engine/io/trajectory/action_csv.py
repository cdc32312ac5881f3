"""The raw action CSV: one row per video frame (``frame`` = 0, 1, 2, ...), the mode's keys (0 or 1) and
mouse values, played as they are (no tracking).

Owns the action columns of each mode (universal ``w, s, a, d, mouse_pitch, mouse_yaw``; gta_drive
``w, s, mouse_yaw``; templerun its one-hot keys) and the header diagnosis; the table itself is read by
``csv_table``.
"""
from __future__ import annotations

import numpy as np

from engine.io.actions import KEYBOARD_KEYS
from engine.io.poses import ORIGIN
from engine.io.trajectory.build import TrackingError, _Actions
from engine.io.trajectory.fields import _Context, _integer, _mouse_value, _number

# Raw action CSV columns after `frame`, per mode (the order of KEYBOARD_KEYS, then the mouse).
_ACTION_COLUMNS = {
    "universal": ("w", "s", "a", "d", "mouse_pitch", "mouse_yaw"),
    "gta_drive": ("w", "s", "mouse_yaw"),
    "templerun": KEYBOARD_KEYS["templerun"],
}


def _action_csv(ctx: _Context, header: list[str], header_line: int, table, mode: str) -> _Actions:
    columns = set(header) - {"frame"}
    exact = [m for m, cols in _ACTION_COLUMNS.items() if columns == set(cols) and "frame" in header]
    if exact and exact[0] != mode:
        raise ctx.error(f"columns are {exact[0]} actions ({', '.join(_ACTION_COLUMNS[exact[0]])}) but the "
                        f"mode is {mode}", header_line, "header")
    if not exact:
        _explain_header(ctx, header, header_line, mode)
    keyboard, mouse = [], []
    for k, (number, row) in enumerate(table):
        frame = _integer(ctx, row["frame"], number, "frame", 0, text=True)
        if frame != k:
            problem = "does not increase" if k and frame <= k - 1 else "skips frames"
            raise ctx.error(f"frame {frame} {problem}: one row per frame, numbered 0, 1, 2, ... (expected {k})",
                            number, "frame")
        keys = [c for c in _ACTION_COLUMNS[mode] if not c.startswith("mouse")]
        keyboard.append([_key_value(ctx, row[c], number, c) for c in keys])
        if mode == "templerun" and sum(keyboard[-1]) != 1:
            raise ctx.error("templerun actions are one-hot: exactly one column must be 1", number)
        if mode != "templerun":
            pitch = _mouse_value(ctx, row.get("mouse_pitch", "0"), number, "mouse_pitch", True)
            mouse.append([pitch, _mouse_value(ctx, row["mouse_yaw"], number, "mouse_yaw", True)])
    return _Actions(np.asarray(keyboard, dtype=np.float64), None if mode == "templerun" else np.asarray(mouse),
                    ORIGIN, TrackingError(), "action csv")


def _explain_header(ctx: _Context, header: list[str], line: int, mode: str) -> None:
    """Raise the most helpful error for a header matching no action or pose layout."""
    expected = ("frame",) + tuple(_ACTION_COLUMNS[mode])
    unknown = [h for h in header if h not in expected]
    missing = [c for c in expected if c not in header]
    what = f"unknown column {unknown[0]!r}" if unknown else f"missing column {missing[0]!r}"
    raise ctx.error(f"{what}; {mode} action columns are {', '.join(expected)} (pose columns: t|frame, x, y, z, "
                    f"yaw, pitch[, roll])", line, "header")


def _key_value(ctx: _Context, raw: str, line: int, column: str) -> float:
    value = _number(ctx, raw, line, column, text=True)
    if value not in (0.0, 1.0):
        raise ctx.error(f"key values are 0 or 1, got {raw!r}", line, column)
    return value
