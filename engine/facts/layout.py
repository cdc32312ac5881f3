"""The shapes a world model promises the chunk loop: its stored KV per chunk and its video grid (no torch).

Owns two frozen value types that every layer may import without pulling in a model or torch:

* ``KVLayout`` — the self-attention KV of one chunk as the memory stores it: ``layers`` buffers of
  ``[tokens_per_chunk, heads, head_dim]`` keys and values each (keys after the model's time rotation, or before it with
  ``--kv-keys pre-rope``),
  the latent frames of a chunk and of the local window. Byte sizes of every storage format follow from
  it (``engine.facts.kv_format``).
* ``VideoGrid`` — how chunks map to video frames (MG2: 9 frames for chunk 0, then 12) and the frame rate.
* ``ModelShape`` — a named model as the planner reads it: its ``KVLayout``, its ``VideoGrid`` and the
  parameters it keeps on the device through a session (the weights the device must hold). Every
  model configuration (MG2's ``engine.config.ModelConfig``, LingBot's ``engine.facts.lingbot_models``) gives
  one with ``shape()``, so the planner reads no model family.

They are part of the model interface (``engine.model.interface`` re-exports them); they live here so
that the memory, the retrieval, the planner and the config can use them without depending on the
model package.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KVLayout:
    """One chunk's stored self-attention KV: ``layers`` x (K, V) of ``[tokens_per_chunk, heads, head_dim]``."""

    layers: int
    tokens_per_frame: int
    frames_per_chunk: int           # latent frames per chunk
    heads: int
    head_dim: int
    window_frames: int              # past latent frames in the local window (current chunk excluded)

    def __post_init__(self) -> None:
        assert min(self.layers, self.tokens_per_frame, self.frames_per_chunk, self.heads, self.head_dim) >= 1
        assert self.window_frames >= 0

    @property
    def tokens_per_chunk(self) -> int:
        return self.tokens_per_frame * self.frames_per_chunk

    @property
    def window_tokens(self) -> int:
        return self.tokens_per_frame * self.window_frames

    @property
    def channels(self) -> int:
        return self.heads * self.head_dim

    @property
    def window_chunks(self) -> int:
        """Chunks (partly) inside the local window: never retrieval candidates."""
        return -(-self.window_frames // self.frames_per_chunk)

    def bytes_per_chunk(self, bytes_per_value: float = 2.0) -> int:
        """Unquantised K+V bytes of one chunk over all layers."""
        return int(2 * self.layers * self.tokens_per_chunk * self.channels * bytes_per_value)


@dataclass(frozen=True)
class VideoGrid:
    """Video frames per chunk (the first chunk may be shorter) and the frame rate."""

    first_frames: int
    frames_per_chunk: int
    fps: int

    def frames_of_chunk(self, chunk: int) -> int:
        return self.first_frames if chunk == 0 else self.frames_per_chunk

    def frames_total(self, chunks: int) -> int:
        return 0 if chunks <= 0 else self.first_frames + (chunks - 1) * self.frames_per_chunk


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs of a model: its name, one chunk's stored KV and its video grid."""

    name: str
    layout: KVLayout
    grid: VideoGrid
    device_params: int = 0          # parameters resident on the device while chunks are made (0: no weights)

    @property
    def fps(self) -> int:
        return self.grid.fps

    def kv_bytes_per_chunk(self, bytes_per_value: float = 2.0) -> int:
        return self.layout.bytes_per_chunk(bytes_per_value)

    def video_frames_total(self, chunks: int) -> int:
        return self.grid.frames_total(chunks)
