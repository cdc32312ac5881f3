"""Streaming a DiT's blocks from host memory through two device slots (``--device-mem`` below the weights).

Owns ``BlockStreamer``: the blocks ``engine.planner.weight_plan.resident_blocks`` keeps resident stay
where they are; every other block's tensors (parameters and buffers, quantised or not) are packed into
one flat byte buffer in host memory (pinned on CUDA; on the CPU a separate copy, the block's own tensors
freed) and, when the block is about to run, copied into one of ``STREAM_BUFFERS`` device slots (each the
size of the largest streamed block); the block's tensors are then views of its slot. Streamed blocks
alternate between the slots, so block i+1 is copied in while block i computes: on CUDA on a copy stream,
the compute stream waiting for the copy's event before the block runs, and the copy into a slot waiting
for the event recorded when its previous block finished; on the CPU the same code path, synchronous.
A slot that still holds the block asked for is not copied again. The bytes are copied unchanged, so a
streamed block computes exactly what the resident one would (bit for bit).

The models run their blocks through ``blocks_in_order(self.blocks)`` (plain iteration when nothing
streams): each block is loaded just before it is yielded and the next streamed one (wrapping to the
first for the next forward) is prefetched. ``streamed_bytes`` counts the bytes copied (the log's
``weight_bytes_streamed``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn as nn

from engine.planner.weight_plan import STREAM_BUFFERS

ALIGN = 64     # bytes: every tensor of a packed block starts on this boundary (its views stay aligned)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def block_tensors(block: nn.Module) -> list[tuple[nn.Module, str, torch.Tensor]]:
    """Every parameter and buffer of ``block`` as (owning module, attribute name, tensor)."""
    found = []
    for module in block.modules():
        for name, tensor in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False)):
            if tensor is not None:
                found.append((module, name, tensor))
    return found


def block_bytes(block: nn.Module) -> int:
    """The bytes of ``block`` packed for streaming (its tensors, each aligned)."""
    return sum(_align(t.numel() * t.element_size()) for _, _, t in block_tensors(block))


@dataclass
class _Entry:
    module: nn.Module
    name: str
    offset: int
    nbytes: int
    shape: torch.Size
    dtype: torch.dtype


class _Packed:
    """One streamed block: its tensors' places in a flat host buffer."""

    def __init__(self, block: nn.Module, device: torch.device):
        self.entries: list[_Entry] = []
        offset = 0
        for module, name, tensor in block_tensors(block):
            nbytes = tensor.numel() * tensor.element_size()
            self.entries.append(_Entry(module, name, offset, nbytes, tensor.shape, tensor.dtype))
            offset += _align(nbytes)
        self.nbytes = offset
        pin = device.type == "cuda"
        self.host = torch.empty(offset, dtype=torch.uint8, pin_memory=pin)
        for entry, (_, _, tensor) in zip(self.entries, block_tensors(block)):
            flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
            self.host[entry.offset:entry.offset + entry.nbytes].copy_(flat)

    def bind(self, slot: torch.Tensor) -> None:
        """Point the block's tensors at their bytes in ``slot``."""
        for e in self.entries:
            view = slot[e.offset:e.offset + e.nbytes].view(e.dtype).view(e.shape)
            if e.name in e.module._parameters:
                e.module._parameters[e.name] = nn.Parameter(view, requires_grad=False)
            else:
                e.module._buffers[e.name] = view


