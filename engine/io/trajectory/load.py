"""``load_trajectory``: check the arguments, read the file's text, pick its format (by extension, else
sniffed from the first content line), hand it to that format's module and build the ``Trajectory``.

A directory is LingBot's pose folder (``pose_folder``). Owns the file-level errors (missing, not a regular file — a FIFO, device, /proc file: refused
by ``engine.files.input_files`` before it is opened —, larger than ``MAX_TRAJECTORY_BYTES``, not UTF-8, empty, unknown format) and the argument
checks (``ConfigError``); everything inside a file is the format modules'.
"""
from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Union

import numpy as np

from engine.errors import ConfigError
from engine.files.input_files import check_input_dir, read_input_bytes
from engine.io.poses import Calibration
from engine.io.trajectory.build import MODES, REPEATS, Trajectory, _Actions, _build
from engine.io.trajectory.csv_table import _load_csv
from engine.io.trajectory.fields import _content_lines, _Context
from engine.io.trajectory.nerfstudio import _load_nerfstudio
from engine.io.trajectory.pose_folder import is_pose_folder, load_pose_folder
from engine.io.trajectory.yaml_file import _load_yaml

PathLike = Union[str, os.PathLike]
MAX_TRAJECTORY_BYTES = 256 << 20   # a pose a line: millions of frames
_FIX = "name a .yaml, .csv or .json trajectory file, or a pose folder"

_CSV_NAME = r'(?:[A-Za-z_]\w*|"[A-Za-z_]\w*")'           # a header name, bare or quoted
_CSV_HEADER = re.compile(rf"{_CSV_NAME}(\s*,\s*{_CSV_NAME})+")


def load_trajectory(path: PathLike, mode: str, frames: int, repeat: str = "loop",
                    calibration: Any = None, nerfstudio_up: str = "z") -> Trajectory:
    """Read a trajectory file and return exactly ``frames`` frames of ``mode`` actions and poses.

    ``calibration`` is a ``Calibration`` (or any dataclass sharing its field names; None = defaults).
    Raises InputError for anything wrong with the file, ConfigError for bad arguments.
    """
    _check_arguments(mode, frames, repeat, nerfstudio_up)
    cal = Calibration.coerce(calibration)
    ctx = _Context(str(path))
    if is_pose_folder(Path(path)):
        check_input_dir(path, "trajectory", fix=_FIX)   # not a folder under /proc or /sys
        acts, intrinsics, keys = load_pose_folder(ctx, Path(path), mode, cal, frames)
        trajectory = _build(acts, mode, frames, repeat, cal, source=str(path))
        return replace(trajectory, intrinsics=intrinsics,
                       key_states=None if keys is None else extend_rows(keys, frames, repeat))
    text = _read_text(ctx, Path(path))
    kind = _detect_format(ctx, Path(path), text)
    loader: Callable[..., _Actions] = {"yaml": _load_yaml, "csv": _load_csv, "json": _load_nerfstudio}[kind]
    acts = loader(ctx, text, mode, cal, frames=frames, nerfstudio_up=nerfstudio_up)
    return _build(acts, mode, frames, repeat, cal, source=str(path))


def extend_rows(rows: np.ndarray, frames: int, repeat: str) -> np.ndarray:
    """W, A, S, D key rows [N, 4] extended (loop, or ping-pong with W<->S and A<->D) or cut to ``frames``."""
    if len(rows) < frames and repeat == "pingpong":
        rows = np.concatenate([rows, rows[::-1][:, [2, 3, 0, 1]]])
    return rows[np.arange(frames) % len(rows)].astype(np.float32)


def _check_arguments(mode: str, frames: int, repeat: str, up: str) -> None:
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise ConfigError(f"frames must be a positive integer, got {frames!r}")
    if repeat not in REPEATS:
        raise ConfigError(f"repeat must be loop or pingpong, got {repeat!r}")
    if up not in ("y", "z"):
        raise ConfigError(f"nerfstudio_up must be y or z, got {up!r}")


def _read_text(ctx: _Context, path: Path) -> str:
    if not os.path.lexists(path):
        raise ctx.error("trajectory file not found")
    # A FIFO, socket, device or /proc file is refused before it is opened (never a wait for a writer).
    data = read_input_bytes(path, "trajectory", MAX_TRAJECTORY_BYTES, fix=_FIX)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ctx.error(f"not a UTF-8 text file (byte {exc.start})") from None
    if not text.strip():
        raise ctx.error("file is empty")
    return text


def _detect_format(ctx: _Context, path: Path, text: str) -> str:
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if suffix in (".csv", ".json"):
        return suffix[1:]
    first = next((line for _, line in _content_lines(text)), "")
    if first.startswith("{"):
        return "json"
    if _CSV_HEADER.fullmatch(first):
        return "csv"
    if re.match(r"(keyframes|segments|start)\s*:", first):
        return "yaml"
    raise ctx.error("unknown trajectory format (expected .yaml, a pose or action .csv, or a nerfstudio "
                    "camera_path .json)")
