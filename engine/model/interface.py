"""The one interface between the chunk loop and a world model (DESIGN §2a).

Owns what the session, the memory and the retrieval may know about a model, and nothing else:

* ``KVLayout`` — the self-attention KV of one chunk as the memory stores it: ``layers`` buffers of
  ``[tokens_per_chunk, heads, head_dim]`` keys and values each (keys after the model's time rotation, or before it with
  ``--kv-keys pre-rope``),
  the latent frames of a chunk and of the local window. Byte sizes of every storage format follow from
  it.
* ``VideoGrid`` — how chunks map to video frames (MG2: 9 frames for chunk 0, then 12) and the frame rate.
* ``WorldModel`` — the protocol every model implements (MG2, the arena model, the synthetic model):
  set-up happens in the model's constructor (start image, trajectory); the loop then calls
  ``prepare_context`` once and, per chunk, ``denoise`` (which writes the chunk's clean K/V into the
  context's current region), ``decode`` (video frames), and, for ``rerotate``, ``rotate_time`` on the
  keys of a memory slot. ``state_tensors`` / ``load_state_tensors`` carry the model's running state
  across a save point.

* ``ObservingModel`` — a model whose ``ModelSpec.observes`` is not empty also takes chunks from what
  was observed (``--observe``, ``engine.session.observe``): ``observe`` runs only the clean pass on the
  observed chunk's latents, leaving its K/V in the context exactly as ``denoise`` would have left them
  for a chunk with those latents.

* ``KeyPlacingModel`` — a model that can also rotate a chunk's keys given before its rotation to any
  position (``place_keys``): the memory may then store keys pre-rope (``--kv-keys pre-rope``) and
  rotate them when it stages them. MG2's and LingBot's models are; a model that is not refuses
  pre-rope storage.

* ``LiveInputModel`` — a model that derives per-frame inputs from the trajectory when it is built (the
  arena model: the path clamped at walls, the latent frames' camera and actions; LingBot: the relative
  camera poses) re-derives those of the video frames an input source wrote during the session (live
  play, ``engine.session.inputs``): ``inputs_extended(start, stop)``. A model that reads the trajectory
  when a chunk runs (MG2, the synthetic model) needs nothing. Derivations are causal (frame t from
  frames up to t), so a session given its frames live equals one given the same frames from a file.

Nothing in ``memory/``, ``retrieval/`` or the session names a particular model: they take a
``KVLayout``, a ``VideoGrid`` and a ``WorldModel``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

# The shape types are torch-free and live in ``engine.facts.layout`` so that the memory, the retrieval and
# the planner can use them without importing the model package; they are part of this interface.
from engine.facts.layout import KVLayout, VideoGrid

__all__ = ["KVLayout", "VideoGrid", "WorldModel", "ObservingModel", "KeyPlacingModel", "LiveInputModel"]


@runtime_checkable
class WorldModel(Protocol):
    """What the chunk loop needs from a world model (see the module docstring)."""

    name: str
    layout: KVLayout
    grid: VideoGrid
    frame_size: tuple[int, int]          # decoded video (height, width)
    horizon_chunk: int | None            # first chunk past the native time positions; None = unbounded
    weights: str                         # where the weights came from (logged)

    def camera_poses(self) -> np.ndarray:
        """Per-video-frame camera poses ``[T, 7]`` the memory is keyed on (the model may constrain the
        trajectory's, e.g. clamp it to walkable space)."""

    def prepare_context(self, ctx) -> None:
        """Fill model-specific per-session state of the attention context (e.g. image conditioning)."""

    def denoise(self, chunk: int, ctx) -> torch.Tensor:
        """Generate ``chunk``; its clean K/V are left uncommitted in the context's current region."""

    def decode(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        """Video frames of ``chunk`` (T from ``grid``, H x W = ``frame_size``): float ``[T, 3, H, W]`` in
        [-1, 1], or uint8 RGB ``[T, H, W, 3]`` (what the MP4 writer takes without converting)."""

    def rotate_time(self, layer: int, keys: torch.Tensor, delta_frames: float) -> torch.Tensor:
        """Keys ``[B, T, H, D]`` of ``layer`` as if stored ``delta_frames`` latent frames later."""

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The model's own running state between chunks (noise RNG, decoder caches; not the attention
        context's, which the context saves itself) as named CPU tensors (``engine.model.state_tensors``)."""

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Continue from ``state_tensors()`` of an earlier run: the next ``denoise`` and ``decode`` give
        what that run's would have given."""


@runtime_checkable
class ObservingModel(WorldModel, Protocol):
    """A ``WorldModel`` that can also take a chunk from what was observed (see the module docstring)."""

    def observe(self, chunk: int, ctx) -> torch.Tensor:
        """The observed ``chunk``'s latents; their K/V (the clean pass) stay uncommitted in the context."""


@runtime_checkable
class KeyPlacingModel(WorldModel, Protocol):
    """A ``WorldModel`` whose context can keep keys before the rotation (see the module docstring)."""

    def place_keys(self, layer: int, keys: torch.Tensor, start_frame: float) -> torch.Tensor:
        """Keys ``[B, T, H, D]`` of one chunk of ``layer``, given before the rotation, rotated as if the
        chunk's first latent frame sat at ``start_frame``."""


@runtime_checkable
class LiveInputModel(WorldModel, Protocol):
    """A ``WorldModel`` whose per-frame inputs, derived at set-up, follow a trajectory written during the
    session (see the module docstring)."""

    def inputs_extended(self, start: int, stop: int) -> None:
        """The trajectory's video frames [start, stop) were written (actions and poses; every frame
        before ``start`` is unchanged): re-derive what was derived from them."""
