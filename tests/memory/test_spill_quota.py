"""``--spill-max``: the disk tier never takes more than its quota, drops never touch what is pinned, and a
save point's chunks stay on the drive until a newer save point is written.

A fuzzed schedule (hypothesis) of puts, loads, save points and quota enforcement drives a real
``KVStore`` (tiny model, exact raw format, a two-slot pool so that chunks reach the drive) with the
session's own drop policy (``SessionQuota`` over a ``Retriever`` on random revisiting poses). After every
step: the spill directory's allocated bytes (block file + index) are within the quota; no pinned chunk was
ever dropped; a kept chunk loads back exact; every chunk the newest written save point kept is still in
the drive's durable index. Also the size syntax and the one-line errors.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import model_config
from engine.errors import ConfigError
from engine.facts.kv_format import ChunkFormat
from engine.facts.layout import VideoGrid
from engine.memory.disk import INDEX_NAME
from engine.memory.quota import QuotaPlan, check_quota, format_tag, parse_spill_max
from engine.memory.store import KVStore
from engine.retrieval.forget import choose_drops
from engine.retrieval.retriever import Retriever
from engine.session.quota import SessionQuota
from tests.memory.test_store import assert_exact, chunk_kv

CFG = model_config("tiny")
LAYOUT = CFG.kv_layout()
RAW = ChunkFormat.from_layout(LAYOUT, bits=16, raw_dtype="float32")
GRID = VideoGrid(first_frames=1, frames_per_chunk=2, fps=16)
WINDOW = 2


def revisiting_poses(chunks: int, places: int, seed: int) -> np.ndarray:
    """Per-frame poses [T, 7] that hop among ``places`` spots (identity rotation): many revisits."""
    rng = np.random.default_rng(seed)
    spots = rng.uniform(-20, 20, size=(places, 3))
    frames = GRID.frames_total(chunks)
    poses = np.zeros((frames, 7))
    poses[:, 3] = 1.0
    for chunk in range(chunks):
        first = 0 if chunk == 0 else GRID.first_frames + (chunk - 1) * GRID.frames_per_chunk
        poses[first:first + GRID.frames_of_chunk(chunk), :3] = spots[rng.integers(places)]
    return poses


def allocated(store: KVStore) -> int:
    return store.disk.allocated_bytes


def durable_index(store: KVStore) -> set[int]:
    return {int(c) for c in json.loads((store.disk.dir / INDEX_NAME).read_text())["blocks"]}


OPS = st.lists(st.sampled_from(["put", "put", "put", "load", "savepoint"]), min_size=10, max_size=70)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, blocks=st.integers(min_value=8, max_value=14), places=st.integers(min_value=2, max_value=12),
       seed=st.integers(min_value=0, max_value=1000))
def test_fuzzed_schedule_never_exceeds_the_quota_nor_drops_what_is_pinned(tmp_path_factory, ops, blocks, places, seed):
    spill = tmp_path_factory.mktemp("spill")
    tag = format_tag(RAW)
    plan = QuotaPlan.of(blocks * RAW.slot_bytes + 2 * 4096 * 2, RAW.slot_bytes, tag, save_every=None)
    retriever = Retriever(revisiting_poses(80, places, seed), GRID)
    quota = SessionQuota(plan, retriever, sink=False)
    rng = np.random.default_rng(seed)
    with KVStore(LAYOUT, RAW, n_slots=2, spill_dir=spill, k_slots=2,
                 disk_options={"max_bytes": plan.block_file_bytes}) as store:
        chunk, staged, saved_kept = 0, [], None
        for op in ops:
            kept = [c for c in range(chunk) if c not in quota.dropped]
            if op == "put":
                store.put(chunk, chunk_kv(chunk))
                pinned = set(staged) | set(range(max(chunk - WINDOW, 0), chunk + 1))
                drops = quota.enforce(chunk, pinned)
                assert not set(drops) & pinned
                store.drop(drops, chunk)
                chunk += 1
            elif op == "load" and kept:
                staged = list(rng.choice(kept, size=min(2, len(kept)), replace=False).tolist())
                got = store.load_now(staged, timeout=60)
                for c in staged:
                    assert c in got.kv, f"kept chunk {c} did not load"
                    assert_exact(got, c)
            elif op == "savepoint" and chunk:
                assert store.persist_through(chunk, timeout=60)
                saved_kept = {c for c in range(chunk) if c not in quota.dropped}
                store.release(chunk)   # the save point is written: older drops are given back
            assert allocated(store) <= plan.quota_bytes, (allocated(store), plan.quota_bytes)
            assert quota.kept_count() <= max(plan.keep, len(staged) + WINDOW + 1)
            if saved_kept is not None:
                store.disk.flush_index()
                missing = saved_kept - durable_index(store)
                # only a reserve too small for the drops between two save points gives blocks back early
                assert len(missing) <= store.disk.early_releases, f"chunks {sorted(missing)} left the drive"
        assert store.counters()["errors"] == 0


def test_a_long_schedule_keeps_the_file_at_the_cap(tmp_path):
    """200 chunks into a 12-block quota: the block file stops growing at its cap, blocks are reused."""
    plan = QuotaPlan.of(12 * RAW.slot_bytes + 4 * 4096, RAW.slot_bytes, format_tag(RAW))
    quota = SessionQuota(plan, Retriever(revisiting_poses(200, 30, 1), GRID), sink=False)
    with KVStore(LAYOUT, RAW, n_slots=2, spill_dir=tmp_path / "sp", k_slots=2,
                 disk_options={"max_bytes": plan.block_file_bytes}) as store:
        sizes = []
        for chunk in range(200):
            store.put(chunk, chunk_kv(chunk))
            store.drop(quota.enforce(chunk, set(range(max(chunk - WINDOW, 0), chunk + 1))), chunk)
            if chunk % 10 == 9:
                assert store.persist_through(chunk + 1, timeout=60)
                store.release(chunk + 1)
                sizes.append(allocated(store))
        assert max(sizes) <= plan.quota_bytes
        assert len(quota.dropped) >= 200 - plan.keep - 1
        assert store.counters()["disk_write_bytes"] > plan.block_file_bytes   # blocks were reused
        kept = [c for c in range(200) if c not in quota.dropped][-2:]
        got = store.load_now(kept, timeout=60)
        for c in kept:
            assert_exact(got, c)


def test_redundant_chunks_go_first_and_pinned_never():
    poses = revisiting_poses(40, 3, 7)   # three places: most chunks repeat a view
    retriever = Retriever(poses, GRID)
    kept = list(range(40))
    newest = {}
    for c in kept:
        newest[retriever.cell_of(c)] = c
    pinned = {39, 38, 5}
    picks = choose_drops(retriever, kept, pinned, 30, now=39)
    reasons = [r for _, r in picks]
    assert reasons == sorted(reasons, key=lambda r: r != "redundant")        # redundant, then cold
    assert all(c not in set(newest.values()) for c, r in picks if r == "redundant")
    assert not {c for c, _ in picks} & pinned
    assert picks == choose_drops(retriever, kept, pinned, 30, now=39)        # a pure function


def test_with_first_visit_retrieval_the_later_duplicates_are_redundant():
    """First-visit retrieval keeps the oldest chunk of each view cell: the quota drops the later ones."""
    poses = revisiting_poses(40, 3, 7)
    retriever = Retriever(poses, GRID, first_visit=True)
    first = {}
    for c in range(40):
        first.setdefault(retriever.cell_of(c), c)
    picks = choose_drops(retriever, list(range(40)), set(), 40, now=39)
    redundant = {c for c, r in picks if r == "redundant"}
    assert redundant and not redundant & set(first.values())
    assert redundant == set(range(40)) - set(first.values())


@pytest.mark.parametrize("text,expected", [("500M", 500 << 20), ("4G", 4 << 30), ("4GiB", 4 << 30),
                                           ("1.5g", int(1.5 * (1 << 30))), ("65536", 65536), ("2 MB", 2 << 20)])
def test_sizes(text, expected):
    assert parse_spill_max(text) == expected


def test_percent_of_free_space(tmp_path):
    assert 0 < parse_spill_max("10%", tmp_path / "not-yet") <= parse_spill_max("100%", tmp_path)


@pytest.mark.parametrize("text", ["lots", "4X", "-1G", "0", "0%", "150%", ""])
def test_a_bad_size_is_a_one_line_error_naming_it(text):
    with pytest.raises(ConfigError) as err:
        parse_spill_max(text, None)
    assert "--spill-max" in str(err.value) and "\n" not in str(err.value)


def test_a_quota_below_what_the_session_pins_is_refused():
    plan = QuotaPlan.of(3 * RAW.slot_bytes, RAW.slot_bytes, format_tag(RAW))
    with pytest.raises(ConfigError, match=r"--spill-max 3 blocks holds \d+ chunks .* give at least \d+M"):
        check_quota("3 blocks", plan, k=3, window_chunks=2)
    enough = QuotaPlan.of(64 * RAW.slot_bytes, RAW.slot_bytes, format_tag(RAW))
    check_quota("ok", enough, k=3, window_chunks=2)
    assert enough.blocks * RAW.slot_bytes <= enough.quota_bytes


def test_the_reserve_follows_the_save_interval():
    size = 100 * RAW.slot_bytes
    every = QuotaPlan.of(size, RAW.slot_bytes, "", save_every=4)
    assert every.reserve == 2 * 4 + max(1, every.blocks // 32) + 1 and every.keep == every.blocks - every.reserve
    assert QuotaPlan.of(size, RAW.slot_bytes, "", save_every=0).keep == QuotaPlan.of(size, RAW.slot_bytes, "").blocks


def test_no_early_release_when_save_points_come_within_the_reserve(tmp_path):
    """Save points every 3 chunks, reserve sized for it: every save point's chunks stay on the drive."""
    plan = QuotaPlan.of(14 * RAW.slot_bytes + 4 * 4096, RAW.slot_bytes, format_tag(RAW), save_every=3)
    quota = SessionQuota(plan, Retriever(revisiting_poses(90, 20, 3), GRID), sink=False)
    with KVStore(LAYOUT, RAW, n_slots=2, spill_dir=tmp_path / "sp", k_slots=2,
                 disk_options={"max_bytes": plan.block_file_bytes}) as store:
        for chunk in range(90):
            if chunk and chunk % 3 == 0:
                assert store.persist_through(chunk, timeout=60)
                kept = {c for c in range(chunk) if c not in quota.dropped}
                store.release(chunk - 3)   # the save point before this one is the newest written
                assert kept <= durable_index(store)
            store.put(chunk, chunk_kv(chunk))
            store.drop(quota.enforce(chunk, set(range(max(chunk - WINDOW, 0), chunk + 1))), chunk)
            assert allocated(store) <= plan.quota_bytes
        assert store.disk.early_releases == 0 and len(quota.dropped) > 40


def test_a_chunk_dropped_after_a_save_point_was_captured_still_reaches_the_drive(tmp_path):
    """Captured at chunk 6 (the pool still holds every chunk, none written), chunks 1 and 2 dropped at 6
    before the save point's writer runs: it still finds them on the drive, then they are retired."""
    with KVStore(LAYOUT, RAW, n_slots=10, spill_dir=tmp_path / "sp", k_slots=2) as store:
        for chunk in range(6):
            store.put(chunk, chunk_kv(chunk))
        store.hold_for_savepoint(6)
        store.drop([1, 2], at=6)
        assert store.persist_through(6, timeout=60)
        assert {0, 1, 2, 3, 4, 5} <= durable_index(store)
        assert store.disk.retired == 2
        store.release(7)
        store.disk.flush_index()
        assert durable_index(store) == {0, 3, 4, 5}
        got = store.load_now([0, 5], timeout=60)
        assert_exact(got, 0) and assert_exact(got, 5)
