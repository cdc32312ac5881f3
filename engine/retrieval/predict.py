"""The pose a future chunk will have, from the poses known so far (numpy only).

Contract: ``PosePredictor.predict(known_poses, chunk, grid)`` returns the ``ChunkPose`` key of chunk
``chunk + lookahead``, using only the poses of video frames up to the end of ``chunk`` (the chunk being
computed now). Extra rows in ``known_poses`` are cut off before use, so a predictor can never peek at
the future even when a caller hands it the whole trajectory. With ``lookahead`` 1 the key is ready one
chunk ahead (the default prefetch); 2 leaves two chunks' compute time to stage the set on slow drives.

``ConstantVelocityPredictor`` extrapolates the last per-frame motion: position linearly, rotation by
powers of the last per-frame rotation delta (a quaternion, applied in the world frame). For an MG2
camera driven by held keys and a held camera move this is exact until the user changes the input
(paper §II.C: the next retrieval set is found with a 0.66-0.94 hit rate). ``hedge_poses`` adds the changes of input a player makes most — stop, turn
either way, walk ahead — at the fastest turn and pace the session has shown so far (so the rates are the
model's and the player's, not assumed): a prefetch that stages the sets of these too is not caught out
when a key is pressed or let go at a chunk's boundary. ``ReuseCurrentPredictor``
returns the current chunk's own key — "the next chunk will look where this one looks" — the baseline
the paper compares against (0.03-0.52).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.geometry import _axis_quat, normalize, quat_multiply, quat_to_matrix, rotation_angle
from engine.retrieval.select import SUMMARY_FRAMES, ChunkGrid, ChunkPose


class PosePredictor(Protocol):
    lookahead: int          # chunks between the current chunk and the predicted one (>= 1)

    def predict(self, known_poses: np.ndarray, chunk: int, grid: ChunkGrid) -> ChunkPose:
        """Key of chunk ``chunk + lookahead`` from the poses of frames up to the end of ``chunk``."""
        ...


def known_until(known_poses: np.ndarray, chunk: int, grid: ChunkGrid) -> np.ndarray:
    """The poses [F, 7] of frames 0 .. end of ``chunk``: the only ones a predictor may use."""
    stop = grid.frames(chunk).stop
    assert len(known_poses) >= stop, f"poses end at frame {len(known_poses)}, chunk {chunk} at {stop}"
    return np.asarray(known_poses[:stop], dtype=np.float64)


@dataclass(frozen=True)
class ConstantVelocityPredictor:
    """Extrapolates the last per-frame linear and angular velocity.

    ``history`` frames are averaged into the velocity (1 = the last frame's motion, exact for held MG2
    inputs; more smooths noisy pose files at the price of lagging a change of input).
    """

    lookahead: int = 1
    history: int = 1
    summary_count: int = SUMMARY_FRAMES

    def __post_init__(self) -> None:
        assert self.lookahead >= 1 and self.history >= 1 and self.summary_count >= 1

    def predict(self, known_poses: np.ndarray, chunk: int, grid: ChunkGrid) -> ChunkPose:
        known = known_until(known_poses, chunk, grid)
        frames = grid.summary_frames(chunk + self.lookahead, self.summary_count)
        return ChunkPose(extrapolate(known, frames, self.history))


@dataclass(frozen=True)
class ReuseCurrentPredictor:
    """Predicts that the next chunk has the current chunk's key (the no-prediction baseline)."""

    lookahead: int = 1
    summary_count: int = SUMMARY_FRAMES

    def __post_init__(self) -> None:
        assert self.lookahead >= 1 and self.summary_count >= 1

    def predict(self, known_poses: np.ndarray, chunk: int, grid: ChunkGrid) -> ChunkPose:
        known = known_until(known_poses, chunk, grid)
        return ChunkPose(known[grid.summary_frames(chunk, self.summary_count)])


