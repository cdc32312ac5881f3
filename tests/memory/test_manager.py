"""Scripted placement scenarios for the manager: exact slots, evictions, write-back picks and events.

Each test is a short story told step by step; the manager holds no tensors, so none are used here.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from engine.memory.manager import PlacementManager
from engine.memory.types import (CapacityError, LoadSpec, ManagerEvent, StoreSpec, Tier,
                                 WriteBackSpec)


def put(m: PlacementManager, chunk: int) -> StoreSpec:
    spec = m.prepare_store(chunk)
    assert spec is not None
    m.complete_store(chunk, True)
    return spec


def write_back(m: PlacementManager) -> list[int]:
    """Run every write-back the manager asks for, successfully; return the chunks written."""
    specs = m.prepare_writeback()
    for s in specs:
        m.complete_writeback(s.chunk, True)
    return [s.chunk for s in specs]


def test_manager_imports_no_torch():
    code = "import sys, engine.memory.manager, engine.memory.types; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_fill_trigger_writeback_coldest_first_then_evict_lru_clean():
    m = PlacementManager(n_slots=5, low_water=3)
    assert [put(m, c).slot for c in (0, 1)] == [0, 1]
    assert m.prepare_writeback() == []                      # 3 free: no need yet
    assert put(m, 2) == StoreSpec(2, 2)                      # 2 free < 3: write-back needed
    assert m.needs_writeback()
    assert m.prepare_writeback() == [WriteBackSpec(0, 0)]    # the coldest dirty block
    assert m.prepare_writeback() == []                       # 2 free + 1 in flight = 3
    m.complete_writeback(0, True)
    assert m.lookup(0) is Tier.HOST and m.state_of(0) == "clean" and m.disk_chunks() == {0}
    assert put(m, 3).slot == 3
    assert write_back(m) == [1]                              # free 1 + clean 1 < 3
    assert put(m, 4).slot == 4
    assert write_back(m) == [2]
    m.touch([0])                                             # retrieval used chunk 0
    assert m.host_chunks() == [1, 2, 3, 4, 0]
    assert put(m, 5) == StoreSpec(5, 1, evicted=(1,))        # LRU clean block is 1, not 0
    assert m.lookup(1) is Tier.DISK and m.slot_of(1) is None
    assert write_back(m) == [3]                              # clean {2, 0} + 1 -> 3
    assert put(m, 6) == StoreSpec(6, 2, evicted=(2,))
    assert [e for e in m.take_events() if e.kind in ("evict", "writeback")] == [
        ManagerEvent("writeback", 0, 0), ManagerEvent("writeback", 1, 1),
        ManagerEvent("writeback", 2, 2), ManagerEvent("evict", 1, 1),
        ManagerEvent("writeback", 3, 3), ManagerEvent("evict", 2, 2)]
    assert m.take_events() == []
    assert m.counters.evictions == 2 and m.counters.writebacks == 4 and m.counters.stores == 7


def test_pinned_blocks_are_not_evicted_and_loads_touch():
    m = PlacementManager(n_slots=4, low_water=2)
    for c in range(4):
        put(m, c)
        write_back(m)
    # 0 and 1 were written back (clean), 2 and 3 dirty; LRU order 0, 1, 2, 3
    assert [m.state_of(c) for c in range(4)] == ["clean", "clean", "dirty", "dirty"]
    load = m.prepare_load(0)
    assert load == LoadSpec(0, Tier.HOST, 0)
    assert m.host_chunks() == [1, 2, 3, 0]                   # a load makes it most recent
    assert put(m, 4) == StoreSpec(4, 1, evicted=(1,))
    assert m.prepare_store(5) is None                        # 0 pinned, the rest dirty: wait
    m.complete_load(0, True)
    assert write_back(m) == [2]                              # clean {0} + 0 free < 2
    assert m.host_chunks() == [2, 3, 0, 4]
    assert m.prepare_store(5) == StoreSpec(5, 2, evicted=(2,))   # 2 is colder than the loaded 0
    assert m.counters.loads_host == 1


def test_failed_store_rolls_back():
    m = PlacementManager(n_slots=3, low_water=1)
    put(m, 0)
    spec = m.prepare_store(1)
    assert spec == StoreSpec(1, 1)
    assert m.lookup(1) is None                               # being stored: not loadable
    assert m.prepare_load(1) is None
    m.complete_store(1, False)
    assert m.lookup(1) is None and m.stats()["pool_free_slots"] == 2
    assert m.prepare_store(1) == StoreSpec(1, 1)             # the slot came back
    assert ManagerEvent("rollback", 1, 1, "store failed") in m.take_events()
    assert m.counters.store_rollbacks == 1


def test_disk_load_takes_lru_clean_slot_and_failure_rolls_back():
    m = PlacementManager(n_slots=3, low_water=3, high_water=3)
    for c in range(3):
        put(m, c)
    assert write_back(m) == [0, 1, 2]                        # 0 free: every dirty block is written
    put(m, 3)                                                 # evicts 0
    assert m.lookup(0) is Tier.DISK
    load = m.prepare_load(0)
    assert load == LoadSpec(0, Tier.DISK, 1, evicted=(1,))   # reads into LRU clean slot 1
    assert m.lookup(0) is Tier.DISK and m.state_of(0) == "loading"
    assert m.prepare_load(0) is None                          # already being read
    m.complete_load(0, False)                                 # bad block: slot given back
    assert m.lookup(0) is Tier.DISK and m.slot_of(0) is None
    assert m.stats()["pool_free_slots"] == 1
    load = m.prepare_load(0)
    assert load == LoadSpec(0, Tier.DISK, 1)
    m.complete_load(0, True)
    assert m.lookup(0) is Tier.HOST and m.state_of(0) == "clean"
    assert m.counters.loads_disk == 1 and m.counters.load_failures == 1


def test_block_being_written_stays_readable_and_failed_writeback_retries():
    m = PlacementManager(n_slots=3, low_water=2)
    put(m, 0)
    put(m, 1)
    [spec] = m.prepare_writeback()
    assert spec == WriteBackSpec(0, 0)
    assert m.prepare_load(0) == LoadSpec(0, Tier.HOST, 0)    # readable during its write-back
    m.complete_writeback(0, False)                            # e.g. an I/O error
    assert m.state_of(0) == "dirty" and 0 not in m.disk_chunks()
    m.complete_load(0, True)
    assert m.prepare_writeback() == [WriteBackSpec(1, 1)]     # 0 was just used: 1 is colder now
    assert m.counters.writeback_failures == 1


def test_no_slot_for_a_disk_read_is_a_refusal_not_a_wait():
    m = PlacementManager(n_slots=2, low_water=0)
    put(m, 0)
    m.complete_writeback(*[(s.chunk, True) for s in m.prepare_writeback(everything=True)][0])
    put(m, 1)
    put(m, 2)                                                 # evicts clean 0; 1 and 2 dirty
    assert m.lookup(0) is Tier.DISK
    assert m.prepare_load(0) is None
    assert m.counters.load_refusals == 1
    assert m.prepare_load(99) is None                         # never stored


def test_dram_only_full_pool_is_a_capacity_error():
    m = PlacementManager(n_slots=2, has_disk=False)
    put(m, 0)
    put(m, 1)
    assert m.prepare_writeback() == [] and not m.needs_writeback()
    with pytest.raises(CapacityError, match="dram-only") as info:
        m.prepare_store(2)
    assert "\n" not in str(info.value)


def test_register_on_disk_and_everything_writeback():
    m = PlacementManager(n_slots=4)
    m.register_on_disk([7, 8])
    assert m.lookup(7) is Tier.DISK
    put(m, 0)
    put(m, 1)
    assert [s.chunk for s in m.prepare_writeback(everything=True)] == [0, 1]
    assert m.writeback_pending() == 2
