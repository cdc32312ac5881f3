"""The truth beside the played frames (``worldpager play --truth``, the arena model only).

Contract. ``PlayTruth(model)`` takes a built arena session's model (``ArenaPipeline``: its arena, its
config, its camera). ``poses(first, count)`` copies the camera the model used for video frames
``[first, first + count)`` — the clamped poses it is keyed on, ``camera_poses()``, derived before the
chunk ran — and is called on the session's thread, where those frames are decoded (a copy of a few
rows). ``frames(poses)`` renders them (``engine.arena.render``, at the model's frame size, enlarged by
pixel repetition and rounded to uint8 RGB as the model's decoder does, ``engine.arena.truth.enlarge``),
and is called where the frames are encoded for the page, on the encoder thread, never on the chunk
loop's. The truth is that of each video frame's own pose, as ``worldpager arena truth`` renders it: a
frame the decoder blends between two latent frames is compared with the render at its own camera.

The truth is only shown: it is not recorded, logged or written to the MP4, and the recording and its
replay are the same with or without it.
"""
from __future__ import annotations

import numpy as np

from engine.arena.data import render_latents
from engine.arena.truth import enlarge
from engine.geometry import poses_euler


class PlayTruth:
    """The renderer's truth of a played arena session's frames (see the module docstring)."""

    def __init__(self, model):
        self.arena, self.cfg, self._camera = model.arena, model.cfg, model.camera_poses

    def poses(self, first: int, count: int) -> np.ndarray:
        """A copy of the poses ``[count, 7]`` of video frames ``[first, first + count)``."""
        poses = np.array(self._camera()[first:first + count], dtype=np.float64)
        assert len(poses) == count, (first, count, len(poses))
        return poses

    def frames(self, poses: np.ndarray) -> np.ndarray:
        """uint8 RGB ``[T, H * upscale, W * upscale, 3]``: the true frames at ``poses`` ``[T, 7]``."""
        e = poses_euler(poses)                                           # x, y, z, yaw, pitch, roll
        cam = np.stack([e[:, 0], e[:, 2], e[:, 3], e[:, 4]], axis=1)     # the renderer's x, z, yaw, pitch
        return enlarge(render_latents(self.arena, cam, self.cfg), self.cfg.upscale)
