"""The attention context the DiT reads: an explicit, caller-owned object.

Owns, per layer, the self-attention K/V laid out in one preallocated buffer pair as

    [ memory (retrieved chunks, sink) | local window | current chunk ]     (token axis)

plus MG2's smaller per-layer states: the action module's rolling keyboard/mouse windows and the
cross-attention K/V of the start image. The model writes the current chunk's K/V on every forward
(keys after RoPE, as MG2 stores them); nothing becomes history until the caller calls ``commit()``
after the chunk's clean pass. This reproduces MG2's rolling KV cache exactly: a chunk attends to the
previous ``local_attn_size - frames_per_chunk`` latent frames and to itself, without a mask.

The memory region is right-aligned against the window so that the valid tokens are always one
contiguous range; whoever fills it (the store, later) writes into ``memory_slot`` views.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import ModelConfig


@dataclass(frozen=True)
class ContextLayout:
    """Token capacities of one layer's self-attention context."""

    memory_tokens: int
    window_tokens: int
    chunk_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.memory_tokens + self.window_tokens + self.chunk_tokens

    @property
    def window_start(self) -> int:
        return self.memory_tokens

    @property
    def current_start(self) -> int:
        return self.memory_tokens + self.window_tokens


class LayerKV:
    """Self-attention K/V of one layer in one buffer pair (see the module docstring for the layout)."""

    def __init__(self, layout: ContextLayout, batch: int, heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        self.layout = layout
        shape = (batch, layout.total_tokens, heads, head_dim)  # [B, T, H, D]; keys after RoPE
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.memory_valid = 0   # tokens, right-aligned against the window region
        self.window_valid = 0   # tokens, right-aligned against the current chunk

    def write_current(self, k: torch.Tensor, v: torch.Tensor) -> None:
        s, n = self.layout.current_start, k.shape[1]
        assert n == self.layout.chunk_tokens, f"chunk of {n} tokens, layout expects {self.layout.chunk_tokens}"
        self.k[:, s:s + n] = k
        self.v[:, s:s + n] = v

    def context(self) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V views over every valid token: memory, window, current."""
        lay = self.layout
        assert self.memory_valid == 0 or self.window_valid == lay.window_tokens, (
            "memory is only attended once the window is full (contiguity)")
        start = lay.current_start - self.window_valid - self.memory_valid
        end = lay.total_tokens
        return self.k[:, start:end], self.v[:, start:end]

    def current(self) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.layout.current_start
        return self.k[:, s:], self.v[:, s:]

    def window(self) -> tuple[torch.Tensor, torch.Tensor]:
        lay = self.layout
        s = lay.current_start - self.window_valid
        return self.k[:, s:lay.current_start], self.v[:, s:lay.current_start]

    def memory_slot(self, offset_tokens: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Writable views of memory tokens [offset, offset+tokens) counted from the region start."""
        assert 0 <= offset_tokens and offset_tokens + tokens <= self.layout.memory_tokens
        return (self.k[:, offset_tokens:offset_tokens + tokens],
                self.v[:, offset_tokens:offset_tokens + tokens])

    def set_memory_valid(self, tokens: int) -> None:
        """Declare the last ``tokens`` of the memory region valid (the rest is ignored)."""
        assert 0 <= tokens <= self.layout.memory_tokens
        self.memory_valid = tokens

    def commit(self) -> None:
        """The current chunk joins the window; the oldest window tokens fall out."""
        lay = self.layout
        if lay.window_tokens == 0:
            return
        k_win, v_win = self.window()
        k_cur, v_cur = self.current()
        keep_k = torch.cat([k_win, k_cur], dim=1)[:, -lay.window_tokens:].clone()
        keep_v = torch.cat([v_win, v_cur], dim=1)[:, -lay.window_tokens:].clone()
        n = keep_k.shape[1]
        self.k[:, lay.current_start - n:lay.current_start] = keep_k
        self.v[:, lay.current_start - n:lay.current_start] = keep_v
        self.window_valid = n


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
class LayerState:
    self_kv: LayerKV
    keyboard: RollingKV | None = None
    mouse: RollingKV | None = None
    cross_k: torch.Tensor | None = None   # [B, clip tokens, H, D]
    cross_v: torch.Tensor | None = None


class AttentionContext:
    """All per-layer attention state of one generation session."""

    def __init__(self, cfg: ModelConfig, memory_chunks: int = 0, batch: int = 1,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        dit = cfg.dit
        self.cfg = cfg
        self.layout = ContextLayout(
            memory_tokens=memory_chunks * cfg.tokens_per_chunk,
            window_tokens=cfg.window_frames * cfg.tokens_per_frame,
            chunk_tokens=cfg.tokens_per_chunk,
        )
        action_blocks = set(dit.action.blocks) if dit.action else set()
        self.layers: list[LayerState] = []
        for i in range(dit.num_layers):
            state = LayerState(LayerKV(self.layout, batch, dit.num_heads, dit.head_dim, dtype,
                                       torch.device(device)))
            if i in action_blocks:
                state.keyboard = RollingKV(cfg.window_frames) if dit.action.enable_keyboard else None
                state.mouse = RollingKV(cfg.window_frames) if dit.action.enable_mouse else None
            self.layers.append(state)
        self.chunks_committed = 0

    @property
    def has_visual_context(self) -> bool:
        return self.layers[0].cross_k is not None

    def current_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer (k, v) views [B, chunk tokens, H, D] of the current chunk (valid until the next forward)."""
        return [state.self_kv.current() for state in self.layers]

    def commit(self) -> None:
        """After the clean pass: every layer's current chunk becomes history."""
        for state in self.layers:
            state.self_kv.commit()
            for rolling in (state.keyboard, state.mouse):
                if rolling is not None:
                    rolling.commit()
        self.chunks_committed += 1
