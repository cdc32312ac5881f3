"""The placement manager: decides where each chunk's KV lives; holds no tensors and imports no torch.

Contract. The host pool has ``n_slots`` equal slots. A chunk in the pool is in one of four states:
``storing`` (a put in flight: not loadable), ``loading`` (a disk read into the slot in flight),
``dirty`` (only copy is in the pool) or ``clean`` (also on disk, so its slot may be reclaimed).
Every asynchronous operation is two-phase and the block is pinned in between, so nothing in flight is
ever evicted:

    prepare_store(c) -> StoreSpec | None      complete_store(c, success)     (failure rolls back)
    prepare_load(c)  -> LoadSpec  | None      complete_load(c, success)      (HOST or DISK source)
    prepare_writeback() -> [WriteBackSpec]    complete_writeback(c, success)

Policies. Allocation takes the lowest free slot, else evicts the least recently used clean unpinned
block (its disk copy remains). Loads never hold the whole pool: at most ``n_slots - 1`` blocks (at
least one) are pinned by loads (disk reads in flight or pool copies being staged), and no disk read
takes a slot while a store waits for one, so a store only ever waits for write-back, never for a read
(a slow drive's reads become misses instead). Write-back is *urgent* while a store waits or the next one
would (no reclaimable slot): the writer then does not step aside for reads. Write-back is needed when reclaimable space (free + clean unpinned slots,
counting write-backs already in flight as soon reclaimable) falls below ``low_water`` chunks; it then
picks dirty blocks coldest first until the projection reaches ``high_water``. A block being written
stays readable. Without a disk tier (dram-only) a full pool of dirty blocks is a ``CapacityError``.

Drops (``--spill-max``): ``drop(c)`` forgets a chunk the session will never retrieve again: it leaves
the disk set at once, its pool slot is freed at once when nothing holds it, else when the last pin goes
(a dirty block is then never written back). ``drop`` says whether the chunk had a disk block (the
store retires it).

Recency: one ordered map of pool blocks, least recent first; put, load and ``touch`` make a block most
recent. ``lookup(c)`` answers HOST, DISK or None. Decisions are recorded as ``ManagerEvent``s (bounded;
drain with ``take_events``) and in ``Counters``. Not thread-safe: the store serialises calls.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass

from engine.memory.types import (CapacityError, ChunkId, Counters, LoadSpec, ManagerEvent,
                                 StoreSpec, Tier, WriteBackSpec)

STORING, LOADING, DIRTY, CLEAN = "storing", "loading", "dirty", "clean"


@dataclass
class _Block:
    slot: int
    state: str
    pins: int = 0
    writing: bool = False   # a write-back of this block is in flight
    dropped: bool = False   # the session dropped the chunk: freed when the last pin goes

    @property
    def readable(self) -> bool:
        return self.state in (DIRTY, CLEAN)


class PlacementManager:
    """Host-pool slots, clean/dirty state, LRU eviction, write-back choice, pins (see module doc)."""

    def __init__(self, n_slots: int, has_disk: bool = True, low_water: int = 3,
                 high_water: int | None = None, slot_bytes: int = 0, max_events: int = 4096):
        assert n_slots > 0 and low_water >= 0
        self.n_slots = n_slots
        self.has_disk = has_disk
        self.low_water = low_water
        self.high_water = max(low_water, high_water if high_water is not None else low_water)
        self.slot_bytes = slot_bytes
        self._free = list(range(n_slots))           # a heap: lowest slot first (deterministic)
        self._host: OrderedDict[ChunkId, _Block] = OrderedDict()   # least recent first
        self._disk: set[ChunkId] = set()
        self._events: deque[ManagerEvent] = deque(maxlen=max_events)
        self.counters = Counters()
        self._store_waiting = False                 # a store was refused and has not got a slot yet
        self.max_load_slots = max(1, n_slots - 1)   # blocks loads may pin at once (one is the stores')

    # ---- queries ------------------------------------------------------------------------------

    def lookup(self, chunk: ChunkId) -> Tier | None:
        """Where a loadable copy lives: HOST before DISK; None if unknown or still being stored."""
        block = self._host.get(chunk)
        if block is not None and block.dropped:
            return None
        if block is not None and block.readable:
            return Tier.HOST
        return Tier.DISK if chunk in self._disk else None

    def slot_of(self, chunk: ChunkId) -> int | None:
        block = self._host.get(chunk)
        return None if block is None else block.slot

    def state_of(self, chunk: ChunkId) -> str | None:
        block = self._host.get(chunk)
        return None if block is None else block.state

    def host_chunks(self) -> list[ChunkId]:
        """Chunks in the pool, least recently used first."""
        return list(self._host)

    def on_disk(self, chunk: ChunkId) -> bool:
        return chunk in self._disk

    def disk_chunks(self) -> set[ChunkId]:
        return set(self._disk)

    def reclaimable(self) -> int:
        return len(self._free) + sum(1 for b in self._host.values() if self._evictable(b))

    def has_pins(self) -> bool:
        """Something is in flight whose completion may free a slot (a store, load or write-back)."""
        return any(b.pins for b in self._host.values())

    def writeback_pending(self) -> int:
        return sum(1 for b in self._host.values() if b.writing)

    def writeback_urgent(self) -> bool:
        """A store waits for a slot, or the next one would: write-back must not step aside for reads."""
        return self.has_disk and (self._store_waiting or self.reclaimable() == 0)

    def may_load_later(self, chunk: ChunkId) -> bool:
        """``prepare_load(chunk)`` refused, but something in flight (a store, a read, a pin) may let it
        through once it completes: the caller defers the load instead of reporting a miss."""
        if self.state_of(chunk) in (STORING, LOADING):
            return True
        return self.lookup(chunk) is not None and (self._store_waiting or self.has_pins())

    def stats(self) -> dict[str, int]:
        blocks = self._host.values()
        return {
            "pool_slots": self.n_slots,
            "pool_free_slots": len(self._free),
            "pool_used_slots": self.n_slots - len(self._free),
            "pool_dirty_slots": sum(1 for b in blocks if b.state == DIRTY),
            "pool_clean_slots": sum(1 for b in blocks if b.state == CLEAN),
            "pool_pinned_slots": sum(1 for b in blocks if b.pins),
            "pool_reclaimable_slots": self.reclaimable(),
            "writeback_in_flight": self.writeback_pending(),
        }

    def take_events(self) -> list[ManagerEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    # ---- stores ---------------------------------------------------------------------------------

    def prepare_store(self, chunk: ChunkId) -> StoreSpec | None:
        """Take a slot for a new chunk, pinned until ``complete_store``.

        Returns None when every slot is dirty or pinned but a disk tier exists (a write-back will free
        one); raises ``CapacityError`` when there is no disk tier to free one.
        """
        assert chunk not in self._host and chunk not in self._disk, f"chunk {chunk} stored twice"
        got = self._allocate()
        if got is None:
            if not self.has_disk and not any(b.pins for b in self._host.values()):
                raise CapacityError(
                    f"host pool full: {self.n_slots} chunks stored and no disk tier (dram-only); "
                    f"give --spill DIR or more --host-mem")
            self._note_store_wait()
            return None
        self._store_waiting = False
        slot, evicted = got
        self._host[chunk] = _Block(slot, STORING, pins=1)
        return StoreSpec(chunk, slot, evicted)

    def _note_store_wait(self) -> None:
        """Count a store's wait once, and whether only loads held the pool when it began."""
        if self._store_waiting:
            return
        self._store_waiting = True
        self.counters.store_waits += 1
        if not any(b.state == DIRTY for b in self._host.values()):
            self.counters.store_waits_on_loads += 1

    def complete_store(self, chunk: ChunkId, success: bool) -> None:
        block = self._host[chunk]
        assert block.state == STORING, f"complete_store on a {block.state} block"
        block.pins -= 1
        if success:
            block.state = DIRTY
            self._host.move_to_end(chunk)
            self.counters.stores += 1
            self._events.append(ManagerEvent("store", chunk, block.slot))
            self._free_if_dropped(chunk)
        else:
            self._release(chunk)
            self.counters.store_rollbacks += 1
            self._events.append(ManagerEvent("rollback", chunk, block.slot, "store failed"))

    # ---- loads ----------------------------------------------------------------------------------

    def prepare_load(self, chunk: ChunkId) -> LoadSpec | None:
        """Pin a pool copy (HOST source) or take a slot to read the disk copy into (DISK source).

        None means the chunk cannot be loaded now (unknown, still being stored or read, no slot to read
        into, loads already pin all but one slot, or a store waits); the caller defers it when
        ``may_load_later`` says so, else reports a miss, and never waits.
        """
        block = self._host.get(chunk)
        if block is not None:
            if not block.readable or block.dropped:
                return None
            if not self._held_by_load(block) and not self._room_for_load():
                self.counters.load_refusals += 1
                return None
            block.pins += 1
            self._host.move_to_end(chunk)
            return LoadSpec(chunk, Tier.HOST, block.slot)
        if chunk not in self._disk:
            return None
        if self._store_waiting or not self._room_for_load():
            self.counters.load_refusals += 1
            return None
        got = self._allocate()
        if got is None:
            self.counters.load_refusals += 1
            return None
        slot, evicted = got
        self._host[chunk] = _Block(slot, LOADING, pins=1)
        return LoadSpec(chunk, Tier.DISK, slot, evicted)

    def complete_load(self, chunk: ChunkId, success: bool) -> None:
        block = self._host[chunk]
        assert block.pins > 0, f"complete_load on unpinned chunk {chunk}"
        block.pins -= 1
        if block.state == LOADING:
            if success:
                block.state = CLEAN
                self.counters.loads_disk += 1
                self._events.append(ManagerEvent("load", chunk, block.slot, "disk"))
                self._free_if_dropped(chunk)
            else:
                self._release(chunk)
                self.counters.load_failures += 1
                self._events.append(ManagerEvent("fail", chunk, block.slot, "disk read"))
            return
        if success:
            self.counters.loads_host += 1
        else:
            self.counters.load_failures += 1
            self._events.append(ManagerEvent("fail", chunk, block.slot, "host load"))
        self._free_if_dropped(chunk)

    def cancel_load(self, chunk: ChunkId) -> None:
        """The load is no longer wanted: unpin (a disk read not yet landed gives its slot back)."""
        block = self._host[chunk]
        assert block.pins > 0, f"cancel_load on unpinned chunk {chunk}"
        block.pins -= 1
        if block.state == LOADING:
            self._release(chunk)
            self._events.append(ManagerEvent("rollback", chunk, block.slot, "load cancelled"))
        else:
            self._free_if_dropped(chunk)

    def touch(self, chunks) -> None:
        """Mark chunks as just used (retrieval picked them)."""
        for chunk in chunks:
            if chunk in self._host:
                self._host.move_to_end(chunk)

    # ---- write-back -----------------------------------------------------------------------------

    def needs_writeback(self) -> bool:
        return self.has_disk and self.reclaimable() + self.writeback_pending() < self.low_water

    def prepare_writeback(self, everything: bool = False) -> list[WriteBackSpec]:
        """Dirty blocks to write now, coldest first (pinned until ``complete_writeback``).

        Nothing unless write-back is needed; then enough to bring reclaimable + in flight up to
        ``high_water``. ``everything`` picks every dirty block (used to persist on close).
        """
        if not self.has_disk or not (everything or self.needs_writeback()):
            return []
        short = self.high_water - self.reclaimable() - self.writeback_pending()
        specs: list[WriteBackSpec] = []
        for chunk, block in self._host.items():
            if not everything and len(specs) >= short:
                break
            if block.state == DIRTY and not block.writing and not block.dropped:
                block.writing = True
                block.pins += 1
                specs.append(WriteBackSpec(chunk, block.slot))
        return specs

    def complete_writeback(self, chunk: ChunkId, success: bool) -> None:
        block = self._host[chunk]
        assert block.writing, f"complete_writeback on chunk {chunk} with no write-back in flight"
        block.writing = False
        block.pins -= 1
        if success:
            block.state = CLEAN
            if not block.dropped:
                self._disk.add(chunk)
            self.counters.writebacks += 1
            self._events.append(ManagerEvent("writeback", chunk, block.slot))
        else:
            self.counters.writeback_failures += 1
            self._events.append(ManagerEvent("fail", chunk, block.slot, "write-back"))
        self._free_if_dropped(chunk)

    def register_on_disk(self, chunks) -> None:
        """Chunks found in a resumed disk index: loadable from DISK, not in the pool."""
        for chunk in chunks:
            assert chunk not in self._host
            self._disk.add(chunk)

    # ---- drops ----------------------------------------------------------------------------------

    def drop(self, chunk: ChunkId) -> bool:
        """Forget ``chunk`` (see the module docstring); True when it had a disk block."""
        on_disk = chunk in self._disk
        self._disk.discard(chunk)
        block = self._host.get(chunk)
        if block is not None:
            block.dropped = True
            self._free_if_dropped(chunk)
        self._events.append(ManagerEvent("drop", chunk, None if block is None else block.slot))
        return on_disk

    def _free_if_dropped(self, chunk: ChunkId) -> None:
        block = self._host.get(chunk)
        if block is not None and block.dropped and block.pins == 0:
            self._release(chunk)

    # ---- internals ------------------------------------------------------------------------------

    @staticmethod
    def _evictable(block: _Block) -> bool:
        return block.state == CLEAN and block.pins == 0

    @staticmethod
    def _held_by_load(block: _Block) -> bool:
        return block.state == LOADING or (block.readable and block.pins > int(block.writing))

    def _room_for_load(self) -> bool:
        return sum(1 for b in self._host.values() if self._held_by_load(b)) < self.max_load_slots

    def _allocate(self) -> tuple[int, tuple[ChunkId, ...]] | None:
        if self._free:
            return heapq.heappop(self._free), ()
        for chunk, block in self._host.items():
            if self._evictable(block):
                del self._host[chunk]
                self.counters.evictions += 1
                self._events.append(ManagerEvent("evict", chunk, block.slot))
                return block.slot, (chunk,)
        return None

    def _release(self, chunk: ChunkId) -> None:
        block = self._host.pop(chunk)
        heapq.heappush(self._free, block.slot)
