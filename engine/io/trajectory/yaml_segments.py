"""A trajectory YAML's ``segments:`` list -> per-frame actions in the mode's action space.

Owns the segment vocabulary: ``keys`` (w s a d / forward back left right; gta_drive's a d steer; the
templerun keys), ``camera`` moves (+-one camera step on pitch or yaw), raw ``mouse`` values, and a
segment's length in ``frames`` or ``seconds``.
"""
from __future__ import annotations

import math

from typing import Any

import numpy as np

from engine.io.actions import CAMERA_STEP, KEYBOARD_KEYS
from engine.io.poses import FPS
from engine.io.trajectory.fields import _Context, _integer, _mouse_value, _number, _show
from engine.io.trajectory.yaml_lines import _Map, _mapping, _sequence

_KEY_NAMES = {"w": "forward", "s": "back", "a": "left", "d": "right",
              "forward": "forward", "back": "back", "left": "left", "right": "right"}
_CAMERA_NAMES = {"up": (0, 1.0), "down": (0, -1.0), "left": (1, -1.0), "right": (1, 1.0)}


def _parse_segments(ctx: _Context, value: Any, line: int, mode: str, room: int):
    """keyboard [N, k], mouse [N, 2] | None of the segments: list, in ``mode``'s action space, made for
    the first ``room`` frames only (every segment is still checked), and the frames of them all."""
    items = _sequence(ctx, value, line, "segments")
    allowed = ("keys", "camera", "mouse", "seconds", "frames")
    keyboards, mice, total = [], [], 0
    for i, item in enumerate(items):
        name = f"segments[{i}]"
        seg = _mapping(ctx, item, items.line, name, allowed)
        n = _segment_frames(ctx, seg, name)
        key_row, mouse_row = _segment_action(ctx, seg, name, mode)
        made = min(n, max(0, room - total))
        keyboards.append(np.repeat(key_row[None], made, 0))
        mice.append(None if mouse_row is None else np.repeat(mouse_row[None], made, 0))
        total += n
    return np.concatenate(keyboards), (None if mode == "templerun" else np.concatenate(mice)), total


def _segment_frames(ctx: _Context, seg: _Map, name: str) -> int:
    if ("seconds" in seg) == ("frames" in seg):
        raise ctx.error("give exactly one of seconds or frames", seg.line, name)
    if "frames" in seg:
        return _integer(ctx, seg["frames"], seg.line_of("frames"), f"{name}.frames", 1)
    seconds = _number(ctx, seg["seconds"], seg.line_of("seconds"), f"{name}.seconds")
    if not math.isfinite(seconds * FPS):
        raise ctx.error(f"{seconds:g} s is not a finite number of frames at {FPS} fps", seg.line_of("seconds"),
                        f"{name}.seconds")
    if round(seconds * FPS) < 1:
        raise ctx.error(f"{seconds:g} s is less than one frame at {FPS} fps", seg.line_of("seconds"),
                        f"{name}.seconds")
    return round(seconds * FPS)


def _names(ctx: _Context, value: Any, line: int, field: str) -> list[str]:
    """A name or a list of names, lower-cased."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(v, str) for v in names):
        raise ctx.error(f"expected a name or a list of names, got {_show(value)}", line, field)
    return [v.strip().lower() for v in names]


def _segment_action(ctx: _Context, seg: _Map, name: str, mode: str):
    """(keyboard row [k], mouse row [2] | None) of one segment."""
    keys = _names(ctx, seg.get("keys", []), seg.line_of("keys"), f"{name}.keys")
    if mode == "templerun":
        for field in ("camera", "mouse"):
            if field in seg:
                raise ctx.error("templerun has no mouse", seg.line_of(field), f"{name}.{field}")
        return _templerun_row(ctx, keys, seg.line_of("keys"), f"{name}.keys"), None
    mouse = _segment_mouse(ctx, seg, name, mode)
    row = np.zeros(len(KEYBOARD_KEYS[mode]))
    for key in keys:
        channel = _KEY_NAMES.get(key)
        if channel is None:
            valid = "w, s, a, d" if mode == "universal" else "w, s (a, d steer)"
            raise ctx.error(f"{key!r} is not a {mode} key ({valid})", seg.line_of("keys"), f"{name}.keys")
        if channel in KEYBOARD_KEYS[mode]:
            row[KEYBOARD_KEYS[mode].index(channel)] = 1.0
            continue
        # gta_drive: A/D are steering, i.e. mouse yaw -/+ one camera step (MG2 §5.2).
        if "camera" in seg or "mouse" in seg:
            raise ctx.error(f"gta_drive steers with {key!r} or with camera/mouse, not both",
                            seg.line_of("keys"), f"{name}.keys")
        mouse[1] += CAMERA_STEP if channel == "right" else -CAMERA_STEP
    return row, mouse


def _templerun_row(ctx: _Context, keys: list[str], line: int, field: str) -> np.ndarray:
    names = KEYBOARD_KEYS["templerun"]
    keys = keys or ["none"]
    if len(keys) != 1 or keys[0] not in names:
        raise ctx.error(f"templerun takes exactly one of {', '.join(names)}; got {_show(keys)}", line, field)
    row = np.zeros(len(names))
    row[names.index(keys[0])] = 1.0
    return row


def _segment_mouse(ctx: _Context, seg: _Map, name: str, mode: str) -> np.ndarray:
    if "camera" in seg and "mouse" in seg:
        raise ctx.error("give camera or mouse, not both", seg.line, name)
    mouse = np.zeros(2)
    if "mouse" in seg:
        value, line = seg["mouse"], seg.line_of("mouse")
        if not isinstance(value, list) or len(value) != 2:
            raise ctx.error(f"expected [pitch, yaw], got {_show(value)}", line, f"{name}.mouse")
        mouse[:] = [_mouse_value(ctx, v, line, f"{name}.mouse") for v in value]
    line, field = seg.line_of("camera"), f"{name}.camera"
    for move in _names(ctx, seg.get("camera", []), line, field):
        if move not in _CAMERA_NAMES:
            raise ctx.error(f"unknown camera move {move!r} (up, down, left, right)", line, field)
        axis, sign = _CAMERA_NAMES[move]
        if mouse[axis]:
            raise ctx.error(f"camera moves {_show(seg['camera'])} contradict or repeat", line, field)
        mouse[axis] = sign * CAMERA_STEP
    if mode == "gta_drive" and mouse[0]:
        field = "camera" if "camera" in seg else "mouse"
        raise ctx.error("gta_drive has no mouse pitch (it steers with yaw only)", seg.line_of(field),
                        f"{name}.{field}")
    return mouse
