"""Sessions that start from what was observed (``--observe``): the camera path, the observed chunks,
and how their frames are marked in the MP4.

Owns, for a session config and its model's ``ModelSpec``:

* **The path.** ``session_path`` gives the session's ``Trajectory`` and how many of its first chunks
  are observed. Without ``--observe`` it is the ``--trajectory`` (or the model's default) for the
  session's frames, as always. With ``--observe CLIP``, the clip's own camera path covers its whole
  chunks (a clip ends at the last chunk boundary inside it), and the ``--trajectory``'s actions follow
  from where the clip's camera stopped: one trajectory of actions whose poses are the clip's, then the
  exploration's (``engine.io.trajectory.splice`` joins paths the same way for a fork).
* **What may be observed.** ``ModelSpec.observes`` names the kinds a model takes: ``"render"`` (the
  arena model: a trajectory file through its world, whose observed frames are the world's rendered
  truth along that path). A model that takes none, a video file where a path is wanted, a missing file,
  a clip shorter than one chunk, or one that leaves no chunk to generate are one-line errors.
* **The mark.** ``mark_observed`` draws a small square in the top-left corner of an observed chunk's
  frames, so a viewer sees which part of the video was given and which was generated; the model's
  output (what the memory stores and the quality benchmark scores) is not marked.

The model takes an observed chunk through ``WorldModel.observe`` (its clean pass only), which leaves
the chunk's KV in the context exactly as a generated chunk with the same latents would; the session
then stores, tiers, retrieves and prefetches it like any other chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from engine.config import SessionConfig
from engine.errors import InputError
from engine.io.actions import ActionTrack
from engine.io.poses import state_from_pose
from engine.io.trajectory import (Trajectory, TrackingError, load_trajectory, packaged_trajectory,
                                  trajectory_from_actions)

VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".webm", ".avi", ".m4v")
MARK_RGB = (255, 64, 32)        # the observed mark's colour


@dataclass(frozen=True)
class SessionPath:
    """The session's camera path and how much of it was observed."""

    trajectory: Trajectory
    observed_chunks: int = 0         # chunks [0, n) are taken from what was observed
    observed: str | None = None      # one line: what was observed (the log header's)


def session_path(cfg: SessionConfig, spec) -> SessionPath:
    """The trajectory of the session ``cfg`` with the model ``spec`` (see the module docstring)."""
    frames = spec.grid.frames_total(cfg.chunks)
    exploring = cfg.trajectory or packaged_trajectory(spec.default_trajectory)
    if cfg.observe is None:
        return SessionPath(_load(cfg, spec, exploring, frames))
    clip = Path(cfg.observe)
    observed_chunks, clip_frames = _observed_chunks(cfg, spec, clip)
    seen = _load(cfg, spec, clip, clip_frames, repeat="loop")
    after = _load(cfg, spec, exploring, frames - clip_frames)
    keyboard = torch.cat([seen.actions.keyboard, after.actions.keyboard])
    mouse = None if seen.actions.mouse is None else torch.cat([seen.actions.mouse, after.actions.mouse])
    joined = trajectory_from_actions(ActionTrack(keyboard, mouse), spec.action_mode, cfg.calibration,
                                     source=f"{clip} observed for frames [0, {clip_frames}), then {after.source}",
                                     start=state_from_pose(seen.poses[0]))
    joined = replace(joined, format=f"observed {seen.format} + {after.format}",
                     tracking=joined_tracking(seen.tracking, after.tracking, clip_frames))
    what = (f"{clip}: {observed_chunks} chunks ({clip_frames} video frames) of the world's rendered truth "
            f"along its path")
    return SessionPath(joined, observed_chunks, what)


def joined_tracking(first: TrackingError, second: TrackingError, offset: int) -> TrackingError:
    """How well two files played one after the other were followed: each error the worse of the two,
    at its frame of the joined path (``second``'s frames come ``offset`` video frames later)."""
    values, frames = {}, {}
    for name in ("position", "yaw_deg", "pitch_deg"):
        key = name.removesuffix("_deg") + "_frame"
        a, b = getattr(first, name), getattr(second, name)
        later = getattr(second, key)
        values[name], frames[key] = (b, None if later is None else later + offset) if b > a else \
            (a, getattr(first, key))
    return replace(first, **values, **frames, turn_deg=max(first.turn_deg, second.turn_deg),
                   step=max(first.step, second.step))


def _load(cfg: SessionConfig, spec, path: Path, frames: int, repeat: str | None = None) -> Trajectory:
    return load_trajectory(path, spec.action_mode, frames=frames, repeat=repeat or cfg.repeat,
                           calibration=cfg.calibration)


def _observed_chunks(cfg: SessionConfig, spec, clip: Path) -> tuple[int, int]:
    """(chunks, video frames) of ``clip`` the session takes as observed; one-line errors otherwise."""
    flag = f"--observe {clip}"
    if "render" not in spec.observes:
        raise InputError(f"{flag}: the {spec.name} model cannot start from an observed clip (the arena "
                         "model can: --observe a trajectory file through its world)")
    if not clip.is_file():
        raise InputError(f"{flag}: {'is a directory' if clip.is_dir() else 'file not found'}")
    if clip.suffix.lower() in VIDEO_SUFFIXES:
        raise InputError(f"{flag}: the {spec.name} model observes its own world along a camera path "
                         "(a trajectory file: YAML, pose CSV, action CSV or nerfstudio JSON), not a video")
    source_frames = _load(cfg, spec, clip, 1).source_frames
    chunks = 0
    while spec.grid.frames_total(chunks + 1) <= source_frames:
        chunks += 1
    if chunks == 0:
        raise InputError(f"{flag}: the clip is {source_frames} video frames, shorter than one chunk "
                         f"({spec.grid.frames_total(1)} frames)")
    if chunks >= cfg.chunks:
        raise InputError(f"{flag}: the clip covers {chunks} chunks, the whole session of {cfg.chunks}; "
                         f"give a longer session (--chunks above {chunks}) to generate after it")
    return chunks, spec.grid.frames_total(chunks)


def mark_observed(frames: torch.Tensor) -> torch.Tensor:
    """``frames`` with the observed mark (a square of ``MARK_RGB`` in the top-left corner, a twelfth
    of the shorter side, inset by as much again as a quarter of it): uint8 ``[T, H, W, 3]`` or float
    ``[T, 3, H, W]`` in [-1, 1], as ``WorldModel.decode`` returns them."""
    channels_last = frames.dtype == torch.uint8
    h, w = (frames.shape[1], frames.shape[2]) if channels_last else (frames.shape[2], frames.shape[3])
    side = max(2, min(h, w) // 12)
    inset = max(1, side // 4)
    rows, cols = slice(inset, inset + side), slice(inset, inset + side)
    out = frames.clone()
    rgb = torch.tensor(MARK_RGB, dtype=torch.float32)
    if channels_last:
        out[:, rows, cols, :] = rgb.to(torch.uint8)
    else:
        out[:, :, rows, cols] = (rgb / 127.5 - 1).to(frames.dtype)[None, :, None, None]
    return out


def mark_share(frames: np.ndarray) -> float:
    """The share of a decoded frame's [H, W, 3] mark square that is near ``MARK_RGB`` (a reader's check)."""
    h, w = frames.shape[:2]
    side = max(2, min(h, w) // 12)
    inset = max(1, side // 4)
    patch = frames[inset:inset + side, inset:inset + side].astype(np.int32)
    return float((np.abs(patch - np.array(MARK_RGB)).max(axis=-1) < 48).mean())
