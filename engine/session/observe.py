"""Sessions that start from what was observed (``--observe``): the camera path, the observed chunks,
and how their frames are marked in the MP4.

Owns, for a session config and its model's ``ModelSpec``:

* **The path.** ``session_path`` gives the session's ``Trajectory`` and how many of its first chunks
  are observed. Without ``--observe`` it is the ``--trajectory`` (or the model's default) for the
  session's frames, as always. With ``--observe CLIP``, the clip's own camera path covers its whole
  chunks (a clip ends at the last chunk boundary inside it), and the ``--trajectory``'s actions follow
  from where the clip's camera stopped: one trajectory of actions whose poses are the clip's, then the
  exploration's (``engine.io.trajectory.splice`` joins paths the same way for a fork).
* **The look around.** Without ``--observe``, a model that renders its world (the arena model) first
  observes a look around at the path's start (``engine.session.look_around``: ``--look-around N``
  chunks of a full turn on the spot, 0 for none), then follows the ``--trajectory`` (or the model's
  default) from there, joined the same way.
* **What may be observed.** ``ModelSpec.observes`` names the kinds a model takes: ``"render"`` (the
  arena model: a trajectory file through its world, whose observed frames are the world's rendered
  truth along that path) and ``"video"`` (MG2: a recorded video, ``VIDEO_SUFFIXES``, at the model's
  frame size, never resized, whose camera path is the pose CSV ``observe_poses`` or, by default,
  ``<clip>.poses.csv`` beside it; its whole chunks are those both the video and the pose file cover,
  and its frame 0 is the session's start image, so ``--image`` is refused). A model that takes none,
  a kind it does not take, a missing file, a video of another size or one PyAV cannot decode, a clip
  shorter than one chunk, or one that leaves no chunk to generate are one-line errors.
* **The mark.** ``mark_observed`` draws a small square in the top-left corner of an observed chunk's
  frames, so a viewer sees which part of the video was given and which was generated; the model's
  output (what the memory stores and the quality benchmark scores) is not marked.

The model takes an observed chunk through ``WorldModel.observe`` (its clean pass only), which leaves
the chunk's KV in the context exactly as a generated chunk with the same latents would; the session
then stores, tiers, retrieves and prefetches it like any other chunk.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from engine.config import SessionConfig
from engine.errors import InputError
from engine.files.input_files import check_input_file
from engine.io.actions import ActionTrack
from engine.io.poses import ORIGIN, CameraState, state_from_pose
from engine.io.trajectory import (Trajectory, TrackingError, load_trajectory, packaged_trajectory,
                                  trajectory_from_actions)
from engine.io.video_clip import VIDEO_SUFFIXES, is_video, probe_clip
from engine.session.look_around import look_around_chunks, look_around_text, look_around_track

MARK_RGB = (255, 64, 32)        # the observed mark's colour


@dataclass(frozen=True)
class SessionPath:
    """The session's camera path and how much of it was observed."""

    trajectory: Trajectory
    observed_chunks: int = 0         # chunks [0, n) are taken from what was observed
    observed: str | None = None      # one line: what was observed (the log header's)
    followed: Trajectory | None = None   # the --trajectory (or default) as loaded, after what was observed
    observed_frames: int = 0         # the video frames observed (the followed path starts there)


@dataclass(frozen=True)
class Observed:
    """What a session observes first: its frames' path (actions and poses), in whole chunks."""

    trajectory: Trajectory
    chunks: int
    frames: int                      # video frames: the path that follows starts at this frame
    what: str                        # one line (the log header's ``observed.source``)
    source: str                      # a short name (the joined trajectory's source)


def observed_prefix(cfg: SessionConfig, spec, start: CameraState = ORIGIN) -> Observed | None:
    """The ``--observe`` clip's whole chunks, else the look around from ``start`` (the path's start),
    else None: what the session ``cfg`` observes before anything is generated (live play's too)."""
    if cfg.observe is None:
        looking = look_around_chunks(cfg, spec)
        if looking == 0:
            return None
        frames = spec.grid.frames_total(looking)
        seen = trajectory_from_actions(look_around_track(frames, spec.action_mode, cfg.calibration),
                                       spec.action_mode, cfg.calibration, source="a look around", start=start)
        return Observed(seen, looking, frames, look_around_text(looking, frames), "a look around")
    clip = Path(cfg.observe)
    camera, chunks, frames = _observed_chunks(cfg, spec, clip)
    what = (f"{clip}: {chunks} chunks ({frames} video frames) of " +
            ("the world's rendered truth along its path" if camera == clip else
             f"a recorded video along the camera path {camera}"))
    return Observed(_load(cfg, spec, camera, frames, repeat="loop"), chunks, frames, what, str(clip))


