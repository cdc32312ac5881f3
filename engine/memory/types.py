"""Small value types shared by the tiered KV store (no torch at import time).

Owns the vocabulary the manager (decides) and the transfer workers (move bytes) speak, so neither needs
the other's internals: a ``ChunkId`` names a chunk's KV; a ``Tier`` says where a copy lives; ``StoreSpec``,
``LoadSpec`` and ``WriteBackSpec`` are what a ``prepare_*`` call hands to the mover; a ``TransferResult``
is what comes back (bytes, seconds, ok, and the captured exception when not ok); a ``ManagerEvent`` is
one line of the manager's log; a ``StagedSet`` is what ``KVStore.take_staged`` hands back (hits with
their per-layer K/V views, misses, failed). The store's user-facing errors live here too: all are
``WorldPagerError`` subclasses whose message is one line naming the bad value.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from engine.errors import InputError, OutputError, WorldPagerError

if TYPE_CHECKING:
    import torch

ChunkId = int   # the chunk's index in the session; chunks are written once and never rewritten
KV = list   # list[tuple[Tensor, Tensor]]: per layer (k, v), each [1, T, H, D]


class Tier(enum.Enum):
    DEVICE = "device"   # staging slots (GPU memory; CPU memory without a GPU)
    HOST = "host"       # the one pool allocated at start-up
    DISK = "disk"       # the spill directory


@dataclass(frozen=True)
class StoreSpec:
    """A put in flight: write ``chunk`` into host slot ``slot`` (already taken off everyone else)."""

    chunk: ChunkId
    slot: int
    evicted: tuple[ChunkId, ...] = ()   # clean blocks whose host copy this allocation dropped


@dataclass(frozen=True)
class LoadSpec:
    """A load in flight: ``chunk`` is (or will be, when ``src`` is DISK) in host slot ``slot``."""

    chunk: ChunkId
    src: Tier
    slot: int
    evicted: tuple[ChunkId, ...] = ()


@dataclass(frozen=True)
class WriteBackSpec:
    """A write-back in flight: copy the dirty block in host slot ``slot`` to the disk tier."""

    chunk: ChunkId
    slot: int


@dataclass
class TransferResult:
    """The outcome of one asynchronous operation; failures are data, never lost in a thread."""

    op: str                      # "store" | "load" | "writeback" | "stage"
    chunk: ChunkId
    ok: bool
    nbytes: int = 0
    seconds: float = 0.0
    error: BaseException | None = None

    def describe(self) -> str:
        if self.ok:
            return f"{self.op} chunk {self.chunk}: {self.nbytes} B in {self.seconds * 1e3:.1f} ms"
        return f"{self.op} chunk {self.chunk} failed: {type(self.error).__name__}: {self.error}"


@dataclass(frozen=True)
class ManagerEvent:
    """One placement decision: kind is store|evict|load|writeback|rollback|fail|drop, plus where."""

    kind: str
    chunk: ChunkId
    slot: int | None = None
    detail: str = ""


@dataclass
class Counters:
    """Monotonic counters kept by the manager (plain ints, cheap to snapshot)."""

    stores: int = 0
    store_rollbacks: int = 0
    evictions: int = 0
    loads_host: int = 0
    loads_disk: int = 0
    load_failures: int = 0
    load_refusals: int = 0      # prepare_load found no slot to read into (reported as a miss)
    store_waits: int = 0        # prepare_store found no slot (the put waits for write-back)
    store_waits_on_loads: int = 0   # ... and no dirty block either: only loads held the pool
    writebacks: int = 0
    writeback_failures: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class StagedSet:
    """What ``take_staged`` found: hits with their per-layer K/V views, misses (failed ⊆ misses)."""

    generation: int
    requested: tuple[ChunkId, ...]
    kv: dict[ChunkId, KV]
    misses: tuple[ChunkId, ...]
    failed: tuple[ChunkId, ...]

    @property
    def hits(self) -> tuple[ChunkId, ...]:
        return tuple(c for c in self.requested if c in self.kv)

    def copy_into(self, dest: Mapping[ChunkId, Sequence[tuple[torch.Tensor, torch.Tensor]]]) -> list:
        """Copy each hit into ``dest[c]`` (per-layer (k, v) views, e.g. an attention context's memory
        slot, ``engine.session.memory.context_slot_views``)."""
        copied = []
        for chunk, layers in self.kv.items():
            if chunk in dest:
                for (k_dst, v_dst), (k, v) in zip(dest[chunk], layers, strict=True):
                    k_dst.copy_(k)
                    v_dst.copy_(v)
                copied.append(chunk)
        return copied


# ---------------------------------------------------------------------------------------------
# User-facing errors (one line each; the CLI prints them and exits 1).

class CapacityError(WorldPagerError):
    """The host pool is full and there is no disk tier (or it cannot take more)."""


class SpillLockedError(OutputError):
    """Another session holds the spill directory's lock."""


class DiskFullError(OutputError):
    """The spill directory's file system (or its configured cap) has no room for another block."""


class SpillIndexError(InputError):
    """A spill directory's ``index.json`` is missing, unreadable or not an index (one line naming it)."""

    def __init__(self, path, reason: str):
        super().__init__(f"spill index {path}: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self):
        return type(self), (self.path, self.reason)


class CorruptBlockError(Exception):
    """A disk block failed its checksum; reported as a failed read, never returned as data."""
