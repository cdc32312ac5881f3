"""MG2's own per-layer state in the attention context: the action module's windows and the image's K/V.

Owns what MG2 keeps per layer besides the self-attention KV (which the model-agnostic
``engine.model.kv_context`` holds): for each action block, rolling windows of the keyboard and mouse
branches' keys/values (``window_frames`` latent frames, the same window as the self-attention's), and
for every layer the cross-attention K/V of the start image's CLIP tokens. ``attach_mg2_state`` puts a
fresh ``MG2LayerState`` on every layer of a context (``CausalDiT.prepare_context`` calls it); the
context commits it with the chunk, so the windows roll exactly when MG2's caches do.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import DiTConfig
from engine.model.kv_context import AttentionContext, LayerState
from engine.model.state_tensors import cpu_copy, nest, optional, sub


class RollingKV:
    """A small rolling window over frames for the action module (keys after RoPE).

    k/v are [N, frames, H, D]: N = B for the keyboard branch (one copy for all tokens), N = B * tokens
    per frame for the mouse branch (one temporal sequence per spatial token).
    """

    def __init__(self, window_frames: int):
        self.window_frames = window_frames
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def context(self, k_cur: torch.Tensor, v_cur: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Record the current frames and return window + current to attend over."""
        self._pending = (k_cur, v_cur)
        return self.valid()

    def valid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Window + the current frames of the last forward (what MG2's cache holds after it)."""
        assert self._pending is not None, "no forward since the last commit"
        k_cur, v_cur = self._pending
        if self.k is None:
            return k_cur, v_cur
        return torch.cat([self.k, k_cur], dim=1), torch.cat([self.v, v_cur], dim=1)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {} if self.k is None else {"k": cpu_copy(self.k), "v": cpu_copy(self.v)}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], device, dtype) -> None:
        self.k = optional(tensors, "k", device, dtype)
        self.v = optional(tensors, "v", device, dtype)
        self._pending = None

    def commit(self) -> None:
        assert self._pending is not None, "commit without a forward"
        k_cur, v_cur = self._pending
        if self.window_frames > 0:
            k = k_cur if self.k is None else torch.cat([self.k, k_cur], dim=1)
            v = v_cur if self.v is None else torch.cat([self.v, v_cur], dim=1)
            self.k = k[:, -self.window_frames:].clone()
            self.v = v[:, -self.window_frames:].clone()
        self._pending = None


@dataclass
class MG2LayerState:
    """One layer's MG2 state: action windows (action blocks only) and the start image's cross K/V."""

    keyboard: RollingKV | None = None
    mouse: RollingKV | None = None
    cross_k: torch.Tensor | None = None   # [B, clip tokens, H, D]
    cross_v: torch.Tensor | None = None

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The action windows (the cross K/V come from the start image again)."""
        out = {}
        for name, rolling in (("keyboard", self.keyboard), ("mouse", self.mouse)):
            if rolling is not None:
                out.update(nest(name, rolling.state_tensors()))
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], device, dtype) -> None:
        for name, rolling in (("keyboard", self.keyboard), ("mouse", self.mouse)):
            if rolling is not None:
                rolling.load_state_tensors(sub(name, tensors), device, dtype)

    def commit(self) -> None:
        for rolling in (self.keyboard, self.mouse):
            if rolling is not None:
                rolling.commit()


def attach_mg2_state(ctx: AttentionContext, dit: DiTConfig) -> None:
    """Give every layer of ``ctx`` a fresh MG2 state; action windows span the context's local window."""
    assert len(ctx.layers) == dit.num_layers, f"context of {len(ctx.layers)} layers, DiT has {dit.num_layers}"
    action = dit.action
    blocks = set(action.blocks) if action else set()
    window = ctx.layout.window_frames
    for index, state in enumerate(ctx.layers):
        extra = MG2LayerState()
        if index in blocks:
            extra.keyboard = RollingKV(window) if action.enable_keyboard else None
            extra.mouse = RollingKV(window) if action.enable_mouse else None
        state.extra = extra


def mg2_state(state: LayerState) -> MG2LayerState:
    """The MG2 state of one context layer (attached by ``CausalDiT.prepare_context``)."""
    assert isinstance(state.extra, MG2LayerState), "context has no MG2 state: call CausalDiT.prepare_context"
    return state.extra
