"""Positions past a model's native horizon: re-rotation of retrieved keys (DESIGN §4).

Owns the ``rerotate`` policy for any model whose stored keys carry rotary time positions. MG2's rotary
table ends at latent frame 1024 (``WorldModel.horizon_chunk`` = 341); its RoPE computes angles for any
position, which is the ``extend`` mode and leaves every output below the horizon bit-identical. Past
the horizon, ``rerotate`` additionally moves retrieved memory (keys stored after the rotation, at the
absolute positions of their chunk) on the time axis so that it sits just before the current chunk: a
chunk entering a memory slot is rotated so that its last frame lies ``offset`` video frames before the
current chunk's first frame; a chunk that stays resident is rotated again only when its distance to
the current chunk would exceed the native reach. The rotation itself is the model's
(``WorldModel.rotate_time``); rotations compose additively, so this equals computing the position
encoding at the new place (up to rounding).

With keys stored before the rotation (``--kv-keys pre-rope``) the memory rotates a chunk's keys when it
copies them into a slot, at ``entry_position``: the chunk's own position, or past the horizon directly
the re-placed one; ``entered`` records where they landed, and ``update`` then has nothing to move for
them (a zero move is skipped). A chunk that stays resident and must move again is rotated by the
difference, as with post-rope keys (the slot holds rotated keys only).

Everything comes through the model interface: latent frames per chunk from ``layout``, video frames
per latent frame from ``grid`` and ``layout``, the horizon from ``horizon_chunk``. The native reach is
counted in whole chunks below the horizon, ``(horizon - 1) * frames_per_chunk`` latent frames, so a
resident chunk is moved no later than it must be (for MG2 one frame earlier than the table's exact
1021: harmless, as rotations compose exactly).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from engine.config import SessionConfig
from engine.facts.layout import KVLayout
from engine.model.interface import WorldModel

RotateTime = Callable[[int, torch.Tensor, float], torch.Tensor]   # (layer, keys, delta frames) -> keys


@dataclass
class Rerotation:
    layout: KVLayout
    rotate_time: RotateTime                    # the model's time rotation of stored keys
    offset_latent: float                       # the video-frame offset in latent frames
    horizon: int | None                        # first chunk past the native positions; None = none
    position: dict[int, float] = field(default_factory=dict)   # slot -> first-frame position encoded
    pending: dict[int, int] = field(default_factory=dict)      # slot -> chunk that just entered
    moves: dict[int, list[float]] = field(default_factory=dict)  # slot -> rotations since it entered
    entry: dict[int, float] = field(default_factory=dict)      # slot -> first-frame position on entering

    @classmethod
    def for_session(cls, cfg: SessionConfig, model: WorldModel) -> "Rerotation | None":
        if cfg.positions != "rerotate":
            return None
        layout = model.layout
        video_per_latent = model.grid.frames_per_chunk / layout.frames_per_chunk
        return cls(layout, model.rotate_time, cfg.rerotate_offset_frames / video_per_latent,
                   model.horizon_chunk)

    def entered(self, slot: int, chunk: int, at: float | None = None) -> None:
        """A chunk's keys were just copied into ``slot``: at their stored (absolute) position, or
        ``at`` (keys stored before the rotation, rotated as they were copied)."""
        self.position[slot] = float(chunk * self.layout.frames_per_chunk) if at is None else float(at)
        self.entry[slot] = self.position[slot]
        self.pending[slot] = chunk
        self.moves[slot] = []

    def entry_position(self, chunk: int, now: int) -> float:
        """Where a chunk's keys stored before the rotation go as they enter a slot for chunk ``now``:
        its own position below the horizon, the re-placed one past it."""
        if self.horizon is not None and now >= self.horizon:
            return self.target(now)
        return float(chunk * self.layout.frames_per_chunk)

    def target(self, chunk: int) -> float:
        f = self.layout.frames_per_chunk
        return chunk * f - self.offset_latent - f

    def update(self, chunk: int, ctx, chunk_in: list[int | None]) -> int:
        """Rotate the slots that need it for ``chunk``; returns how many were rotated."""
        entered, self.pending = self.pending, {}
        if self.horizon is None or chunk < self.horizon:
            return 0
        f = self.layout.frames_per_chunk
        limit = (self.horizon - 1) * f
        target = self.target(chunk)
        rotated = 0
        for slot, resident in enumerate(chunk_in):
            if resident is None:
                continue
            too_far = chunk * f - self.position[slot] > limit
            if slot in entered or too_far:
                delta = target - self.position[slot]
                if delta != 0:   # keys placed before the rotation entered at the target already
                    self._rotate(ctx, slot, delta)
                    self.moves.setdefault(slot, []).append(delta)
                self.position[slot] = target
                rotated += 1
        return rotated

    def state_facts(self) -> dict:
        """Where each slot's keys stand (a save point's share; JSON)."""
        return {"position": {str(s): p for s, p in self.position.items()},
                "pending": {str(s): c for s, c in self.pending.items()},
                "moves": {str(s): list(m) for s, m in self.moves.items()},
                "entry": {str(s): p for s, p in self.entry.items()}}

    def replay(self, ctx, slot: int, facts: dict) -> None:
        """After a slot was refilled with its chunk's stored keys: the same rotations again, in order."""
        for delta in facts["moves"].get(str(slot), []):
            self._rotate(ctx, slot, delta)

    def load_facts(self, facts: dict) -> None:
        self.position = {int(s): float(p) for s, p in facts["position"].items()}
        self.pending = {int(s): int(c) for s, c in facts["pending"].items()}
        self.moves = {int(s): [float(d) for d in m] for s, m in facts["moves"].items()}
        self.entry = {int(s): float(p) for s, p in facts.get("entry", {}).items()}

    def _rotate(self, ctx, slot: int, delta: float) -> None:
        tokens = self.layout.tokens_per_chunk
        for layer, state in enumerate(ctx.layers):
            k, _ = state.self_kv.memory_slot(slot * tokens, tokens)
            k.copy_(self.rotate_time(layer, k.to(getattr(ctx, "device", k.device)), delta))   # on the model's device (--kv-paging layer: from the host)
