"""A walk's memory survives a stop: the device cache and the hedged staging are part of a save point.

A resumed arena walk selects as the uninterrupted one did — the save point names the device cache's
chunks (oldest use first) and the resume reads them back — so the MP4 is the same bytes."""
from __future__ import annotations

import pytest

from engine.settings.overlay import resolve_session_config
from engine.runtime.telemetry import read_log
from tests_support import resumed_equals_uninterrupted

WALK = ("segments:\n  - keys: [w]\n    frames: 50\n  - camera: right\n    frames: 60\n"
        "  - keys: [s]\n    frames: 50\n  - camera: left\n    frames: 60\n")
CHUNKS = 22


@pytest.fixture
def walk(tmp_path):
    (tmp_path / "walk.yaml").write_text(WALK)
    return tmp_path


def _cfg(tmp, name, **extra):
    memory = {"pool_slots": 6, "late_prefetch": "wait", "spill": tmp / f"{name}.spill"}
    return resolve_session_config(None, {"model": "arena", "chunks": CHUNKS, "look_around": 0,
                                         "trajectory": tmp / "walk.yaml", "out": tmp / f"{name}.mp4",
                                         "memory": memory, **extra})


def test_a_walk_resumed_with_its_device_cache_equals_the_uninterrupted_walk(walk):
    whole = _cfg(walk, "whole")
    cut = _cfg(walk, "cut", save_every=1, keep_savepoints=CHUNKS)
    sp = resumed_equals_uninterrupted(whole, cut, stop_after=15)
    assert sp.chunk == 16
    cached = sp.facts["memory"]["cache"]
    assert len(cached) >= 4 and set(cached) <= set(range(16))
    chunks = [r for r in read_log(whole.log_path) if r["type"] == "chunk"]
    assert sum(r.get("cache_hits", 0) for r in chunks) > 0              # the walk back used the cache
