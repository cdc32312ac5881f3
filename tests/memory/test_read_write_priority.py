"""Reads never starve write-back: with a drive whose reads crawl and whose writes are fast, the chunk
loop's puts never wait on a read.

The drive is throttled (``drive_bw`` on the store: reads at 10 kB/s, writes at 10 GB/s). The read
bucket's sleep is an event wait so that the test can end the crawl at teardown; until then no disk read
ever finishes, so every put that completes provably did not depend on one.
"""
from __future__ import annotations

import threading

import pytest

from engine.memory.manager import PlacementManager
from engine.memory.store import KVStore
from engine.memory.transfer import TokenBucket
from engine.memory.types import Tier
from tests.memory.test_store import LAYOUT, RAW, chunk_kv, put_all

CHUNKS = 30


@pytest.fixture
def crawling_store(tmp_path):
    """A 4-slot pool (k = 3) on a drive whose reads never finish until the test ends."""
    release = threading.Event()
    store = KVStore(LAYOUT, RAW, n_slots=4, k_slots=3, spill_dir=tmp_path / "spill",
                    drive_bw="r=0.00001,w=10", put_timeout_s=30)
    store.throttle.read_bucket = TokenBucket(1e4, burst=4096, sleep=release.wait)
    yield store
    release.set()
    store.close()


def prefetch_loop(store: KVStore, chunks: int) -> None:
    """The prefetch loop's order per chunk: take what is staged (no wait), stage the next set, put."""
    put_all(store, range(6))
    for c in range(6, chunks):
        store.take_staged(timeout=0)
        store.stage([c - 6, c - 5, c - 3])
        store.put(c, chunk_kv(c))


def test_puts_never_wait_on_reads_that_crawl(crawling_store):
    prefetch_loop(crawling_store, CHUNKS)          # a put waiting on a read would hit put_timeout_s
    c = crawling_store.counters()
    assert c["puts"] == CHUNKS
    assert c["disk_read_bytes"] == 0               # no read finished: no put depended on one
    assert c["store_waits_on_loads"] == 0          # loads never held every slot
    assert c["writer_yield_timeouts"] == 0         # write-back never stepped aside while urgent
    assert c["reads_dropped"] > 0                  # superseded queued reads gave their slots back


def test_loads_never_pin_the_last_slot_and_a_waiting_store_goes_first():
    m = PlacementManager(4, low_water=0)
    m.register_on_disk([10, 11, 12, 13])
    assert [m.prepare_load(c).src for c in (10, 11, 12)] == [Tier.DISK] * 3
    assert m.prepare_load(13) is None and m.may_load_later(13)   # the fourth slot is the stores'
    m.prepare_store(0)
    m.complete_store(0, True)
    assert m.prepare_store(1) is None and m.writeback_urgent()   # waits for 0's write-back
    m.complete_load(10, True)                                    # 10 is reclaimable now ...
    assert m.prepare_load(13) is None and m.may_load_later(13)   # ... and the waiting store goes first
    assert m.prepare_store(1).evicted == (10,)
    m.complete_store(1, True)
    assert m.counters.store_waits == 1 and m.counters.store_waits_on_loads == 0
