"""A worker's ``ModelCache`` keeps the newest networks and counts the loads it made and saved.

(That a session given cached networks generates what a freshly loaded model does is tested end to end
in ``tests/cli/test_batch.py``: the arena model's second job in one worker against a fresh ``generate``.)
"""
from __future__ import annotations

from engine.model.model_cache import ModelCache


def test_the_cache_keeps_the_newest_and_counts_loads():
    cache = ModelCache(keep=1)
    assert cache.get("a", lambda: [1]) is cache.get("a", lambda: [2])
    cache.get("b", lambda: [3])
    assert cache.get("a", lambda: [4]) == [4]   # "a" was dropped for "b"
    assert (cache.loads, cache.reuses) == (3, 1)


def test_a_failed_load_is_not_kept():
    cache = ModelCache()

    def broken():
        raise OSError("unreadable weights")

    try:
        cache.get("a", broken)
    except OSError:
        pass
    assert cache.get("a", lambda: "loaded") == "loaded" and cache.loads == 1
