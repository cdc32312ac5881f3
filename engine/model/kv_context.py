"""The attention context a world model reads and writes: an explicit, caller-owned, model-agnostic object.

Owns, per layer, the self-attention K/V laid out in one preallocated buffer pair as

    [ memory (retrieved chunks, sink) | local window | current chunk ]     (token axis)

with every shape taken from the model's ``KVLayout`` (layers, tokens per frame and chunk, heads, head
dim, window frames). The model writes the current chunk's K/V on every forward (keys after its time
rotation, e.g. MG2's RoPE); nothing becomes history until the caller calls ``commit()`` after the
chunk's clean pass. A context made with ``keys_before_rotation`` also keeps the current chunk's keys as
they were before the rotation (one chunk per layer, ``stored_kv``), for a memory that stores keys
pre-rope (``engine.session.memory``); everything the model attends stays rotated. For MG2 this reproduces its rolling KV cache exactly: a chunk attends to the
previous ``window_frames`` latent frames and to itself, without a mask.

Anything else a model keeps per layer (MG2: the action module's rolling windows, the start image's
cross-attention K/V) is the model's own object, attached in ``WorldModel.prepare_context`` as
``LayerState.extra``; the context only commits it with the chunk (``ModelLayerState.commit``) and
never looks inside.

The memory region is right-aligned against the window so that the valid tokens are always one
contiguous range; whoever fills it (the session's memory) writes into ``memory_slot`` views.

With ``paging="layer"`` (``--kv-paging layer``) the layers keep their K/V on the host and the device holds
one layer's (plus the next one's, prefetched) while the model computes it (``engine.model.kv_pager``);
the interface is the same. ``kv_device_bytes`` and ``kv_bytes_to_device`` say what the device held and
what was copied to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from engine.layout import KVLayout
from engine.state_tensors import as_int, cpu_copy, integer, nest, sub


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


class ModelLayerState(Protocol):
    """A model's own per-layer state kept in the context; it rolls forward when the chunk commits."""

    def commit(self) -> None: ...

    def state_tensors(self) -> dict[str, torch.Tensor]: ...

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], device, dtype) -> None: ...


@dataclass
class LayerState:
    self_kv: LayerKV
    extra: ModelLayerState | None = None   # the model's own state, attached by its prepare_context


class AttentionContext:
    """All per-layer attention state of one generation session, shaped by the model's ``KVLayout``."""

    def __init__(self, layout: KVLayout, memory_chunks: int = 0, batch: int = 1,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 keys_before_rotation: bool = False, paging: str = "chunk"):
        assert paging in ("chunk", "layer"), f"paging {paging!r}"
        self.layout = layout
        self.paging = paging
        self.regions = ContextLayout(
            memory_tokens=memory_chunks * layout.tokens_per_chunk,
            window_tokens=layout.window_tokens,
            chunk_tokens=layout.tokens_per_chunk,
        )
        device = self.device = torch.device(device)
        self.dtype = dtype
        self.pager = None
        if paging == "layer":
            self.layers: list[LayerState] = self._paged_layers(batch, dtype, device, keys_before_rotation)
        else:
            self.layers = [LayerState(LayerKV(self.regions, batch, layout.heads, layout.head_dim, dtype, device,
                                              keys_before_rotation))
                           for _ in range(layout.layers)]
        self.chunks_committed = 0
        # Which chunk each valid memory slot holds, in context order (set by whoever fills the memory
        # region; a model that looks up its context frames' cameras reads it).
        self.memory_chunks: list[int] = []

    def _paged_layers(self, batch: int, dtype: torch.dtype, device: torch.device,
                      keys_before_rotation: bool) -> list[LayerState]:
        from engine.model.kv_pager import LayerPager, PagedLayerKV

        lay = self.layout
        kvs = [PagedLayerKV(self.regions, batch, lay.heads, lay.head_dim, dtype, device, keys_before_rotation, i)
               for i in range(lay.layers)]
        self.pager = LayerPager(kvs, self.regions, batch, lay.heads, lay.head_dim, dtype, device)
        for kv in kvs:
            kv.pager = self.pager
        return [LayerState(kv) for kv in kvs]

    @property
    def kv_device_bytes(self) -> int:
        """Bytes of self-attention K/V buffers on the model's device (all layers, or the pages)."""
        if self.pager is not None:
            return self.pager.device_bytes
        return sum(2 * s.self_kv.k.numel() * s.self_kv.k.element_size() for s in self.layers)

    @property
    def kv_bytes_to_device(self) -> int:
        """Context K/V bytes copied host → device so far (0 with chunk paging: it stays on the device)."""
        return 0 if self.pager is None else self.pager.bytes_to_device

    def _host_ready(self) -> None:
        if self.pager is not None:
            self.pager.host_ready()

    def current_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer (k, v) views [B, chunk tokens, H, D] of the current chunk (valid until the next forward)."""
        self._host_ready()
        return [state.self_kv.current() for state in self.layers]

    def stored_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer (k, v) of the current chunk as the memory stores them (``LayerKV.stored``)."""
        self._host_ready()
        return [state.self_kv.stored() for state in self.layers]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Every layer's window K/V and model state, and the count of committed chunks (see
        ``engine.state_tensors``); taken between chunks."""
        out = {"chunks_committed": integer(self.chunks_committed)}
        for index, state in enumerate(self.layers):
            out.update(nest(f"layer{index}", state.self_kv.state_tensors()))
            if state.extra is not None:
                out.update(nest(f"layer{index}.extra", state.extra.state_tensors()))
        return out

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """Put back what ``state_tensors`` took (the model's ``prepare_context`` has attached its
        per-layer state already)."""
        self.chunks_committed = as_int(tensors["chunks_committed"])
        for index, state in enumerate(self.layers):
            part = sub(f"layer{index}", tensors)
            state.self_kv.load_state_tensors(part)
            if state.extra is not None:
                state.extra.load_state_tensors(sub("extra", part), self.device, self.dtype)

    def commit(self) -> None:
        """After the clean pass: every layer's current chunk (and the model's own state) becomes history."""
        for state in self.layers:
            state.self_kv.commit()
            if state.extra is not None:
                state.extra.commit()
        self.chunks_committed += 1
