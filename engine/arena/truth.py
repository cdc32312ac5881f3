"""The ground truth of an arena session, to score it with: ``worldpager arena truth LOG --out truth.mp4``.

Owns rendering and writing it. For every video frame the session wrote, at the pose the session's model
used for that frame (``engine.arena.session_camera``: the session's config, trajectory and walls, from
its log), the arena's exact render (``render_latents``) at the model's frame size, enlarged by pixel
repetition and rounded to uint8 RGB exactly as ``ArenaPipeline.decode`` does; written with the
session's writer settings (``VideoWriter``: the grid's fps, the model's encoder preset, the default
quality; one write per chunk of the session's grid). Beside it, a pose CSV: one row per video frame,
``frame, x, y, z, yaw, pitch`` (world units and degrees, ``engine.geometry.poses_euler``; frame i is
at i / fps seconds), a pose file that ``engine.io.trajectory.load_trajectory`` reads back.

A video frame between two latent frames: the session's decoder blends consecutive latent frames
linearly in time; its truth here is the exact render at that video frame's own pose, not a blend of
the renders at the latent frames' poses (so a score against it counts the blend as an error too).

Both outputs are written under temporary names beside them and renamed when complete: a failure
leaves nothing under ``--out`` or ``--poses``. The session's own MP4, log and config are refused as
outputs, and so is a path that is not a regular file (a FIFO, a socket, a device: ``engine.files.output_files``).
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import torch

from engine.arena.data import render_latents
from engine.arena.session_camera import SessionCamera, session_camera
from engine.arena.world import Arena
from engine.errors import OutputError
from engine.geometry import poses_euler
from engine.io.video import VideoWriter
from engine.files.output_files import check_output_file

POSE_COLUMNS = ("frame", "x", "y", "z", "yaw", "pitch")


def default_poses_path(out: Path) -> Path:
    return Path(out).with_suffix(".poses.csv")


def write_truth(log: Path, out: Path, poses: Path | None = None) -> dict:
    """Render the truth of the session that wrote ``log`` into ``out`` (MP4) and ``poses`` (CSV; default
    ``<out>.poses.csv``); returns what was written."""
    out = Path(out)
    poses = Path(poses) if poses is not None else default_poses_path(out)
    camera = session_camera(log)
    check_outputs(camera, out, poses)
    temporary = [p.with_name(f".{p.name}.truth") for p in (out, poses)]
    try:
        write_pose_csv(temporary[1], camera.poses)
        write_video(temporary[0], camera)
        os.replace(temporary[1], poses)
        os.replace(temporary[0], out)
    except BaseException:
        for path in temporary:
            path.unlink(missing_ok=True)
        raise
    height, width = camera.spec.frame_size
    return {"out": str(out), "poses": str(poses), "frames": camera.frames, "arena_seed": camera.arena_seed,
            "model": camera.spec.name, "log": str(log), "fps": camera.spec.grid.fps, "size": [height, width]}


def check_outputs(camera: SessionCamera, out: Path, poses: Path) -> None:
    """One-line errors for outputs that would overwrite the session's files, each other, or cannot be made."""
    own = {path.resolve(): kind for path, kind in reversed(camera.own_files)}
    for flag, path in (("--out", out), ("--poses", poses)):
        if path.resolve() in own:
            raise OutputError(f"{flag} {path} is the session's own {own[path.resolve()]}; "
                              "give the truth another name")
        if path.is_dir():
            raise OutputError(f"{flag} {path} is a directory; give a file name")
        if not path.parent.is_dir():
            raise OutputError(f"{flag} {path}: directory {path.parent} does not exist")
        check_output_file(path, flag)   # not a FIFO, a socket or a device (engine.files.output_files)
        check_output_file(path.with_name(f".{path.name}.truth"), f"{flag} {path}: its temporary file",
                          fix="remove it")
    if out.resolve() == poses.resolve():
        raise OutputError(f"--poses {poses} is the --out file; give the pose CSV another name")


def enlarge(frames: np.ndarray, upscale: int) -> np.ndarray:
    """uint8 RGB ``[T, H * upscale, W * upscale, 3]`` of frames ``[T, 3, H, W]`` in [-1, 1]: the
    session decoder's rounding and pixel repetition (``ArenaPipeline.decode``)."""
    video = ((torch.from_numpy(frames).clamp_(-1, 1) + 1) * 127.5).round_().to(torch.uint8)
    video = video.permute(0, 2, 3, 1).numpy()
    return np.repeat(np.repeat(video, upscale, axis=2), upscale, axis=1)


def render_frames(arena: Arena, poses: np.ndarray, camera: SessionCamera) -> np.ndarray:
    """The enlarged uint8 truth of ``poses`` [T, 7] in ``arena``."""
    e = poses_euler(poses)                                           # x, y, z, yaw, pitch, roll
    cam = np.stack([e[:, 0], e[:, 2], e[:, 3], e[:, 4]], axis=1)     # the renderer's x, z, yaw, pitch
    return enlarge(render_latents(arena, cam, camera.model), camera.model.upscale)


def write_video(path: Path, camera: SessionCamera) -> None:
    spec = camera.spec
    height, width = spec.frame_size
    arena = Arena.generate(camera.arena_seed)
    writer = VideoWriter(path, width, height, spec.grid.fps, preset=spec.encoder_preset)
    try:
        for start, stop in chunk_spans(camera.frames, spec.grid):
            writer.write(render_frames(arena, camera.poses[start:stop], camera))
    finally:
        writer.close()


def chunk_spans(frames: int, grid) -> list[tuple[int, int]]:
    """[start, stop) of each chunk's video frames on the session's grid, cut at ``frames``."""
    spans, start, chunk = [], 0, 0
    while start < frames:
        stop = min(start + grid.frames_of_chunk(chunk), frames)
        spans.append((start, stop))
        start, chunk = stop, chunk + 1
    return spans


def write_pose_csv(path: Path, poses: np.ndarray) -> None:
    """One row per video frame; every value written as the float it is (``repr`` round-trips)."""
    e = poses_euler(poses)
    try:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            rows = csv.writer(fh)
            rows.writerow(POSE_COLUMNS)
            for i, values in enumerate(e[:, :5].tolist()):
                rows.writerow([i, *(repr(v + 0.0) for v in values)])   # + 0.0: no "-0.0"
    except OSError as exc:
        raise OutputError(f"cannot write the pose CSV {path}: {exc.strerror or exc}") from None
