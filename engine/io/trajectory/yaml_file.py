"""The ``.yaml`` / ``.yml`` trajectory: ``keyframes:`` (camera poses, tracked into actions), then
``segments:`` (actions), or ``start:`` and ``segments:``.

Owns the top-level keys and the keyframe and start-pose fields (times in seconds or frames, position,
yaw / pitch / roll, each defaulting to the previous keyframe's); segments are read by ``yaml_segments``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.geometry import quat_from_euler
from engine.io.poses import FPS, ORIGIN, Calibration, CameraState
from engine.io.trajectory.build import TrackingError, _Actions, _empty
from engine.io.trajectory.fields import _check_times, _Context, _coordinate, _integer, _number, _pitch, _show
from engine.io.trajectory.tracker import _pose_targets, _track
from engine.io.trajectory.yaml_lines import _Map, _mapping, _parse_yaml, _sequence
from engine.io.trajectory.yaml_segments import _parse_segments


def _load_yaml(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int, **_: Any) -> _Actions:
    top = ("keyframes", "segments", "start")
    data = _parse_yaml(ctx, text)
    if not isinstance(data, _Map):
        raise ctx.error("expected a mapping with keyframes: and/or segments:", getattr(data, "line", None))
    _mapping(ctx, data, data.line, "", top)
    if "keyframes" not in data and "segments" not in data:
        raise ctx.error("needs keyframes: and/or segments:", data.line)
    if "keyframes" in data:
        if "start" in data:
            raise ctx.error("start: is only for segments without keyframes (the first keyframe is the start)",
                            data.line_of("start"), "start")
        times, positions, quats = _parse_keyframes(ctx, data["keyframes"], data.line_of("keyframes"))
        targets, file_frames = _pose_targets(ctx, times, positions, quats, frames, data.line_of("keyframes"),
                                             "keyframes")
        acts = _track(ctx, targets, mode, cal, "yaml", file_frames)
    else:
        start = _parse_start(ctx, data["start"], data.line_of("start")) if "start" in data else ORIGIN
        acts = _Actions(*_empty(mode), start, TrackingError(), "yaml")
    if "segments" in data:
        room = max(0, frames - len(acts.keyboard))   # frames of segments the session can still use
        acts = acts.appended(*_parse_segments(ctx, data["segments"], data.line_of("segments"), mode, room), "yaml")
    return acts


def _vec3(ctx: _Context, value: Any, line: int, field: str) -> list[float]:
    if not isinstance(value, list) or len(value) != 3:
        raise ctx.error(f"expected [x, y, z], got {_show(value)}", line, field)
    return [_coordinate(ctx, v, line, field) for v in value]


def _parse_start(ctx: _Context, value: Any, line: int) -> CameraState:
    m = _mapping(ctx, value, line, "start", ("position", "yaw", "pitch", "roll"))
    x, y, z = _vec3(ctx, m["position"], m.line_of("position"), "start.position") if "position" in m else (0, 0, 0)
    yaw = _number(ctx, m.get("yaw", 0.0), m.line_of("yaw"), "start.yaw")
    pitch = _pitch(ctx, m.get("pitch", 0.0), m.line_of("pitch"), "start.pitch")
    roll = _number(ctx, m.get("roll", 0.0), m.line_of("roll"), "start.roll")
    return CameraState(x, y, z, yaw, pitch, roll)


def _parse_keyframes(ctx: _Context, value: Any, line: int):
    """times [K] (s), positions [K, 3], quaternions [K, 4] of the keyframes: list."""
    items = _sequence(ctx, value, line, "keyframes")
    allowed = ("t", "frame", "position", "yaw", "pitch", "roll")
    current = {"position": [0.0, 0.0, 0.0], "yaw": 0.0, "pitch": 0.0, "roll": 0.0}
    times, shown, lines, rows = [], [], [], []
    for i, item in enumerate(items):
        name = f"keyframes[{i}]"
        kf = _mapping(ctx, item, items.line, name, allowed)
        if ("t" in kf) == ("frame" in kf):
            raise ctx.error("give exactly one of t (seconds) or frame", kf.line, name)
        if "t" in kf:
            times.append(_number(ctx, kf["t"], kf.line_of("t"), f"{name}.t"))
            shown.append(f"t {times[-1]:g} s")
        else:
            frame = _integer(ctx, kf["frame"], kf.line_of("frame"), f"{name}.frame", 0)
            times.append(frame / FPS)
            shown.append(f"frame {frame}")
        lines.append(kf.line)
        previous = dict(current)
        if "position" in kf:
            current["position"] = _vec3(ctx, kf["position"], kf.line_of("position"), f"{name}.position")
        for angle in ("yaw", "pitch", "roll"):
            if angle in kf:
                read = _pitch if angle == "pitch" else _number
                current[angle] = read(ctx, kf[angle], kf.line_of(angle), f"{name}.{angle}")
                # slerp takes the shorter arc: a turn of 180 degrees or more would silently go the other way
                if i and abs(current[angle] - previous[angle]) >= 180:
                    raise ctx.error(f"{angle} changes by {current[angle] - previous[angle]:g} degrees from the "
                                    f"previous keyframe; rotation takes the shorter arc, so split turns of 180 "
                                    f"degrees or more with more keyframes", kf.line_of(angle), f"{name}.{angle}")
        rows.append(current["position"] + [current["yaw"], current["pitch"], current["roll"]])
    _check_times(ctx, times, shown, lines, lambda i: f"keyframes[{i}]")
    a = np.asarray(rows)
    return np.asarray(times), a[:, :3], quat_from_euler(a[:, 3], a[:, 4], a[:, 5])
