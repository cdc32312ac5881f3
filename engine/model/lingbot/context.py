"""LingBot-World-Fast on the session's attention context: its caches as views of the caller's context.

Owns the bridge between the DiT (which sees a layer's self-attention cache only through
``SelfKV.update`` and the text K/V through ``CrossKV``) and the model-agnostic
``engine.model.kv_context.AttentionContext``:

* ``ContextSelfKV`` — ``update`` writes the chunk's K/V (keys after RoPE at their absolute latent frame,
  and for a context that keeps them the keys before RoPE) into the context's current region and returns every valid token: [sink | retrieved memory | window |
  chunk]. Every forward of a chunk overwrites the same rows, so after the clean pass the region holds the
  clean K/V, uncommitted, as the interface asks.
* ``LingbotLayerState`` — the model's own per-layer state in the context: the text cross-attention K/V,
  computed once from the text context by ``attach_text`` (``prepare_context``) and never changed; it has
  nothing to roll or to save (a resumed session computes it again from the same text).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.model.kv_context import AttentionContext, LayerKV
from engine.model.lingbot.cache import CrossKV, FastCaches
from engine.model.lingbot.dit import WanModelFast


class ContextSelfKV:
    """``SelfKV`` over one layer of the session's context (see the module docstring)."""

    def __init__(self, kv: LayerKV):
        self.kv = kv

    def update(self, k: torch.Tensor, v: torch.Tensor, current_start: int,
               k_unrotated: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        self.kv.write_current(k, v, k_unrotated)
        return self.kv.context()


@dataclass
class LingbotLayerState:
    cross: CrossKV = field(default_factory=CrossKV)

    def commit(self) -> None:
        pass

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], device, dtype) -> None:
        pass


@torch.no_grad()
def attach_text(ctx: AttentionContext, dit: WanModelFast, text: torch.Tensor) -> None:
    """Give every layer of ``ctx`` the cross-attention K/V of ``text`` [B, n, text_dim]."""
    assert len(ctx.layers) == len(dit.blocks), f"context of {len(ctx.layers)} layers, DiT has {len(dit.blocks)}"
    embedded = dit.embed_text(text)                                  # [B, text_len, dim]
    for block, state in zip(dit.blocks, ctx.layers, strict=True):
        cross = CrossKV()
        cross.k, cross.v = block.cross_attn.keys_values(embedded)    # [B, text_len, H, D]
        state.extra = LingbotLayerState(cross)


def context_caches(ctx: AttentionContext) -> FastCaches:
    """The DiT's caches as views of ``ctx`` (after ``attach_text``)."""
    cross = []
    for state in ctx.layers:
        assert isinstance(state.extra, LingbotLayerState), "context has no text K/V: call prepare_context"
        cross.append(state.extra.cross)
    return FastCaches([ContextSelfKV(state.self_kv) for state in ctx.layers], cross)
