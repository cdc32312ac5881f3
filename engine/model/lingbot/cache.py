"""LingBot-World-Fast's attention caches, with the official bookkeeping.

Owns, per layer:

* ``RollingKV`` — the self-attention K/V buffer ``[B, size, H, D]`` (keys after RoPE at their absolute
  latent frame; never re-rotated) with ``global_end`` (tokens generated so far, as the model counts them)
  and ``local_end`` (valid rows). ``update(k, v, current_start)`` applies the official rule: on the first
  forward of a chunk that would overflow the buffer, evict the oldest rows after the ``sink`` (a left
  shift of the non-sink part); write the chunk to the rows ending at the new local end (later forwards of
  the same chunk overwrite the same rows); attend to the last ``max_attention`` valid rows.
* ``CrossKV`` — the text K/V, computed by the first forward of a run and reused afterwards.

The DiT sees a layer's self-attention cache only through ``SelfKV.update``, so a session can later
hand it a view of its own attention context (sink and retrieved memory, window, chunk) instead.

The ``positions`` bookkeeping (which absolute token each cache row holds) is ours, for tests and a
later memory; it does not change the numerics.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch


class SelfKV(Protocol):
    """What a self-attention layer needs from its cache."""

    def update(self, k: torch.Tensor, v: torch.Tensor, current_start: int,
               k_unrotated: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the chunk's k/v [B, n, H, D] (tokens from ``current_start``; ``k_unrotated``: its keys
        before RoPE, for a cache that keeps them); return the K/V to attend."""


class RollingKV:
    def __init__(self, batch: int, size: int, heads: int, head_dim: int, sink: int,
                 max_attention: int, dtype: torch.dtype, device: torch.device | str):
        assert 0 <= sink <= size and max_attention > 0, (sink, size, max_attention)
        shape = (batch, size, heads, head_dim)          # [B, cache tokens, H, D]
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.positions = torch.full((size,), -1, dtype=torch.int64)   # absolute token index per row
        self.size, self.sink, self.max_attention = size, sink, max_attention
        self.global_end = 0
        self.local_end = 0

    def _evict(self, tokens: int) -> None:
        """Drop ``tokens`` rows after the sink, moving the later valid rows left."""
        keep = self.local_end - tokens - self.sink
        src = slice(self.sink + tokens, self.sink + tokens + keep)
        dst = slice(self.sink, self.sink + keep)
        self.k[:, dst] = self.k[:, src].clone()
        self.v[:, dst] = self.v[:, src].clone()
        self.positions[dst] = self.positions[src].clone()

    def update(self, k: torch.Tensor, v: torch.Tensor, current_start: int,
               k_unrotated: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the chunk's k/v [B, n, H, D] (tokens from ``current_start``); the K/V to attend to (the
        keys before RoPE are not kept: this cache is the reference's, with no memory)."""
        n = k.shape[1]
        assert n <= self.size, f"chunk of {n} tokens does not fit a cache of {self.size}"
        end = current_start + n
        grown = end - self.global_end
        evicted = 0
        if end > self.global_end and self.local_end + n > self.size:
            evicted = self.local_end + n - self.size
            self._evict(evicted)
        local_end = self.local_end + grown - evicted
        assert n <= local_end <= self.size, (local_end, n, self.size)
        self.k[:, local_end - n:local_end] = k
        self.v[:, local_end - n:local_end] = v
        self.positions[local_end - n:local_end] = torch.arange(current_start, end)
        self.global_end, self.local_end = end, local_end
        start = max(0, local_end - self.max_attention)
        return self.k[:, start:local_end], self.v[:, start:local_end]

    def valid(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[:, :self.local_end], self.v[:, :self.local_end]

    def frames(self, frame_seqlen: int) -> torch.Tensor:
        """Absolute latent frame held by each valid slot of ``frame_seqlen`` rows."""
        return self.positions[:self.local_end:frame_seqlen] // frame_seqlen


@dataclass
class CrossKV:
    k: torch.Tensor | None = None     # [B, text_len, H, D] after the k RMS norm
    v: torch.Tensor | None = None

    @property
    def is_init(self) -> bool:
        return self.k is not None


@dataclass
class FastCaches:
    """All per-layer caches of one run (allocated fresh before chunk 0)."""

    self_kv: list[RollingKV]         # any SelfKV works for the model; the loop's helpers read RollingKV
    cross: list[CrossKV] = field(default_factory=list)

    @classmethod
    def allocate(cls, layers: int, batch: int, size: int, heads: int, head_dim: int, sink: int,
                 max_attention: int | None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> "FastCaches":
        limit = size if max_attention is None else max_attention
        return cls([RollingKV(batch, size, heads, head_dim, sink, limit, dtype, device)
                    for _ in range(layers)], [CrossKV() for _ in range(layers)])
