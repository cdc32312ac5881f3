"""Which generated latent frames are revisits, and of what: the classifier of ``bench quality`` (numpy only).

Owns the rule. A latent frame of a generated chunk (one after the observed chunks) is a **revisit**
when its camera is within ``POS_TOL`` world units (x, z) and ``ANGLE_TOL`` degrees in yaw (wrapped) and
in pitch of the camera of a latent frame at least ``MIN_GAP_CHUNKS`` chunks earlier (a *match*). It is a
return to an **observed** view when *any* of its matches is in an observed chunk (chunk 0, the view the
session is handed, always is): the truth of that view was given to the session. Otherwise it is a
return to a **generated** view: every match was the model's own output. It is at the **start pose**
when one of its matches is one of chunk 0's cameras (so every start-pose return is an observed return).
``first`` is its earliest match: the first visit of that pose (for a generated return, a generated
frame, which the paper's self-consistency measure compares it with).

The cameras are the pipeline's own (``ArenaPipeline.cam``: x, z, yaw, pitch in degrees of every latent
frame, after wall clamping): the ones the model was conditioned on and the truth is rendered at.
``CLASSES`` names the frame sets the benchmark scores.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

POS_TOL = 0.1            # world units
ANGLE_TOL = 2.5          # degrees, yaw and pitch
MIN_GAP_CHUNKS = 10
CLASSES = ("observed", "start", "observed_away", "generated", "revisit", "all")


@dataclass(frozen=True)
class Revisits:
    """Per latent frame ``[F]``: what kind of frame it is."""

    generated_frames: np.ndarray     # bool: in a generated chunk
    revisit: np.ndarray              # bool
    observed: np.ndarray             # bool: a return to an observed view
    start: np.ndarray                # bool: a return to one of chunk 0's cameras
    first: np.ndarray                # int: the earliest match, -1 where none

    @property
    def generated(self) -> np.ndarray:
        """Returns to views first seen only in generated chunks."""
        return self.revisit & ~self.observed

    def masks(self) -> dict[str, np.ndarray]:
        """The frame set of each of ``CLASSES``."""
        return {"observed": self.observed, "start": self.start, "observed_away": self.observed & ~self.start,
                "generated": self.generated, "revisit": self.revisit, "all": self.generated_frames}


def matches(cam: np.ndarray, f: int, earlier: np.ndarray) -> np.ndarray:
    """Which of the frames ``earlier`` have a camera within the tolerances of frame ``f``'s."""
    c = cam[earlier]
    dyaw = np.abs((c[:, 2] - cam[f, 2] + 180.0) % 360.0 - 180.0)
    near = np.hypot(c[:, 0] - cam[f, 0], c[:, 1] - cam[f, 1]) <= POS_TOL
    return earlier[near & (dyaw <= ANGLE_TOL) & (np.abs(c[:, 3] - cam[f, 3]) <= ANGLE_TOL)]


def classify(cam: np.ndarray, frames_per_chunk: int, observed_chunks: int) -> Revisits:
    """The revisits among the latent frames with cameras ``cam`` ``[F, 4]`` (x, z, yaw, pitch degrees),
    ``frames_per_chunk`` latent frames a chunk, chunks ``[0, observed_chunks)`` observed (at least 1)."""
    cam = np.asarray(cam, dtype=np.float64)
    if cam.ndim != 2 or cam.shape[1] != 4:
        raise ValueError(f"cameras of shape {cam.shape}: want [frames, 4] (x, z, yaw, pitch)")
    if observed_chunks < 1:
        raise ValueError(f"observed_chunks {observed_chunks}: chunk 0 is always the given view")
    n = len(cam)
    chunk = np.arange(n) // frames_per_chunk
    generated = chunk >= observed_chunks
    revisit, observed, start = (np.zeros(n, dtype=bool) for _ in range(3))
    first = np.full(n, -1, dtype=np.int64)
    for f in np.flatnonzero(generated):
        found = matches(cam, f, np.flatnonzero(chunk <= chunk[f] - MIN_GAP_CHUNKS))
        if len(found):
            revisit[f], first[f] = True, found[0]
            observed[f] = bool((chunk[found] < observed_chunks).any())
            start[f] = bool((chunk[found] == 0).any())
    return Revisits(generated, revisit, observed, start, first)
