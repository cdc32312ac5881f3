"""Fuzzing the readers of the files the program reads back: the spill directory (index and blocks), save
points, the batch manifest, MP4 segments, session logs for ``report``, pose CSV files.

Each reader, given a real file of its kind mutated (bytes, lines, JSON values), must return what it
promises or raise one of the program's own errors (a ``WorldPagerError``, whose message is one line
naming the file; for a disk block a ``CorruptBlockError``, which the store turns into a counted miss) —
never another exception. Trajectories, presets and ``tail``'s reader are fuzzed in
``test_fuzz_parsers.py``; this file shares its mutations and its derandomised, fixed budgets.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from engine.batch.manifest import MANIFEST_NAME, Manifest
from engine.batch.ownership import Made, SpillVouch
from engine.errors import WorldPagerError
from engine.io.mp4_segments import read_groups
from engine.io.trajectory import load_trajectory
from engine.io.video import VideoWriter
from engine.memory.disk import INDEX_VERSION, DiskTier, read_index
from engine.memory.host_pool import HostPool
from engine.memory.types import CorruptBlockError
from engine.report.read import read_session
from engine.session.savepoint import SavePoint, encode_savepoint, read_savepoint, savepoint_name
from unit.test_fuzz_parsers import BASE_LOG, fuzz, hang_guard, json_value, mutated, one_line_error

SLOT = 8192
TAG = "fmt-a"
CHUNKS = 4


@pytest.fixture(scope="module")
def work():
    root = Path(tempfile.mkdtemp(prefix="wp-fuzz-readers-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


_ROOT: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _root(work):
    _ROOT.append(work)
    yield
    _ROOT.pop()


def fresh(name: str) -> Path:
    """An empty directory for one example."""
    path = _ROOT[-1] / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def read_or_refuse(path: Path, data: bytes, read):
    """Write ``data`` to ``path`` and read it back with ``read(path)`` under the hang guard: the reader's
    result, or None when it refused the file with a one-line error that names it."""
    path.write_bytes(data)
    try:
        with hang_guard():
            return read(path)
    except WorldPagerError as exc:
        one_line_error(exc, path)
        return None


@st.composite
def mutated_json(draw, base: dict, max_edits: int = 3) -> bytes:
    """``base`` with values anywhere in it replaced by other JSON values, then maybe byte mutations."""
    doc = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(0, max_edits))):
        node = doc
        while isinstance(node, dict) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node)))
            if not isinstance(node[key], dict):
                break
            node = node[key]
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if draw(st.integers(0, 4)) == 0:
                del node[key]
            else:
                node[key] = draw(json_value)
    data = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    return draw(mutated(data, max_ops=2)) if draw(st.booleans()) else data


# ---- the spill directory ----------------------------------------------------------------------------

def _spill(root: Path) -> tuple[bytes, bytes]:
    """index.json and blocks.dat of a real disk tier holding CHUNKS blocks."""
    pool = HostPool(1, SLOT)
    with DiskTier(root, SLOT, format_tag=TAG, direct=False, extent_bytes=CHUNKS * SLOT) as tier:
        for c in range(CHUNKS):
            pool.slot(0).fill_(c + 1)
            tier.write(c, pool.slot(0))
    return (root / "index.json").read_bytes(), (root / "blocks.dat").read_bytes()


BASE_INDEX, BASE_BLOCKS = _spill(Path(tempfile.mkdtemp(prefix="wp-spill-base-")))


def check_spill(index: bytes, blocks: bytes) -> None:
    root = fresh("spill")
    (root / "index.json").write_bytes(index)
    (root / "blocks.dat").write_bytes(blocks)
    try:
        with hang_guard():
            found, damaged = read_index(root / "index.json", SLOT, TAG)
    except WorldPagerError as exc:
        one_line_error(exc, root / "index.json")
        return
    for chunk, entry in found.items():
        assert isinstance(chunk, int) and chunk >= 0
        assert all(type(entry[k]) is int and entry[k] >= 0 for k in ("offset", "length", "crc")), entry
    assert all(isinstance(why, str) and "\n" not in why for _, why in damaged)
    pool = HostPool(1, SLOT)
    with hang_guard(), DiskTier(root, SLOT, format_tag=TAG, direct=False, resume=True) as tier:
        for chunk in tier.chunks():
            try:
                tier.read(chunk, pool.slot(0))
            except CorruptBlockError:
                continue
            assert int(pool.slot(0)[0]) == chunk + 1, "a block that passed its check holds another chunk"


@fuzz(150)
@given(mutated_json(json.loads(BASE_INDEX)))
@example(b"[]")
@example(b"{" * 5000)
@example(json.dumps({"version": INDEX_VERSION, "slot_bytes": SLOT, "format": TAG, "blocks": {"0": {"offset": 0, "crc": 1}}}).encode())
@example(json.dumps({"version": INDEX_VERSION, "slot_bytes": SLOT, "format": TAG,
                     "blocks": {"0": {"offset": 0, "length": 10 ** 30, "crc": 1}}}).encode())
@example(json.dumps({"version": INDEX_VERSION, "slot_bytes": SLOT, "format": TAG,
                     "blocks": {"-1": {"offset": 0, "length": SLOT, "crc": 1}, "٣": {}}}).encode())
def test_mutated_spill_indexes(index):
    check_spill(index, BASE_BLOCKS)


@fuzz(60)
@given(st.data())
def test_damaged_blocks_are_misses_never_data(data):
    blocks = bytearray(BASE_BLOCKS)
    how = data.draw(st.sampled_from(["truncate", "zero", "flip"]))
    if how == "truncate":
        blocks = blocks[:data.draw(st.integers(0, len(blocks)))]
    else:
        start = data.draw(st.integers(0, len(blocks) - 1))
        end = data.draw(st.integers(start + 1, len(blocks)))
        for i in range(start, end, 1 if how == "zero" else max(1, (end - start) // 7)):
            blocks[i] = 0 if how == "zero" else blocks[i] ^ 0x5A
    check_spill(BASE_INDEX, bytes(blocks))


# ---- save points -------------------------------------------------------------------------------------

BASE_SAVEPOINT = encode_savepoint(SavePoint(
    chunk=8, facts={"frames_total": 93, "memory": {"mode": "prefetch", "slots": [3, None, 5], "staged": [6]}},
    tensors={"ctx.0.k": torch.arange(12, dtype=torch.float32).reshape(3, 4),
             "model.rng": torch.arange(5, dtype=torch.uint8)}))


def check_savepoint(data: bytes) -> None:
    path = fresh("savepoints") / savepoint_name(8)
    sp = read_or_refuse(path, data, read_savepoint)
    if sp is None:
        return
    assert sp.chunk == 8 and isinstance(sp.facts, dict)
    assert all(isinstance(t, torch.Tensor) for t in sp.tensors.values())


@fuzz(150)
@given(mutated(BASE_SAVEPOINT))
@example(BASE_SAVEPOINT[:20])
@example(b"")
def test_mutated_savepoints(data):
    check_savepoint(data)


# ---- the batch manifest ------------------------------------------------------------------------------

BASE_MANIFEST = {"version": 1, "jobs": {
    "a": {"status": "done", "attempts": 1, "out": "a.mp4", "fingerprint": "f0", "worker": "local-0", "chunks": 4,
          "frames": 45, "fps": 3.5, "stall_p99_ms": 0.0, "rss_max_mib": 512.0, "wall_s": 12.9, "resumed_at": None,
          "model_reused": False, "error": None, "started": 1.7e9, "finished": 1.7e9,
          "made": {"runs": ["0123abcd"], "files": {"out": [4096, 1700000000000000000], "log": [512, 7], "save": None},
                   "spill": "/sp/a"}},
    "b": {"status": "running", "attempts": 2, "out": "b.mp4", "fingerprint": "f1", "error": None}}}


def check_manifest(data: bytes) -> None:
    root = fresh("batch")
    (root / MANIFEST_NAME).write_bytes(data)
    try:
        with hang_guard(), Manifest(root) as manifest:
            counts = manifest.counts()
            for name, entry in manifest.jobs.items():
                entry.get("attempts", 0) + 1      # what the driver does with an entry
                Made.of(entry).as_json()
                SpillVouch.of(manifest.jobs, "/sp/a")
                manifest.update(name, status="pending")
    except WorldPagerError as exc:
        one_line_error(exc, root / MANIFEST_NAME)
        return
    assert sum(counts.values()) == len(manifest.jobs)


@fuzz(200)
@given(mutated_json(BASE_MANIFEST))
@example(json.dumps({"version": 1, "jobs": {"a": {"attempts": "x"}}}).encode())
@example(json.dumps({"version": 1, "jobs": {"a": {"status": ["done"]}}}).encode())
@example(json.dumps({"version": 1, "jobs": {"a": {"status": "done", "attempts": True}}}).encode())
@example(b"[" * 5000)
@example(json.dumps({"version": 1, "jobs": {"a": {"made": {"runs": [1], "files": None}}}}).encode())
@example(json.dumps({"version": 1, "jobs": {"a": {"made": {"runs": [], "files": {"out": [1, -2]}}}}}).encode())
@example(json.dumps({"version": 1, "jobs": {"a": {"made": {"runs": [], "files": {"mp4": None}}}}}).encode())
def test_mutated_batch_manifests(data):
    check_manifest(data)


# ---- MP4 segments ------------------------------------------------------------------------------------

def _mp4() -> bytes:
    root = Path(tempfile.mkdtemp(prefix="wp-mp4-base-"))
    writer = VideoWriter(root / "v.mp4", 32, 16, 16)
    for frames in (9, 12):
        writer.write(torch.from_numpy(np.random.default_rng(frames).integers(0, 255, (frames, 16, 32, 3),
                                                                             dtype=np.uint8)))
    writer.close()
    return (root / "v.mp4").read_bytes()


BASE_MP4 = _mp4()


@fuzz(100)
@given(mutated(BASE_MP4, max_ops=2), st.sampled_from([0, 9, 21, 30]))
@example(BASE_MP4[:len(BASE_MP4) // 2], 21)
@example(b"", 9)
def test_mutated_mp4_segments(data, frames):
    path = fresh("mp4") / "v.mp4"
    groups = read_or_refuse(path, data, lambda p: list(read_groups(p, frames)))
    if groups is None:
        return
    assert sum(len(g) for g in groups) == frames


# ---- session logs, as ``report`` reads them --------------------------------------------------------------

@fuzz(150)
@given(mutated(BASE_LOG, max_ops=3))
@example(BASE_LOG.replace(b'"chunk": 1', b'"chunk": "one"', 1))
@example(b"\x00" * 64 + BASE_LOG)
def test_mutated_logs_for_report(data):
    path = fresh("report") / "s.log.jsonl"
    session = read_or_refuse(path, data, read_session)
    if session is None:
        return
    assert all(isinstance(r, dict) for r in session.chunks)


# ---- pose CSV files (``--observe-poses``, ``arena truth``) --------------------------------------------

BASE_POSES = b"frame,x,y,z,yaw,pitch\n" + b"".join(
    f"{i},{0.1 * i:.3f},0,{-0.05 * i:.3f},{3 * i},{i % 5 - 2}\n".encode() for i in range(30))


@fuzz(150)
@given(mutated(BASE_POSES), st.integers(1, 60))
@example(BASE_POSES.replace(b"\n3,", b"\n3e308,", 1), 16)
@example(BASE_POSES.replace(b"0,0,0,0,0\n", b"0,1e308,0,0,0\n", 1), 16)
def test_mutated_pose_csvs(data, frames):
    path = fresh("poses") / "clip.poses.csv"
    traj = read_or_refuse(path, data, lambda p: load_trajectory(p, "universal", frames))
    if traj is None:
        return
    assert traj.frames == frames and np.isfinite(traj.poses).all()


def test_a_pose_far_outside_any_world_is_one_line():
    path = fresh("far") / "clip.poses.csv"
    path.write_bytes(b"frame,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1,1e308,0,0,0,0\n")
    with pytest.raises(WorldPagerError) as err:
        load_trajectory(path, "universal", 16)
    assert "line 3" in one_line_error(err.value, path) and "outside" in str(err.value)


def test_a_pose_csv_is_read_only_as_far_as_the_session_goes():
    """Rows past what a short session needs are not parsed (a damaged row there does not matter, and a
    long file costs no more than its text), but the file's length still comes from its last row."""
    rows = [f"{i},{0.1 * i:.3f},0,0,{i % 360},0" for i in range(5000)]
    rows[3000] = "3000,abc,0,0,0,0"
    path = fresh("long") / "walk.poses.csv"
    path.write_text("frame,x,y,z,yaw,pitch\n" + "\n".join(rows) + "\n# the end\n")
    traj = load_trajectory(path, "universal", 21)
    assert traj.frames == 21 and traj.source_frames == 4999
    with pytest.raises(WorldPagerError, match="line 3002"):   # a session that reaches the row reads it
        load_trajectory(path, "universal", 4000)
