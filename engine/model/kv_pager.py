"""KV paged per layer (``--kv-paging layer``): the device holds the context K/V of one layer at a time.

Owns the device side of an ``AttentionContext`` made with ``paging="layer"``: two device pages, each one
layer's buffer pair ``[ memory | window | current ]`` (the same ``ContextLayout`` as a host layer), and
the copies between them and the host. The context's layers (``PagedLayerKV``) keep their whole K/V on
the host (pinned on CUDA) — the memory fills its slots there, the window rolls there, save points read
it there — so everything that is not the model's forward sees the same object as with chunk paging.

The model notices nothing: a layer's ``write_current`` and ``context`` ask the pager for its page
(``LayerPager.acquire``). Acquiring layer ``l`` (once per forward and layer, the first call of the two)

1. makes the page that held the previous layer free (on CUDA an event on the compute stream);
2. takes the page already prefetched with ``l`` (on CUDA the compute stream waits for the copy's event),
   or fills a page now: the valid memory and window tokens of ``l``, copied from the host;
3. starts prefetching layer ``l + 1`` into the other page (on CUDA on a copy stream, after the event
   of step 1, so that it overlaps layer ``l``'s compute; on the CPU the same code copies at once).

``write_current`` writes the chunk's K/V into the page and back into the host layer (the current region,
and the keys before rotation when kept), so that after the clean pass the host holds what commit and
the store read, as with chunk paging. A page whose current region was not written in this forward
(``context`` without ``write_current``) takes it from the host first. Copies are copies: the device
attends the very bytes chunk paging would hold, so frames are equal bit for bit.

The host side changes between forwards only through the memory's fill, the rerotation of resident
slots, ``commit`` and a resume; each ends in ``set_memory_valid``, ``commit`` or ``load_state_tensors``,
which drop the pages (``invalidate``), so a page never serves stale tokens.

Counters: ``bytes_to_device`` (host → device context K/V since the pager was made) and ``device_bytes``
(both pages: the peak context K/V the device holds; ``engine.planner.kv_paging`` has the formula).
"""
from __future__ import annotations

import torch

from engine.model.kv_layer import ContextLayout, LayerKV


