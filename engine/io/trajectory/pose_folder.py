"""LingBot-World's own trajectory format: a folder of ``poses.npy``, ``intrinsics.npy`` and, for the
``act`` control, ``action.npy`` — read (as a trajectory) and written (from any trajectory).

Owns the folder's layout and its checks, in the official code's conventions:

* ``poses.npy`` — [N, 4, 4] camera-to-world matrices, OpenCV camera axes (x right, y down, z forward),
  one per video frame (16 fps); the rotation must be orthonormal with determinant +1, the last row
  (0, 0, 0, 1);
* ``intrinsics.npy`` — [N, 4] (fx, fy, cx, cy) in pixels of a 480x832 (H x W) frame, one row per pose
  (the official code uses row 0 and scales it to the model's pixel grid);
* ``action.npy`` (optional) — [N, 4] key states W, A, S, D (0 or 1) per video frame.

Every value is checked, not only the shapes: finite; positions within +-``MAX_COORDINATE`` world units;
focal lengths between ``FOCAL_LEAST`` pixels and ``FOCAL_MOST`` times the frame's larger side, the principal
point inside the 480x832 frame; key states 0 or 1. A value outside is one line naming the file, the
row (and column) and the value.

Each file is read by the strict ``.npy`` reader (``engine.io.npy_file``; ``EXPECT`` says what it takes:
float32/64 poses and intrinsics, whole-number, bool or float32/64 keys): its header is checked against
the file's size before anything is allocated, and nothing is unpickled. Reading: the engine's camera
axes are OpenGL (y up, z backward), so camera y and z are flipped; the poses are then tracked into
actions like every pose file (``engine.io.trajectory.tracker``), and the folder's intrinsics row 0 and
key states ride along on the ``Trajectory``. Writing: ``export_pose_folder``
turns a ``Trajectory``'s poses back into OpenCV matrices, its universal keys into ``action.npy`` and
the retrieval's 90-degree field of view into ``intrinsics.npy`` (when none are given).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.geometry import matrix_to_quat, quat_to_matrix
from engine.io.npy_file import NpyExpect, read_npy
from engine.io.poses import FPS, Calibration
from engine.io.trajectory.build import _Actions
from engine.io.trajectory.fields import MAX_COORDINATE, _Context
from engine.io.trajectory.tracker import _pose_targets, _track

POSES, INTRINSICS, ACTIONS = "poses.npy", "intrinsics.npy", "action.npy"
INTRINSICS_FRAME = (480, 832)                       # (H, W) the official intrinsics describe
OPENGL_TO_OPENCV = np.diag([1.0, -1.0, -1.0])       # camera y and z flipped (its own inverse)
UNIVERSAL_TO_WASD = [0, 2, 1, 3]                    # (forward, back, left, right) -> (W, A, S, D)
RIGID_TOLERANCE = 1e-3
FOCAL_LEAST = 1.0                                   # pixels: a field of view under ~179.7 degrees
FOCAL_MOST = 100.0                                  # times the frame's larger side: a field of view over ~0.6 degrees
FLAG = "--trajectory"                               # the only option that takes a pose folder
FLOATS = ("f4", "f8")
KEYS = ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1") + FLOATS
EXPECT = {POSES: NpyExpect((None, 4, 4), FLOATS, "camera-to-world matrices"),
          INTRINSICS: NpyExpect((None, 4), FLOATS, "rows of fx, fy, cx, cy"),
          ACTIONS: NpyExpect((None, 4), KEYS, "key states W, A, S, D")}


def is_pose_folder(path: Path) -> bool:
    return path.is_dir()


def default_intrinsics(hfov_deg: float = 90.0) -> np.ndarray:
    """(fx, fy, cx, cy) of square pixels with ``hfov_deg`` horizontal field of view on 480x832."""
    height, width = INTRINSICS_FRAME
    fx = (width / 2) / np.tan(np.radians(hfov_deg) / 2)
    return np.array([fx, fx, width / 2, height / 2], dtype=np.float32)


def _array(ctx: _Context, folder: Path, name: str) -> np.ndarray:
    """``name`` in ``folder`` through the strict reader (``engine.io.npy_file``), as finite float64."""
    path = folder / name
    if not path.exists():
        raise ctx.error(f"{name} is missing (a directory is read as a LingBot pose folder)")
    value = read_npy(path, EXPECT[name], FLAG).astype(np.float64)
    if not np.isfinite(value).all():
        bad = np.argwhere(~np.isfinite(value))[0]
        raise ctx.error(f"{name}: not a finite number at index {tuple(int(i) for i in bad)}")
    return value


def read_pose_folder(ctx: _Context, folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Checked (poses [N, 4, 4] OpenCV, intrinsics [N, 4], actions [N, 4] | None), float64."""
    poses = _array(ctx, folder, POSES)
    if len(poses) == 0:
        raise ctx.error(f"{POSES}: no poses (shape [0, 4, 4]); expected [N, 4, 4] camera-to-world matrices, N >= 1")
    intrinsics = _array(ctx, folder, INTRINSICS)
    if len(intrinsics) != len(poses):
        raise ctx.error(f"{INTRINSICS} has {len(intrinsics)} rows but {POSES} has {len(poses)} poses")
    if (intrinsics[:, :2] <= 0).any():
        row = int(np.argwhere(intrinsics[:, :2] <= 0)[0, 0])
        raise ctx.error(f"{INTRINSICS}: focal lengths must be positive, row {row} has {intrinsics[row, :2].tolist()}")
    _check_intrinsics(ctx, intrinsics)
    _check_rigid(ctx, poses)
    _check_positions(ctx, poses)
    actions = None
    if (folder / ACTIONS).exists():
        actions = _array(ctx, folder, ACTIONS)
        if len(actions) != len(poses):
            raise ctx.error(f"{ACTIONS} has {len(actions)} rows but {POSES} has {len(poses)} poses")
        _check_keys(ctx, actions)
    return poses, intrinsics, actions


