"""Host memory is constant from the first chunks (DESIGN §3): a long session's RSS does not creep.

A synthetic session (real KV bytes at 1 MG2 layer, a 16-chunk pool, the disk tier, no device time, so
chunks, and whatever each allocates, come as fast as they can) in a fresh process; per-chunk RSS from
its log as medians of 100-chunk blocks after a 20-chunk warm-up (``engine.bench.memory.rss_blocks``);
every block stays within 1 % of the first. With the allocator pinned at 480 KiB the medians were 632.7,
633.2, 633.3, 635.6 and 635.6 MiB on the development machine (+0.45 %; the step after chunk 340 is the
keys' first re-rotation past the model's horizon).

Without the allocator pinning (glibc's dynamic mmap threshold) the same session creeps: its block
medians were 667, 716, 764, 829 and 979 MiB on the development machine (+47 %; the original report:
+38 % by chunk 1000). To see it fail that way: ``WORLDPAGER_MALLOC=default pytest
tests/memory/test_rss_flat.py`` (the switch is inherited by the session's process). Pinned too high,
it creeps as well (4 MiB: 637, 640, 645, 653 and 653 MiB, +2.6 %), because the frames that the session
makes per chunk then come from the heap (``engine.memory.allocator``).
"""
from __future__ import annotations

import pytest

from engine.bench.memory import bench_memory, rss_blocks


@pytest.mark.slow
def test_rss_is_flat_over_a_long_session(tmp_path):
    # save points every 40 chunks: a real session's, at a fixed count (the default's wall-clock interval
    # would make how many there are, and so the RSS, depend on the machine's speed)
    r = bench_memory(520, 0.034, tmp_path, pool_slots=16, warmup=20, block=100, save_every=40)
    assert r["status"] == "done", r["error"]
    if not r["allocator"]["libc"].startswith("glibc"):
        pytest.skip(f"the growth and its fix are glibc's ({r['allocator']['libc']})")
    medians = [round(b["rss_median_bytes"] / 2 ** 20, 1) for b in r["blocks"]]
    assert len(medians) == 5
    assert r["drift"] <= 0.01, f"RSS medians per 100 chunks (MiB): {medians}; allocator {r['allocator']}"
    assert r["host_baseline_bytes"] > 0 and r["pool_bytes"] > 0   # the header and summary say what was measured


def test_rss_blocks_reduction():
    records = [{"type": "header", "allocator": {"applied": True}, "host_baseline_bytes": 7},
               *({"type": "chunk", "chunk": c, "wall_ms": 1.0, "rss_bytes": 100 + (c >= 12) * 2 + (c == 5) * 50}
                 for c in range(25)),
               {"type": "summary", "status": "done", "pool_bytes": 64}]
    r = rss_blocks(records, warmup=2, block=10)
    assert [b["first_chunk"] for b in r["blocks"]] == [2, 12]             # the last 3 chunks: no full block
    assert [b["rss_median_bytes"] for b in r["blocks"]] == [100, 102]     # the median ignores chunk 5's spike
    assert r["drift"] == pytest.approx(0.02) and r["spread"] == pytest.approx(0.02)
    assert r["rss_max_bytes"] == 150 and (r["host_baseline_bytes"], r["pool_bytes"]) == (7, 64)
    assert rss_blocks(records, warmup=20, block=10)["blocks"][0]["chunks"] == 5   # one short block is kept


def _session_cfg(tmp_path, **memory):
    from engine.settings.overlay import resolve_session_config

    return resolve_session_config(None, {"model": "synthetic", "chunks": 3, "chunk_ms": 0, "kv_scale": 0.034,
                                         "out": str(tmp_path / "s.mp4"),
                                         "memory": {"pool_slots": 8, "spill": str(tmp_path / "spill"), **memory}})


def test_log_header_says_how_the_pool_was_sized(tmp_path):
    from engine.session.loop import Session
    from engine.runtime.telemetry import read_log

    Session(_session_cfg(tmp_path)).run()
    records = read_log(tmp_path / "s.log.jsonl")
    header = records[0]
    assert header["type"] == "header" and set(header["allocator"]) >= {"applied", "libc", "reason"}
    first = next(r for r in records if r["type"] == "chunk")
    assert 0 < header["host_baseline_bytes"] <= first["rss_bytes"]   # measured before the pool


def test_a_session_whose_memory_fails_to_start_leaves_nothing_it_made(tmp_path):
    """Nothing was generated: the MP4, the log and the config go; the spill directory another session
    holds is left as it is."""
    from engine.memory.disk import DiskTier
    from engine.memory.types import SpillLockedError
    from engine.session.loop import Session

    with DiskTier(tmp_path / "spill", 4096):   # another session holds the spill directory
        held = sorted(p.name for p in (tmp_path / "spill").iterdir())
        with pytest.raises(SpillLockedError):
            Session(_session_cfg(tmp_path)).run()
        assert sorted(p.name for p in (tmp_path / "spill").iterdir()) == held
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spill"]
