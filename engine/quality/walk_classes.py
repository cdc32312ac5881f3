"""The frame classes of ``bench quality --walk``, from the cameras and the faces they see (numpy only).

Owns the rule (house rule 14: classes a path cannot game). Per latent frame f of a generated chunk,
with ``earlier(f)`` = the latent frames of the observed chunks and of chunks at least ``GAP_CHUNKS``
before f's (the chunk just before is made together with f's as its context, and walking moves the
camera 0.49 units a latent frame, so "every earlier frame" would leave no walking frame new):

* **near**: a camera of ``earlier(f)`` stands within ``NEW_RADIUS`` (0.5) world units (x, z); else f
  is at a **new place** (``new_place``). A key step (0.12 units) or a latent step (0.49) from where the
  camera stood is not new;
* **seen share**: the share of f's columns (``engine.arena.visible``) whose wall face was seen by a
  frame of ``earlier(f)``;
* ``revisit``: near, and at least ``SEEN_SHARE`` of the view seen before; split into ``return_observed``
  (within ``NEW_RADIUS`` of an observed camera: the truth of that place was given) and
  ``return_generated`` (near only frames the model made);
* ``near_new_view``: near, but most of the view not seen before (turned towards something new);
* ``seen_surface``: a new place that sees at least ``SEEN_SHARE`` of its view seen before from
  elsewhere;
* ``never_seen``: no face of the view was seen before (wherever the camera is);
* ``all``: every generated latent frame.

``match`` is, for a near frame, the frame of ``earlier(f)`` whose camera is nearest in position and yaw
among those within ``NEW_RADIUS`` and ``MATCH_YAW`` degrees (-1 when none): what self-consistency
compares f with.
"""
from __future__ import annotations

import numpy as np

NEW_RADIUS = 0.5          # world units: a new place is at least this far from every earlier camera
GAP_CHUNKS = 2            # chunks: an earlier frame is of a chunk at least this many before (or observed)
SEEN_SHARE = 0.5          # share of a view's columns on faces seen before, for "shows a surface seen before"
MATCH_YAW = 10.0          # degrees: a first visit to compare with faces the same way to this
CLASSES = ("new_place", "seen_surface", "never_seen", "revisit", "return_observed", "return_generated",
           "near_new_view", "all")


def earlier_mask(n: int, frames_per_chunk: int, observed_chunks: int, f: int) -> np.ndarray:
    chunk = np.arange(n) // frames_per_chunk
    c = f // frames_per_chunk
    return (chunk < observed_chunks) | (chunk <= c - GAP_CHUNKS)


def classify_walk(cam: np.ndarray, faces: np.ndarray, frames_per_chunk: int, observed_chunks: int
                  ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Masks ``[F]`` of each of ``CLASSES``, the seen share ``[F]`` and the match ``[F]`` of the latent
    frames with cameras ``cam`` ``[F, >=3]`` (x, z, yaw degrees) seeing ``faces`` ``[F, columns]``."""
    n = len(cam)
    chunk = np.arange(n) // frames_per_chunk
    generated = chunk >= observed_chunks
    observed = ~generated
    near = np.zeros(n, dtype=bool)
    near_obs = np.zeros(n, dtype=bool)
    share = np.zeros(n)
    match = np.full(n, -1, dtype=np.int64)
    for f in np.flatnonzero(generated):
        earlier = np.flatnonzero(earlier_mask(n, frames_per_chunk, observed_chunks, f) & (np.arange(n) != f))
        d = np.hypot(cam[earlier, 0] - cam[f, 0], cam[earlier, 1] - cam[f, 1])
        close = d < NEW_RADIUS
        near[f] = close.any()
        near_obs[f] = (close & observed[earlier]).any()
        share[f] = np.isin(faces[f], faces[earlier]).mean() if len(earlier) else 0.0
        dyaw = np.abs((cam[earlier, 2] - cam[f, 2] + 180.0) % 360.0 - 180.0)
        ok = close & (dyaw <= MATCH_YAW)
        if ok.any():
            score = d[ok] / NEW_RADIUS + dyaw[ok] / MATCH_YAW
            match[f] = earlier[ok][np.argmin(score)]
    seen = share >= SEEN_SHARE
    revisit = generated & near & seen
    masks = {"new_place": generated & ~near, "seen_surface": generated & ~near & seen,
             "never_seen": generated & (share == 0), "revisit": revisit, "return_observed": revisit & near_obs,
             "return_generated": revisit & ~near_obs, "near_new_view": generated & near & ~seen, "all": generated}
    return masks, share, match