def extrapolate(known: np.ndarray, frames: np.ndarray, history: int = 1) -> np.ndarray:
    """Poses [len(frames), 7] at absolute frame indices ``frames`` (after the known ones), continuing
    the average motion of the last ``history`` frames of ``known`` [F, 7] at constant velocity."""
    known = np.asarray(known, dtype=np.float64)
    assert len(known) >= 1
    last = len(known) - 1
    h = min(history, last)
    steps = np.asarray(frames, dtype=np.float64) - last              # frames past the last known one
    if h == 0:                                                       # one pose: no velocity to go on
        return np.repeat(known[-1:], len(steps), axis=0)
    velocity = (known[last, :3] - known[last - h, :3]) / h
    # World-frame rotation from frame last-h to last: q_last = delta ⊗ q_(last-h).
    delta = quat_multiply(known[last, 3:], _conjugate(known[last - h, 3:]))
    positions = known[last, :3] + steps[:, None] * velocity
    rotations = quat_multiply(quat_power(delta, steps / h), known[last, 3:])
    return np.concatenate([positions, normalize(rotations)], axis=-1)


def quat_power(q: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """[len(exponent), 4]: the rotation of unit quaternion ``q`` scaled in angle by each exponent
    (shorter arc; the identity for a rotation too small to have a stable axis)."""
    q = normalize(q)
    q = -q if q[0] < 0 else q                     # the shorter arc: angle in [0, 180] degrees
    sin_half = np.linalg.norm(q[1:])
    exponent = np.asarray(exponent, dtype=np.float64)
    if sin_half < 1e-15:
        out = np.zeros(exponent.shape + (4,))
        out[..., 0] = 1.0
        return out
    half = np.arctan2(sin_half, q[0])
    axis = q[1:] / sin_half
    scaled = exponent[..., None] * half
    return np.concatenate([np.cos(scaled), np.sin(scaled) * axis], axis=-1)


def _conjugate(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, dtype=np.float64) * np.array([1.0, -1.0, -1.0, -1.0])


HEDGE_HISTORY = 1024    # frames whose motion sets the hedges' rates (about a minute of video: bounded cost)


def hedge_poses(known: np.ndarray, frames: np.ndarray) -> list[np.ndarray]:
    """Poses [len(frames), 7] at absolute frame indices ``frames`` under the input changes a player makes
    most, each from the last known pose: the camera stops; it turns left or right on the spot; it walks
    straight ahead. Turns go at the fastest rotation between two of the last ``HEDGE_HISTORY`` frames of
    ``known``, the walk at the fastest pace there (world units a frame, along the camera's level forward);
    a rate never shown is never guessed (none turned: no turning hedges; none moved: no walking one)."""
    known = np.asarray(known, dtype=np.float64)
    last = known[-1]
    steps = np.asarray(frames, dtype=np.float64) - (len(known) - 1)
    known = known[-HEDGE_HISTORY:]
    out = [np.repeat(last[None], len(steps), axis=0)]                        # stop
    if len(known) < 2:
        return out
    turn = float(rotation_angle(known[:-1, 3:], known[1:, 3:]).max())      # degrees a frame
    pace = float(np.linalg.norm(np.diff(known[:, :3], axis=0), axis=1).max())
    if turn > 1e-6:
        for sign in (1.0, -1.0):
            q = quat_multiply(_axis_quat(1, sign * turn * steps), last[3:])   # about world up
            out.append(np.concatenate([np.repeat(last[None, :3], len(steps), 0), normalize(q)], -1))
    forward = quat_to_matrix(last[3:]) @ np.array([0.0, 0.0, -1.0])          # the camera looks along -z
    forward[1] = 0.0
    if pace > 1e-9 and np.linalg.norm(forward) > 1e-6:
        forward /= np.linalg.norm(forward)
        positions = last[:3] + steps[:, None] * pace * forward
        out.append(np.concatenate([positions, np.repeat(last[None, 3:], len(steps), 0)], -1))
    return out
