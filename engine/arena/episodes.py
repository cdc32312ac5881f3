"""Revisit-rich camera paths in an arena: spin, glance away and back, out and back, wander, loops.

Owns the episodes the arena model is trained and evaluated on. An episode is built the way a user's
trajectory is: per-video-frame MG2 actions (keys w/s/a/d, mouse pitch/yaw) integrated with the
project's kinematics and calibration (``engine.io.poses``: 1.5 degrees per frame per 0.1 of mouse, 0.1235
world units per frame per key), then walked through the arena with collisions (``Arena.clamp_path``).
The model sees one latent frame per ``temporal`` video frames: latent frame f is the camera at video
frame ``temporal * f`` (MG2's causal VAE grid: chunk 0 holds video frames 0..8, chunk c frames
12c-3..12c+8).

``revisit_frames`` marks the latent frames whose pose equals (within a tolerance) the pose of a latent
frame at least two chunks earlier: the frames where memory can help.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.arena.world import Arena
from engine.geometry import make_poses, quat_from_euler
from engine.io.poses import ORIGIN, Calibration, CameraState, integrate

KINDS = ("spin", "glance", "out_back", "wander", "loop")
TRAIN_MIX = (0.22, 0.28, 0.25, 0.10, 0.15)          # sampling weights of KINDS for training
EVAL_KINDS = ("glance", "spin", "out_back")


@dataclass
class Episode:
    """One camera path in one arena, at video-frame rate plus its latent-frame view."""

    arena_seed: int
    kind: str
    keyboard: np.ndarray        # [T, 4] w, s, a, d per video frame
    mouse: np.ndarray           # [T, 2] pitch, yaw per video frame
    poses: np.ndarray           # [T + 1, 7] camera poses after clamping (frame j before action j)
    clamped: int                # video frames whose step was blocked by a wall


def _segments_to_actions(segments: list[tuple[str, float, float, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(keys, mouse pitch, mouse yaw, frames) segments -> per-frame keyboard [T, 4] and mouse [T, 2]."""
    keyboard, mouse = [], []
    for keys, pitch, yaw, frames in segments:
        row = [float(k in keys) for k in "wsad"]
        keyboard += [row] * frames
        mouse += [[pitch, yaw]] * frames
    return np.asarray(keyboard, dtype=np.float32).reshape(-1, 4), np.asarray(mouse, dtype=np.float32).reshape(-1, 2)


def walk(arena: Arena, keyboard: np.ndarray, mouse: np.ndarray, cal: Calibration | None = None,
         start=ORIGIN) -> tuple[np.ndarray, int]:
    """Integrate per-frame actions from ``start`` and clamp the path to the arena: poses [T+1, 7]."""
    cal = cal or Calibration()
    forward = (keyboard[:, 0] - keyboard[:, 1]).astype(np.float64)
    right = (keyboard[:, 3] - keyboard[:, 2]).astype(np.float64)
    both = (forward != 0) & (right != 0)
    scale = np.where(both, cal.diagonal_scale, 1.0) * cal.distance_per_frame
    states = integrate(forward * scale, right * scale, cal.mouse_degrees(mouse[:, 1]),
                       cal.mouse_degrees(mouse[:, 0]), start, cal.pitch_limit)
    a = np.asarray(states, dtype=np.float64).reshape(-1, 6)
    x, z, clamped = arena.clamp_path(a[:, 0], a[:, 2])
    return make_poses(np.stack([x, a[:, 1], z], 1), quat_from_euler(a[:, 3], a[:, 4], a[:, 5])), int(clamped.sum())


def _rate(rng) -> float:
    return float(rng.choice([0.1, 0.1, 0.15, 0.2, 0.25, 0.3])) * float(rng.choice([-1, 1]))


def _spin(rng, frames):
    r = _rate(rng)
    still = int(rng.integers(0, 3)) * 4
    return [("", 0.0, 0.0, still), ("", 0.0, r, frames - still)]