class _Page:
    """One device buffer pair and the layer it holds (None: nothing valid)."""

    def __init__(self, layout: ContextLayout, batch: int, heads: int, head_dim: int, dtype, device):
        shape = (batch, layout.total_tokens, heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.layer: int | None = None
        self.current_fresh = False          # the current region was written in this forward
        cuda = torch.device(device).type == "cuda"
        self.ready = torch.cuda.Event() if cuda else None      # the prefetch copy has landed
        self.released = torch.cuda.Event() if cuda else None   # the compute that read it was enqueued
        self.pending = False                # a prefetch is in flight (ready not yet waited for)
        self.was_released = False

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()


class LayerPager:
    """Device pages of an attention context's layers (see the module docstring)."""

    def __init__(self, layers: list["PagedLayerKV"], layout: ContextLayout, batch: int, heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device, buffers: int = 2):
        assert buffers >= 2, "one page computes while the next is filled"
        self.layers = layers
        self.layout = layout
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.pages = [_Page(layout, batch, heads, head_dim, dtype, self.device) for _ in range(buffers)]
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.active: _Page | None = None
        self.bytes_to_device = 0

    @property
    def device_bytes(self) -> int:
        return sum(page.nbytes for page in self.pages)

    def _holding(self, layer: int) -> _Page | None:
        return next((p for p in self.pages if p.layer == layer), None)

    def _spare(self, busy: _Page | None) -> _Page:
        """A page other than ``busy``: one holding nothing first, else the least recently filled."""
        free = [p for p in self.pages if p is not busy]
        return next((p for p in free if p.layer is None), free[0])

    def acquire(self, layer: int) -> _Page:
        """Layer ``layer``'s page, filled, with the next layer's prefetch started."""
        if self.active is not None and self.active.layer == layer:
            return self.active
        previous, self.active = self.active, None
        if previous is not None:
            self._release(previous)
        page = self._holding(layer)
        if page is None:
            page = self._spare(previous)
            self._settle(page)
            self._fill(page, layer)
        else:
            self._settle(page)
        self.active = page
        self.pages.remove(page)
        self.pages.append(page)           # most recently used last: the spare is the other one
        nxt = layer + 1
        if nxt < len(self.layers) and self._holding(nxt) is None:
            self._prefetch(self._spare(page), nxt)
        return page

    def _release(self, page: _Page) -> None:
        if self.cuda:
            page.released.record(torch.cuda.current_stream(self.device))
            page.was_released = True

    def _settle(self, page: _Page) -> None:
        """The compute stream waits for a prefetch into ``page`` still in flight."""
        if page.pending:
            torch.cuda.current_stream(self.device).wait_event(page.ready)
            page.pending = False

    def _fill(self, page: _Page, layer: int) -> None:
        """Copy ``layer``'s valid memory and window tokens from the host into ``page`` (current stream)."""
        host = self.layers[layer]
        lay = self.layout
        start = lay.current_start - host.window_valid - host.memory_valid
        end = lay.current_start
        if end > start:
            page.k[:, start:end].copy_(host.k[:, start:end], non_blocking=self.cuda)
            page.v[:, start:end].copy_(host.v[:, start:end], non_blocking=self.cuda)
            self.bytes_to_device += 2 * host.k[:, start:end].numel() * host.k.element_size()
        page.layer = layer
        page.current_fresh = False

    def _prefetch(self, page: _Page, layer: int) -> None:
        if not self.cuda:
            self._fill(page, layer)
            return
        self._settle(page)
        stream = self.copy_stream
        if page.was_released:
            stream.wait_event(page.released)   # the layer it held has been computed
        with torch.cuda.stream(stream):
            self._fill(page, layer)
            page.ready.record(stream)
        page.pending = True

    def current_from_host(self, page: _Page, host: LayerKV) -> None:
        """The host's current region into ``page`` (a ``context`` with no ``write_current`` before it)."""
        s = self.layout.current_start
        page.k[:, s:].copy_(host.k[:, s:], non_blocking=self.cuda)
        page.v[:, s:].copy_(host.v[:, s:], non_blocking=self.cuda)
        self.bytes_to_device += 2 * host.k[:, s:].numel() * host.k.element_size()
        page.current_fresh = True

    def invalidate(self) -> None:
        """The host side is about to change (or did): no page holds valid tokens any more."""
        self.host_ready()
        self.active = None
        for page in self.pages:
            page.layer = None
            page.current_fresh = False
            page.pending = False
            page.was_released = False

    def host_ready(self) -> None:
        """Every copy to or from the host has landed (before the host side is read or written)."""
        if self.cuda:
            self.copy_stream.synchronize()
            torch.cuda.current_stream(self.device).synchronize()


class PagedLayerKV(LayerKV):
    """A layer whose K/V live on the host; the model's forward reads and writes its device page."""

    def __init__(self, layout: ContextLayout, batch: int, heads: int, head_dim: int, dtype: torch.dtype,
                 device: torch.device, keys_before_rotation: bool, index: int):
        host = torch.device("cpu")
        super().__init__(layout, batch, heads, head_dim, dtype, host, keys_before_rotation)
        if torch.device(device).type == "cuda":   # pinned: the copies run asynchronously
            self.k, self.v = self.k.pin_memory(), self.v.pin_memory()
            if self.k_unrotated is not None:
                self.k_unrotated = self.k_unrotated.pin_memory()
        self.index = index
        self.pager: LayerPager | None = None   # set by the context once every layer exists

    def write_current(self, k: torch.Tensor, v: torch.Tensor, k_unrotated: torch.Tensor | None = None) -> None:
        page = self.pager.acquire(self.index)
        s, n = self.layout.current_start, k.shape[1]
        assert n == self.layout.chunk_tokens, f"chunk of {n} tokens, layout expects {self.layout.chunk_tokens}"
        page.k[:, s:s + n] = k
        page.v[:, s:s + n] = v
        page.current_fresh = True
        blocking = not self.pager.cuda
        self.k[:, s:s + n].copy_(k, non_blocking=not blocking)     # written back: commit and store read it
        self.v[:, s:s + n].copy_(v, non_blocking=not blocking)
        if self.k_unrotated is not None:
            assert k_unrotated is not None, "this context stores keys before rotation: the model must give them"
            self.k_unrotated.copy_(k_unrotated, non_blocking=not blocking)

    def context(self) -> tuple[torch.Tensor, torch.Tensor]:
        lay = self.layout
        assert self.memory_valid == 0 or self.window_valid == lay.window_tokens, (
            "memory is only attended once the window is full (contiguity)")
        page = self.pager.acquire(self.index)
        if not page.current_fresh:
            self.pager.current_from_host(page, self)
        start = lay.current_start - self.window_valid - self.memory_valid
        return page.k[:, start:], page.v[:, start:]

    def set_memory_valid(self, tokens: int) -> None:
        super().set_memory_valid(tokens)
        self.pager.invalidate()

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.pager.invalidate()
        super().load_state_tensors(tensors)

    def commit(self) -> None:
        self.pager.invalidate()
        super().commit()
