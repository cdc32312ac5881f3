"""One layer's self-attention K/V in a caller-owned buffer pair: ``[ memory | window | current ]``.

Owns ``ContextLayout`` (the token capacities of one layer's context, from the model's ``KVLayout``) and
``LayerKV`` (its buffers, the valid ranges, the current chunk's write and the window's roll), which
``engine.model.kv_context`` (every layer, chunk paging) and ``engine.model.kv_pager`` (one layer on the
device at a time, layer paging) both build on.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.model.state_tensors import as_int, cpu_copy, integer


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
                 dtype: torch.dtype, device: torch.device, keys_before_rotation: bool = False):
        self.layout = layout
        shape = (batch, layout.total_tokens, heads, head_dim)  # [B, T, H, D]; keys after RoPE
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # [B, chunk tokens, H, D]: the current chunk's keys before the rotation (pre-rope storage only)
        self.k_unrotated = (torch.zeros((batch, layout.chunk_tokens, heads, head_dim), dtype=dtype, device=device)
                            if keys_before_rotation else None)
        self.memory_valid = 0   # tokens, right-aligned against the window region
        self.window_valid = 0   # tokens, right-aligned against the current chunk

    def write_current(self, k: torch.Tensor, v: torch.Tensor, k_unrotated: torch.Tensor | None = None) -> None:
        """The current chunk's keys (rotated) and values; ``k_unrotated``: its keys before the rotation,
        which a context keeping them requires (a model that cannot give them refuses pre-rope storage)."""
        s, n = self.layout.current_start, k.shape[1]
        assert n == self.layout.chunk_tokens, f"chunk of {n} tokens, layout expects {self.layout.chunk_tokens}"
        self.k[:, s:s + n] = k
        self.v[:, s:s + n] = v
        if self.k_unrotated is not None:
            assert k_unrotated is not None, "this context stores keys before rotation: the model must give them"
            self.k_unrotated.copy_(k_unrotated)

    def stored(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The current chunk's K/V as the memory stores them: keys before the rotation when this
        context keeps them, else as attended."""
        k, v = self.current()
        return (k if self.k_unrotated is None else self.k_unrotated), v

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

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """The local window's valid K/V at full precision (between chunks, after ``commit``); the
        memory region is the memory's to restore, the current region is scratch."""
        k, v = self.window()
        return {"window_valid": integer(self.window_valid), "window_k": cpu_copy(k), "window_v": cpu_copy(v)}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        n = as_int(tensors["window_valid"])
        if not 0 <= n <= self.layout.window_tokens or tensors["window_k"].shape[1] != n:
            raise ValueError(f"window of {n} tokens does not fit this layout ({self.layout.window_tokens})")
        self.window_valid = n
        k, v = self.window()
        k.copy_(tensors["window_k"])
        v.copy_(tensors["window_v"])
        self.memory_valid = 0

    def commit(self) -> None:
        """The current chunk joins the window; the oldest window tokens fall out.

        In place, with no temporary (this runs every chunk): the last ``n`` tokens of the contiguous
        [window | current] range move one chunk to the left, copied front to back in pieces no longer
        than the shift, so that no piece overlaps its own source or one not yet copied."""
        lay = self.layout
        if lay.window_tokens == 0:
            return
        end, shift = lay.current_start, lay.chunk_tokens
        n = min(lay.window_tokens, self.window_valid + shift)
        for start in range(end - n, end, shift):
            stop = min(start + shift, end)
            self.k[:, start:stop].copy_(self.k[:, start + shift:stop + shift])
            self.v[:, start:stop].copy_(self.v[:, start + shift:stop + shift])
        self.window_valid = n
