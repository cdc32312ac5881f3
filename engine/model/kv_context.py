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

from engine.facts.layout import KVLayout
from engine.model.kv_layer import ContextLayout, LayerKV  # noqa: F401 (the context's layers, re-exported)
from engine.model.state_tensors import as_int, integer, nest, sub


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
        ``engine.model.state_tensors``); taken between chunks."""
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
