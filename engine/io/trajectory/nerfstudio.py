"""The ``.json`` trajectory: a nerfstudio ``camera_path.json`` (``camera_path`` entries with a
``camera_to_world`` matrix, timed by ``fps`` or ``seconds``), tracked into actions.

Owns the matrix reading and checks, and the world axes: nerfstudio cameras already use ours, its world
is z-up, so world (x, y, z) becomes ours (x, z, -y) unless ``nerfstudio_up="y"``.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from engine.files.bounded_json import JsonInputError, parse_json
from engine.geometry import matrix_to_quat
from engine.io.poses import Calibration
from engine.io.trajectory.build import _Actions
from engine.io.trajectory.fields import _Context, _number, _show
from engine.io.trajectory.tracker import _pose_targets, _track

MAX_JSON_BYTES = 256 << 20   # a camera a few hundred bytes: ~a million cameras
_Z_UP_TO_Y_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])   # (x, y, z) -> (x, z, -y)


def _load_nerfstudio(ctx: _Context, text: str, mode: str, cal: Calibration, frames: int,
                     nerfstudio_up: str = "z") -> _Actions:
    try:
        data = parse_json(text, "the file", MAX_JSON_BYTES)   # bounded: size, nesting depth
    except JsonInputError as exc:
        why = str(exc).removeprefix("the file ").removeprefix("is ")
        syntax = re.fullmatch(r"not JSON: (.*) at line (\d+) column \d+", why)
        raise ctx.error(f"invalid JSON ({syntax[1]})" if syntax else why, int(syntax[2]) if syntax else None) from None
    if not isinstance(data, dict) or "camera_path" not in data:
        raise ctx.error("unknown JSON trajectory: expected a nerfstudio camera_path.json with a camera_path list")
    path = data["camera_path"]
    if not isinstance(path, list) or not path:
        raise ctx.error(f"expected a non-empty list, got {_show(path)}", field="camera_path")
    fps = _nerfstudio_fps(ctx, data, len(path))
    c2w = np.stack([_c2w(ctx, camera, i) for i, camera in enumerate(path)])          # [N, 3, 4]
    if nerfstudio_up == "z":
        c2w = _Z_UP_TO_Y_UP @ c2w
    times = np.arange(len(path)) / fps
    if len(path) > 1 and not times[1] > 0:
        raise ctx.error(f"{fps:g} frames per second leaves no time between cameras", field="fps")
    targets, file_frames = _pose_targets(ctx, times, c2w[:, :, 3], matrix_to_quat(c2w[:, :, :3]), frames, None, "fps")
    return _track(ctx, targets, mode, cal, "nerfstudio", file_frames)


def _nerfstudio_fps(ctx: _Context, data: dict, count: int) -> float:
    if "fps" in data:
        fps = _number(ctx, data["fps"], None, "fps")
    elif "seconds" in data:
        fps = count / _number(ctx, data["seconds"], None, "seconds") if data["seconds"] else 0.0
    else:
        raise ctx.error("needs fps (or seconds) to time the camera path", field="fps")
    if not 0 < fps < math.inf:
        raise ctx.error(f"must be positive and finite, got {fps:g}", field="fps")
    return fps


def _c2w(ctx: _Context, camera: Any, i: int) -> np.ndarray:
    """[3, 4] camera-to-world of one camera_path entry, checked to be a rotation and a translation."""
    field = f"camera_path[{i}].camera_to_world"
    if not isinstance(camera, dict) or "camera_to_world" not in camera:
        raise ctx.error("missing", field=field)
    raw = camera["camera_to_world"]
    flat = [v for row in raw for v in (row if isinstance(row, list) else [row])] if isinstance(raw, list) else None
    if flat is None or len(flat) not in (12, 16):
        raise ctx.error(f"expected 16 numbers (row-major 4x4) or a nested 4x4 / 3x4, got {_show(raw)}",
                        field=field)
    m = np.asarray([_number(ctx, v, None, field) for v in flat]).reshape(-1, 4)[:3]
    rotation = m[:, :3]
    if not np.allclose(rotation.T @ rotation, np.eye(3), atol=1e-3) or np.linalg.det(rotation) < 0:
        raise ctx.error("the 3x3 part is not a rotation (orthonormal, determinant +1)", field=field)
    return m