def session_path(cfg: SessionConfig, spec) -> SessionPath:
    """The trajectory of the session ``cfg`` with the model ``spec`` (see the module docstring)."""
    frames = spec.grid.frames_total(cfg.chunks)
    exploring = cfg.trajectory or packaged_trajectory(spec.default_trajectory)
    looking = look_around_chunks(cfg, spec)
    if cfg.observe is None and looking == 0:
        whole = _load(cfg, spec, exploring, frames)
        return SessionPath(whole, followed=whole)
    if cfg.observe is None:   # the look around starts where the path does
        after = _load(cfg, spec, exploring, frames - spec.grid.frames_total(looking))
        prefix = observed_prefix(cfg, spec, state_from_pose(after.poses[0]))
    else:
        prefix = observed_prefix(cfg, spec)
        after = _load(cfg, spec, exploring, frames - prefix.frames)
    seen, clip_frames = prefix.trajectory, prefix.frames
    keyboard = torch.cat([seen.actions.keyboard, after.actions.keyboard])
    mouse = None if seen.actions.mouse is None else torch.cat([seen.actions.mouse, after.actions.mouse])
    joined = trajectory_from_actions(ActionTrack(keyboard, mouse), spec.action_mode, cfg.calibration,
                                     source=f"{prefix.source} observed for frames [0, {clip_frames}), then {after.source}",
                                     start=state_from_pose(seen.poses[0]))
    joined = replace(joined, format=f"observed {seen.format} + {after.format}",
                     tracking=joined_tracking(seen.tracking, after.tracking, clip_frames))
    return SessionPath(joined, prefix.chunks, prefix.what, after, clip_frames)


def observe_poses_path(cfg: SessionConfig) -> Path:
    """Where a video clip's camera path is read: ``observe_poses``, else ``<clip>.poses.csv`` beside it."""
    clip = Path(cfg.observe)
    return Path(cfg.observe_poses) if cfg.observe_poses is not None else clip.with_name(clip.stem + ".poses.csv")


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


def _observed_chunks(cfg: SessionConfig, spec, clip: Path) -> tuple[Path, int, int]:
    """(the clip's camera path file, chunks, video frames) the session takes as observed; one-line
    errors otherwise."""
    flag = f"--observe {clip}"
    if not spec.observes:
        raise InputError(f"{flag}: the {spec.name} model cannot start from an observed clip (the arena "
                         "model can: --observe a trajectory file through its world; MG2: a recorded video)")
    if not os.path.lexists(clip):
        raise InputError(f"{flag}: file not found")
    check_input_file(clip, "--observe", fix="name a video or a trajectory file as --observe")   # a FIFO: not waited on
    if is_video(clip) and "video" not in spec.observes:
        raise InputError(f"{flag}: the {spec.name} model observes its own world along a camera path "
                         "(a trajectory file: YAML, pose CSV, action CSV or nerfstudio JSON), not a video")
    if not is_video(clip) and "render" not in spec.observes:
        raise InputError(f"{flag}: the {spec.name} model cannot start from an observed clip that is not a "
                         f"video: give a recorded video ({', '.join(VIDEO_SUFFIXES)}) with its camera path "
                         f"beside it ({clip.stem}.poses.csv) or in --observe-poses")
    if cfg.observe_poses is not None and not is_video(clip):
        raise InputError(f"--observe-poses {cfg.observe_poses}: only a video clip takes a separate camera "
                         f"path; {clip} is a trajectory file")
    camera, frames = (_video_clip(cfg, spec, clip) if is_video(clip)
                      else (clip, _load(cfg, spec, clip, 1).source_frames))
    chunks = 0
    while spec.grid.frames_total(chunks + 1) <= frames:
        chunks += 1
    if chunks == 0:
        raise InputError(f"{flag}: the clip is {frames} video frames, shorter than one chunk "
                         f"({spec.grid.frames_total(1)} frames)")
    if chunks >= cfg.chunks:
        raise InputError(f"{flag}: the clip covers {chunks} chunks, the whole session of {cfg.chunks}; "
                         f"give a longer session (--chunks above {chunks}) to generate after it")
    return camera, chunks, spec.grid.frames_total(chunks)


def _video_clip(cfg: SessionConfig, spec, clip: Path) -> tuple[Path, int]:
    """A video clip's camera path file and the frames both it and the video cover; one-line errors."""
    flag = f"--observe {clip}"
    if cfg.image is not None:
        raise InputError(f"--image {cfg.image} with {flag}: an observed video's frame 0 is the start image; "
                         "give one or the other")
    info = probe_clip(clip)
    if (info.height, info.width) != tuple(spec.frame_size):
        height, width = spec.frame_size
        raise InputError(f"{flag}: the video is {info.width}x{info.height}, the {spec.name} model's frames "
                         f"are {width}x{height} (give a video of that size; it is not resized)")
    camera = observe_poses_path(cfg)
    if os.path.lexists(camera):   # a FIFO or a directory there: one line saying what it is
        check_input_file(camera, "its camera path", fix="give a pose CSV (frame,x,y,z,yaw,pitch)")
    else:
        where = "--observe-poses" if cfg.observe_poses is not None else "beside the video"
        raise InputError(f"{flag}: its camera path {camera} ({where}) was not found: give a pose CSV "
                         "(frame,x,y,z,yaw,pitch) there or with --observe-poses")
    return camera, min(info.frames, _load(cfg, spec, camera, 1).source_frames)


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