class BlockStreamer:
    """Blocks ``resident`` onward of ``blocks`` live in host memory and pass through ``STREAM_BUFFERS``
    device slots; see the module's docstring."""

    def __init__(self, blocks: nn.ModuleList, resident: int, device: torch.device, buffers: int = STREAM_BUFFERS):
        self.blocks, self.resident, self.device, self.buffers = blocks, resident, device, buffers
        self.cuda = device.type == "cuda"
        self.packed: dict[int, _Packed] = {}
        for i in range(resident, len(blocks)):   # block by block: host memory never holds a block twice
            self.packed[i] = _Packed(blocks[i], device)
            self._unbind(i)
        slot_bytes = max(p.nbytes for p in self.packed.values())
        self.slots = [torch.empty(slot_bytes, dtype=torch.uint8, device=device) for _ in range(buffers)]
        self.slot_bytes = slot_bytes
        self.holds: list[int | None] = [None] * buffers     # which block each slot holds (or is copying)
        self.busy: list[bool] = [False] * buffers            # a yielded block still computing from it
        self.copied = [None] * buffers                       # CUDA: event after the copy into the slot
        self.released = [None] * buffers                     # CUDA: event after the slot's block ran
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.streamed_bytes = 0

    @property
    def streamed(self) -> int:
        return len(self.packed)

    def _slot(self, i: int) -> int:
        return (i - self.resident) % self.buffers

    def _unbind(self, i: int) -> None:
        for e in self.packed[i].entries:
            empty = torch.empty(0, dtype=e.dtype, device=self.device)
            if e.name in e.module._parameters:
                e.module._parameters[e.name] = nn.Parameter(empty, requires_grad=False)
            else:
                e.module._buffers[e.name] = empty

    def _copy(self, i: int) -> None:
        """Start copying block ``i`` into its slot (its previous block has finished with it)."""
        s = self._slot(i)
        if self.holds[s] == i:
            return
        assert not self.busy[s], "a slot in use is never overwritten"
        packed, slot = self.packed[i], self.slots[s]
        if self.cuda:
            with torch.cuda.stream(self.stream):
                if self.released[s] is not None:
                    self.stream.wait_event(self.released[s])
                slot[:packed.nbytes].copy_(packed.host, non_blocking=True)
                self.copied[s] = torch.cuda.Event()
                self.copied[s].record(self.stream)
        else:
            slot[:packed.nbytes].copy_(packed.host)
        if self.holds[s] is not None:
            self._unbind(self.holds[s])
        self.holds[s] = i
        self.streamed_bytes += packed.nbytes

    def _next(self, i: int) -> int:
        return i + 1 if i + 1 < len(self.blocks) else self.resident

    def _acquire(self, i: int) -> None:
        """Block ``i`` is in its slot, bound, and (CUDA) the compute stream waits for its copy."""
        s = self._slot(i)
        self._copy(i)
        if self.cuda and self.copied[s] is not None:
            torch.cuda.current_stream(self.device).wait_event(self.copied[s])
        self.packed[i].bind(self.slots[s])
        self.busy[s] = True

    def _release(self, i: int) -> None:
        s = self._slot(i)
        if self.cuda:
            self.released[s] = torch.cuda.Event()
            self.released[s].record(torch.cuda.current_stream(self.device))
        self.busy[s] = False

    def _prefetch(self, i: int) -> None:
        """Copy the streamed block after ``i`` in ahead, if its slot is free."""
        j = self._next(i)
        if j in self.packed and not self.busy[self._slot(j)]:
            self._copy(j)

    def __iter__(self) -> Iterator[nn.Module]:
        for i, block in enumerate(self.blocks):
            if i not in self.packed:
                if i + 1 == self.resident:
                    self._prefetch(i)
                yield block
                continue
            self._acquire(i)
            self._prefetch(i)
            try:
                yield block
            finally:
                self._release(i)
            self._prefetch(i)

    def facts(self) -> dict:
        return {"streamed_blocks": self.streamed, "slot_bytes": self.slot_bytes,
                "host_bytes": sum(p.nbytes for p in self.packed.values())}


def attach_streamer(blocks: nn.ModuleList, resident: int, device: torch.device,
                    buffers: int = STREAM_BUFFERS) -> BlockStreamer | None:
    """Stream ``blocks`` from ``resident`` on (None, nothing changed, when every block is resident)."""
    if resident >= len(blocks):
        return None
    streamer = BlockStreamer(blocks, resident, device, buffers)
    blocks._weight_streamer = streamer      # noqa: SLF001 (read by blocks_in_order)
    return streamer


def blocks_in_order(blocks: nn.ModuleList):
    """The blocks in order, each loaded into the device when it streams (``BlockStreamer``)."""
    streamer = getattr(blocks, "_weight_streamer", None)
    return iter(blocks) if streamer is None else iter(streamer)
