"""Positions past MG2's horizon: re-rotation of retrieved keys (DESIGN §4).

Owns the ``rerotate`` policy. MG2's rotary table ends at latent frame 1024 (chunk 341); the model's
RoPE (``engine.model.rope``) computes angles for any position, which is the ``extend`` mode and leaves
every output below the horizon bit-identical. Past the horizon, ``rerotate`` additionally moves
retrieved memory (keys stored after RoPE, at the absolute positions of their chunk) on the time axis so
that it sits just before the current chunk: a chunk entering a memory slot is rotated so that its last
frame lies ``offset`` video frames before the current chunk's first frame; a chunk that stays resident
is rotated again only when its distance to the current chunk would exceed the native table. Rotations
compose additively, so this equals computing RoPE at the new position (up to rounding).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.config import ModelConfig, SessionConfig
from engine.model.facts import horizon_chunk
from engine.model.rope import DiTRope


@dataclass
class Rerotation:
    model_cfg: ModelConfig
    offset_latent: float                       # video-frame offset in latent frames
    rope: DiTRope
    horizon: int                               # first chunk past the native table
    position: dict[int, float] = field(default_factory=dict)   # slot -> first-frame position encoded
    pending: dict[int, int] = field(default_factory=dict)      # slot -> chunk that just entered

    @classmethod
    def for_session(cls, cfg: SessionConfig, model_cfg: ModelConfig) -> "Rerotation | None":
        if cfg.positions != "rerotate":
            return None
        dit = model_cfg.dit
        ratio = model_cfg.vae.temporal_factor
        return cls(model_cfg, cfg.rerotate_offset_frames / ratio,
                   DiTRope(dit.head_dim, dit.rope_split, dit.rope_theta), horizon_chunk(model_cfg))

    def entered(self, slot: int, chunk: int) -> None:
        """A chunk's keys were just copied into ``slot`` at their stored (absolute) position."""
        self.position[slot] = float(chunk * self.model_cfg.sampler.frames_per_chunk)
        self.pending[slot] = chunk

    def target(self, chunk: int) -> float:
        f = self.model_cfg.sampler.frames_per_chunk
        return chunk * f - self.offset_latent - f

    def update(self, chunk: int, ctx, chunk_in: list[int | None]) -> int:
        """Rotate the slots that need it for ``chunk``; returns how many were rotated."""
        entered, self.pending = self.pending, {}
        if chunk < self.horizon:
            return 0
        f = self.model_cfg.sampler.frames_per_chunk
        limit = self.model_cfg.dit.rope_table_frames - f
        target = self.target(chunk)
        rotated = 0
        for slot, resident in enumerate(chunk_in):
            if resident is None:
                continue
            too_far = chunk * f - self.position[slot] > limit
            if slot in entered or too_far:
                self._rotate(ctx, slot, target - self.position[slot])
                self.position[slot] = target
                rotated += 1
        return rotated

    def _rotate(self, ctx, slot: int, delta: float) -> None:
        tokens = self.model_cfg.tokens_per_chunk
        for state in ctx.layers:
            k, _ = state.self_kv.memory_slot(slot * tokens, tokens)
            k.copy_(self.rope.rotate_time(k, delta))
