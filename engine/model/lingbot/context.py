"""LingBot-World-Fast on the session's attention context: its caches as views of the caller's context.

Owns the bridge between the DiT (which sees a layer's self-attention cache only through
``SelfKV.update`` and the text K/V through ``CrossKV``) and the model-agnostic
``engine.model.kv_context.AttentionContext``:

* ``ContextSelfKV`` — ``update`` writes the chunk's K/V (keys after RoPE at their absolute latent frame,
  and for a context that keeps them the keys before RoPE) into the context's current region and returns every valid token: [sink | retrieved memory | window |
  chunk]. Every forward of a chunk overwrites the same rows, so after the clean pass the region holds the
  clean K/V, uncommitted, as the interface asks. With the official sink (``sink_tokens``: LingBot's
  ``sink_size`` latent frames, the session's ``--sink``) the first frames' K/V of the first chunk are
  kept in the layer state and put before the context once the window has moved past them: the official
  cache's [sink | rolling frames]. The sink keeps its original time rotation (the official
  cache never re-rotates it), also under ``--positions rerotate``.
* ``LingbotLayerState`` — the model's own per-layer state in the context: the text cross-attention K/V,
  computed once from the text context by ``attach_text`` (``prepare_context``) and never changed; it has
  nothing to roll (a resumed session computes it again from the same text); and the official sink's
  K/V, saved with the save point.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.model.kv_context import AttentionContext
from engine.model.kv_layer import LayerKV
from engine.model.lingbot.cache import CrossKV, FastCaches
from engine.model.lingbot.dit import WanModelFast
from engine.model.weight_stream import blocks_in_order


class ContextSelfKV:
    """``SelfKV`` over one layer of the session's context (see the module docstring)."""

    def __init__(self, kv: LayerKV, state: "LingbotLayerState | None" = None, sink_tokens: int = 0):
        assert sink_tokens == 0 or state is not None, "the official sink needs the layer state to keep it"
        self.kv, self.state, self.sink_tokens = kv, state, sink_tokens

    def update(self, k: torch.Tensor, v: torch.Tensor, current_start: int,
               k_unrotated: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        self.kv.write_current(k, v, k_unrotated)
        if current_start < self.sink_tokens:          # the chunk holding the sink frames: the last forward
            n = self.sink_tokens - current_start      # (the clean pass) leaves its K/V, as in the official cache
            assert n <= k.shape[1], "the official sink is longer than the first chunk"
            self.state.sink_k, self.state.sink_v = k[:, :n].clone(), v[:, :n].clone()
        keys, values = self.kv.context()
        window_first = current_start - self.kv.window_valid       # absolute token of the window's start
        outside = min(self.sink_tokens, window_first)              # sink tokens the window no longer holds
        if outside <= 0:
            return keys, values
        return (torch.cat([self.state.sink_k[:, :outside], keys], dim=1),
                torch.cat([self.state.sink_v[:, :outside], values], dim=1))


@dataclass
class LingbotLayerState:
    cross: CrossKV = field(default_factory=CrossKV)
    sink_k: torch.Tensor | None = None      # [B, sink tokens, H, D] the official sink (keys after RoPE)
    sink_v: torch.Tensor | None = None

    def commit(self) -> None:
        pass

    def state_tensors(self) -> dict[str, torch.Tensor]:
        if self.sink_k is None:
            return {}
        return {"sink_k": self.sink_k.detach().cpu().clone(), "sink_v": self.sink_v.detach().cpu().clone()}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], device, dtype) -> None:
        if "sink_k" in tensors:
            self.sink_k = tensors["sink_k"].to(device=device, dtype=dtype)
            self.sink_v = tensors["sink_v"].to(device=device, dtype=dtype)


@torch.no_grad()
def attach_text(ctx: AttentionContext, dit: WanModelFast, text: torch.Tensor) -> None:
    """Give every layer of ``ctx`` the cross-attention K/V of ``text`` [B, n, text_dim]."""
    assert len(ctx.layers) == len(dit.blocks), f"context of {len(ctx.layers)} layers, DiT has {len(dit.blocks)}"
    embedded = dit.embed_text(text)                                  # [B, text_len, dim]
    for block, state in zip(blocks_in_order(dit.blocks), ctx.layers, strict=True):
        cross = CrossKV()
        cross.k, cross.v = block.cross_attn.keys_values(embedded)    # [B, text_len, H, D]
        state.extra = LingbotLayerState(cross)


def context_caches(ctx: AttentionContext, sink_tokens: int = 0) -> FastCaches:
    """The DiT's caches as views of ``ctx`` (after ``attach_text``); ``sink_tokens``: the official sink
    (the first ``sink_size`` latent frames, attended beside the window once it has left them)."""
    cross, selfs = [], []
    for state in ctx.layers:
        assert isinstance(state.extra, LingbotLayerState), "context has no text K/V: call prepare_context"
        cross.append(state.extra.cross)
        selfs.append(ContextSelfKV(state.self_kv, state.extra, sink_tokens))
    return FastCaches(selfs, cross)
