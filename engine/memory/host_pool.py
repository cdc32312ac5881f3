"""The host pool: one allocation made at start-up that holds every pool-resident chunk.

Contract. ``HostPool(n_slots, slot_bytes)`` maps one anonymous, pre-faulted region of
``n_slots * slot_bytes`` bytes (mmap: page-aligned, so every slot is 4 KiB-aligned because
``slot_bytes`` is a multiple of 4096) and views it as one uint8 tensor; ``slot(i)`` is a zero-copy
uint8 view of slot i and ``buffer(i)`` the same bytes as a writable memoryview for ``os.preadv`` /
``os.pwritev``. Host memory is constant for the session: nothing here allocates after ``__init__``.

When CUDA is present the one region is page-locked with ``cudaHostRegister`` (exact size; torch's
caching pinned allocator would round a 20 GiB request up to 32 GiB) and unregistered by ``close()``.

Sizing: ``pool_slots(host_bytes, baseline_bytes, slot_bytes)`` = (budget − process baseline − 2 GiB
margin) // slot_bytes, a ``ConfigError`` naming the numbers when that is below the minimum.
"""
from __future__ import annotations

import mmap

import psutil
import torch

from engine.errors import ConfigError
from engine.memory.budget import ALIGN, DEFAULT_MARGIN, MIN_SLOTS, pool_slots  # noqa: F401 (re-exported)

GiB = 1 << 30


def process_baseline_bytes() -> int:
    """Resident memory of this process now (measured once, at start-up, before the pool exists)."""
    return psutil.Process().memory_info().rss


class HostPool:
    """``n_slots`` equal, 4 KiB-aligned slots in one region (pinned when CUDA is present)."""

    def __init__(self, n_slots: int, slot_bytes: int, pin: bool | None = None):
        assert n_slots > 0 and slot_bytes % ALIGN == 0, (n_slots, slot_bytes)
        self.n_slots = n_slots
        self.slot_bytes = slot_bytes
        self.nbytes = n_slots * slot_bytes
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        self._map = mmap.mmap(-1, self.nbytes, flags=flags)
        self._view = memoryview(self._map)
        self.data = torch.frombuffer(self._map, dtype=torch.uint8)  # [n_slots * slot_bytes]
        assert self.data.data_ptr() % ALIGN == 0
        self.pinned = False
        if pin if pin is not None else torch.cuda.is_available():
            self._register()

    def _register(self) -> None:
        rc = torch.cuda.cudart().cudaHostRegister(self.data.data_ptr(), self.nbytes, 0)
        code = int(rc.value) if hasattr(rc, "value") else int(rc)
        if code != 0:
            raise ConfigError(f"could not pin the {self.nbytes / GiB:.2f} GiB host pool "
                              f"(cudaHostRegister error {code}); lower --host-mem")
        self.pinned = True

    def slot(self, i: int) -> torch.Tensor:
        """uint8 view [slot_bytes] of slot i (no copy)."""
        assert 0 <= i < self.n_slots, i
        return self.data[i * self.slot_bytes:(i + 1) * self.slot_bytes]

    def buffer(self, i: int) -> memoryview:
        """Writable memoryview of slot i's bytes (the same memory as ``slot(i)``)."""
        assert 0 <= i < self.n_slots, i
        return self._view[i * self.slot_bytes:(i + 1) * self.slot_bytes]

    def close(self) -> None:
        """Unpin; the mapping itself goes when the last view of it does."""
        if self.pinned:
            torch.cuda.cudart().cudaHostUnregister(self.data.data_ptr())
            self.pinned = False

    def __del__(self):
        if getattr(self, "pinned", False) and torch.cuda.is_available():
            self.close()