def _intrinsics_ranges() -> tuple[tuple[str, float, float], ...]:
    """(name, least, most) of each column of ``intrinsics.npy``, in pixels of the frame it describes."""
    height, width = INTRINSICS_FRAME
    most = FOCAL_MOST * max(height, width)
    return (("fx", FOCAL_LEAST, most), ("fy", FOCAL_LEAST, most), ("cx", 0.0, float(width)), ("cy", 0.0, float(height)))


def _check_intrinsics(ctx: _Context, intrinsics: np.ndarray) -> None:
    """Focal lengths of a field of view between ~0.6 and ~179.7 degrees, the principal point in the frame."""
    for column, (name, least, most) in enumerate(_intrinsics_ranges()):
        bad = np.flatnonzero((intrinsics[:, column] < least) | (intrinsics[:, column] > most))
        if len(bad):
            row = int(bad[0])
            raise ctx.error(f"{INTRINSICS}: row {row}: {name} {intrinsics[row, column]:g} is outside "
                            f"[{least:g}, {most:g}] (pixels of the {INTRINSICS_FRAME[0]}x{INTRINSICS_FRAME[1]} "
                            "frame the file describes)")


def _check_positions(ctx: _Context, poses: np.ndarray) -> None:
    """Camera positions within +-MAX_COORDINATE world units (as every pose file's)."""
    far = np.argwhere(np.abs(poses[:, :3, 3]) > MAX_COORDINATE)
    if len(far):
        i, axis = (int(v) for v in far[0])
        raise ctx.error(f"{POSES}: pose {i}: position {'xyz'[axis]} {poses[i, axis, 3]:g} is outside "
                        f"+-{MAX_COORDINATE:g} world units")


def _check_keys(ctx: _Context, actions: np.ndarray) -> None:
    """Key states are 0 (up) or 1 (down): the model's action encoding takes nothing else."""
    bad = np.argwhere((actions != 0) & (actions != 1))
    if len(bad):
        row, column = (int(v) for v in bad[0])
        raise ctx.error(f"{ACTIONS}: row {row}, key {'WASD'[column]}: {actions[row, column]:g} is not a key state "
                        "(0 or 1)")


def _check_rigid(ctx: _Context, poses: np.ndarray) -> None:
    rot = poses[:, :3, :3]
    orthonormal = np.abs(rot.transpose(0, 2, 1) @ rot - np.eye(3)).max(axis=(1, 2)) <= RIGID_TOLERANCE
    proper = np.linalg.det(rot) > 0
    bottom = np.abs(poses[:, 3] - np.array([0.0, 0.0, 0.0, 1.0])).max(axis=1) <= RIGID_TOLERANCE
    bad = np.flatnonzero(~(orthonormal & proper & bottom))
    if len(bad):
        i = int(bad[0])
        why = ("last row is not 0 0 0 1" if not bottom[i] else
               "the 3x3 part is not a rotation (orthonormal, determinant +1)")
        raise ctx.error(f"{POSES}: pose {i} is not rigid: {why}")


def engine_poses(c2w_opencv: np.ndarray) -> np.ndarray:
    """OpenCV camera-to-world [N, 4, 4] -> engine poses [N, 7] (x, y, z, qw, qx, qy, qz; OpenGL axes)."""
    rot = c2w_opencv[:, :3, :3] @ OPENGL_TO_OPENCV
    return np.concatenate([c2w_opencv[:, :3, 3], matrix_to_quat(rot)], axis=1)


def opencv_matrices(poses: np.ndarray) -> np.ndarray:
    """Engine poses [N, 7] -> OpenCV camera-to-world [N, 4, 4] float64."""
    out = np.zeros((len(poses), 4, 4))
    out[:, :3, :3] = quat_to_matrix(poses[:, 3:7]) @ OPENGL_TO_OPENCV
    out[:, :3, 3] = poses[:, :3]
    out[:, 3, 3] = 1.0
    return out


def load_pose_folder(ctx: _Context, folder: Path, mode: str, cal: Calibration, frames: int):
    """The folder's poses tracked into ``mode`` actions, with its intrinsics and key states."""
    poses, intrinsics, actions = read_pose_folder(ctx, folder)
    engine = engine_poses(poses)
    times = np.arange(len(poses)) / FPS
    targets, file_frames = _pose_targets(ctx, times, engine[:, :3], engine[:, 3:], frames, None, POSES)
    acts: _Actions = _track(ctx, targets, mode, cal, "lingbot pose folder", file_frames)
    return acts, intrinsics[0].astype(np.float32), actions


def export_pose_folder(folder: Path, poses: np.ndarray, keyboard: np.ndarray | None,
                       intrinsics: np.ndarray | None = None) -> list[Path]:
    """Write ``poses.npy`` (float32 OpenCV c2w), ``intrinsics.npy`` (every row ``intrinsics``, default
    the 90-degree field of view) and, when ``keyboard`` holds universal keys [N, 4], ``action.npy``
    (int32 W, A, S, D). Returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    k = default_intrinsics() if intrinsics is None else np.asarray(intrinsics, dtype=np.float32)
    written = {POSES: opencv_matrices(poses).astype(np.float32),
               INTRINSICS: np.repeat(k[None], len(poses), axis=0).astype(np.float32)}
    if keyboard is not None:
        written[ACTIONS] = (np.asarray(keyboard)[:, UNIVERSAL_TO_WASD] > 0.5).astype(np.int32)
    for name, value in written.items():
        np.save(folder / name, value)
    return [folder / name for name in written]