def _glance(rng, frames):
    r = _rate(rng)
    away = int(rng.integers(10, 31)) * 4 if abs(r) <= 0.15 else int(rng.integers(6, 21)) * 4
    hold = int(rng.integers(0, 4)) * 4
    still = int(rng.integers(1, 4)) * 4
    segs = [("", 0.0, 0.0, still), ("", 0.0, r, away), ("", 0.0, 0.0, hold), ("", 0.0, -r, away)]
    return segs + [("", 0.0, 0.0, max(0, frames - sum(s[3] for s in segs)))]


def _out_back(rng, frames):
    r = 0.3 * float(rng.choice([-1, 1]))                      # 180 degrees in 40 frames
    out = int(rng.integers(3, 9)) * 4
    still = int(rng.integers(1, 3)) * 4
    segs = [("", 0.0, 0.0, still), ("w", 0.0, 0.0, out), ("", 0.0, r, 40), ("w", 0.0, 0.0, out),
            ("", 0.0, r, 40)]
    return segs + [("", 0.0, 0.0, max(0, frames - sum(s[3] for s in segs)))]


def _wander(rng, frames):
    segs, total = [], 0
    while total < frames:
        n = int(rng.integers(2, 8)) * 4
        keys = str(rng.choice(["", "w", "w", "w", "s", "a", "d", "wa", "wd"]))
        yaw = _rate(rng) if rng.random() < 0.5 else 0.0
        pitch = float(rng.choice([-0.1, 0.1])) if rng.random() < 0.15 else 0.0
        segs.append((keys, pitch, yaw, n))
        total += n
    return segs


def _loop(rng, frames):
    r = _rate(rng)
    return [("w", 0.0, r, frames)]


_BUILDERS = {"spin": _spin, "glance": _glance, "out_back": _out_back, "wander": _wander, "loop": _loop}


def make_episode(arena_seed: int, kind: str, video_frames: int, rng: np.random.Generator,
                 arena: Arena | None = None, start_yaw: float | None = None) -> Episode:
    """An episode of ``kind`` with ``video_frames`` actions (poses has one more frame)."""
    arena = arena or Arena.generate(arena_seed)
    segs = _BUILDERS[kind](rng, video_frames)
    keyboard, mouse = _segments_to_actions(segs)
    keyboard, mouse = keyboard[:video_frames], mouse[:video_frames]
    if len(keyboard) < video_frames:
        pad = video_frames - len(keyboard)
        keyboard = np.concatenate([keyboard, np.zeros((pad, 4), np.float32)])
        mouse = np.concatenate([mouse, np.zeros((pad, 2), np.float32)])
    yaw0 = float(rng.uniform(0, 360)) if start_yaw is None else start_yaw
    start = CameraState(0.0, 0.0, 0.0, yaw0, 0.0, 0.0)
    poses, clamped = walk(arena, keyboard, mouse, start=start)
    return Episode(arena_seed, kind, keyboard, mouse, poses, clamped)


def revisit_frames(yaw: np.ndarray, pitch: np.ndarray, xz: np.ndarray, frames_per_chunk: int = 3,
                   min_gap_chunks: int = 2, pos_tol: float = 0.05, angle_tol: float = 1.0) -> np.ndarray:
    """Latent frames whose pose matches one at least ``min_gap_chunks`` chunks earlier (bool ``[F]``)."""
    n = len(yaw)
    out = np.zeros(n, dtype=bool)
    chunk = np.arange(n) // frames_per_chunk
    for f in range(n):
        earlier = chunk <= chunk[f] - min_gap_chunks
        if not earlier.any():
            continue
        dyaw = np.abs((yaw[earlier] - yaw[f] + 180) % 360 - 180)
        near = (dyaw < angle_tol) & (np.abs(pitch[earlier] - pitch[f]) < angle_tol) & \
               (np.linalg.norm(xz[earlier] - xz[f], axis=1) < pos_tol)
        out[f] = bool(near.any())
    return out
