"""The save-point file: round trip bit for bit, durable replacement, pruning, fallback past damaged files.

Damage is made by hand (flipped bytes, truncation, zeroed files, a lying length field, a misnamed file)
and by a seeded fuzz; whatever the bytes, ``read_savepoint`` returns a ``SavePoint`` or raises a
one-line ``SavePointError`` naming the file. A real ``kill -9`` between the temporary write and the
rename runs in a child process.
"""
from __future__ import annotations

import os
import pickle
import random
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
import torch

from engine.errors import InputError, OutputError, SavePointError
from engine.session.savepoint import (HEADER, SavePoint, latest_savepoint, read_savepoint, savepoint_name,
                              savepoint_paths, write_savepoint)
from tests_support import PATIENCE_S, hang_guard as _hang_guard

REPO = Path(__file__).resolve().parents[2]


def mixed_savepoint(chunk: int = 12) -> SavePoint:
    g = torch.Generator().manual_seed(chunk)
    weights = torch.randn(4, 6, generator=g)
    weights[0, 0] = float("nan")                    # bit-exact must hold for NaN payloads too
    return SavePoint(
        chunk=chunk,
        facts={"frames_written": chunk * 16, "slots": {"hot": [1, 2, 3], "cold": []},
               "digests": [{"chunk": 0, "sha": "ab" * 16}], "ratio": 0.25, "note": None},
        tensors={
            "window.k": weights.to(torch.bfloat16),
            "window.v_t": weights.t(),              # not contiguous
            "rng.cpu": torch.get_rng_state(),       # uint8
            "counter": torch.tensor(chunk, dtype=torch.int64),
            "positions": torch.arange(5, dtype=torch.int64),
            "alias": weights[1],                    # shares storage with window.v_t
        })


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same(a: SavePoint, b: SavePoint) -> None:
    assert a.chunk == b.chunk and a.facts == b.facts
    assert sorted(a.tensors) == sorted(b.tensors)
    for name, t in a.tensors.items():
        u = b.tensors[name]
        assert (u.dtype, u.shape, u.device.type) == (t.dtype, t.shape, "cpu"), name
        assert bits(u) == bits(t), name


def one_line(exc: SavePointError, path: Path) -> str:
    message = str(exc)
    assert isinstance(exc, InputError)
    assert message and "\n" not in message and "\r" not in message and str(path) in message, repr(message)
    assert len(message) < 1000
    return message


def error_of(path: Path) -> str:
    with pytest.raises(SavePointError) as info:
        read_savepoint(path)
    return one_line(info.value, path)



def hang_guard(seconds: float = 5):
    return _hang_guard(seconds, doing="reading")


# ---- round trip and layout ------------------------------------------------------------------------

def test_round_trip_is_bit_exact(tmp_path):
    sp = mixed_savepoint()
    path = write_savepoint(tmp_path / "spill" / "savepoints", sp)
    assert path == tmp_path / "spill" / "savepoints" / "savepoint-00000012.wps"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert_same(sp, read_savepoint(path))


def test_empty_tensors(tmp_path):
    sp = SavePoint(chunk=1, facts={}, tensors={})
    assert_same(sp, read_savepoint(write_savepoint(tmp_path, sp)))


def test_layout(tmp_path):
    data = write_savepoint(tmp_path, mixed_savepoint(3)).read_bytes()
    magic, length, crc = HEADER.unpack(data[:HEADER.size])
    assert HEADER.size == 20 and magic == b"WPSAVE\x00\x01"
    assert length == len(data) - 20 and crc == zlib.crc32(data[20:])


def test_pruning_keeps_the_newest(tmp_path):
    for chunk in (10, 20, 30):
        write_savepoint(tmp_path, mixed_savepoint(chunk))
    assert [p.name for p in savepoint_paths(tmp_path)] == ["savepoint-00000030.wps", "savepoint-00000020.wps"]
    write_savepoint(tmp_path, mixed_savepoint(40), keep=1)
    assert [p.name for p in tmp_path.iterdir()] == ["savepoint-00000040.wps"]


def test_stale_temporary_is_ignored_then_removed(tmp_path):
    write_savepoint(tmp_path, mixed_savepoint(10))
    stale = tmp_path / ".savepoint-abc123.tmp"
    stale.write_bytes(b"half a save point")
    assert [p.name for p in savepoint_paths(tmp_path)] == ["savepoint-00000010.wps"]
    assert latest_savepoint(tmp_path)[0].chunk == 10
    write_savepoint(tmp_path, mixed_savepoint(20))
    assert not stale.exists()


def test_failed_rename_leaves_previous_newest(tmp_path, monkeypatch):
    write_savepoint(tmp_path, mixed_savepoint(10))

    def disk_gone(src, dst):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr("engine.session.savepoint.os.replace", disk_gone)
    with pytest.raises(OutputError, match="savepoint-00000020.wps"):
        write_savepoint(tmp_path, mixed_savepoint(20))
    assert [p.name for p in tmp_path.iterdir()] == ["savepoint-00000010.wps"]
    assert latest_savepoint(tmp_path)[0].chunk == 10


def test_kill_between_temporary_write_and_rename(tmp_path):
    write_savepoint(tmp_path, mixed_savepoint(10))
    child = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests")!r}]
        import engine.session.savepoint as s
        from tests.unit.test_savepoint import mixed_savepoint
        s.os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
        s.write_savepoint(s.Path({str(tmp_path)!r}), mixed_savepoint(20))
    """)
    done = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    temporaries = [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
    assert len(temporaries) == 1 and temporaries[0].stat().st_size > 0   # the child died mid-save
    sp, notes = latest_savepoint(tmp_path)
    assert sp.chunk == 10 and notes == []
    write_savepoint(tmp_path, mixed_savepoint(20))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["savepoint-00000010.wps", "savepoint-00000020.wps"]


def test_unwritable_directory_is_an_output_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="cannot write save point"):
        write_savepoint(tmp_path / "file" / "sub", mixed_savepoint())


# ---- damage and fallback --------------------------------------------------------------------------

def damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[HEADER.size + len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def damage_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def damage_zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


@pytest.mark.parametrize("damage, reason", [(damage_flip, "crc mismatch"), (damage_truncate, "truncated"),
                                            (damage_zero, "bad magic")])
def test_damaged_newest_falls_back(tmp_path, damage, reason):
    write_savepoint(tmp_path, mixed_savepoint(100), keep=3)
    newest = write_savepoint(tmp_path, mixed_savepoint(120), keep=3)
    damage(newest)
    assert reason in error_of(newest)
    sp, notes = latest_savepoint(tmp_path)
    assert_same(sp, mixed_savepoint(100))
    assert len(notes) == 1 and notes[0].startswith(f"savepoint-00000120.wps: {reason}")
    assert notes[0].endswith("(skipped)") and "\n" not in notes[0]


def test_nothing_to_resume(tmp_path):
    assert latest_savepoint(tmp_path / "missing") == (None, [])
    assert latest_savepoint(tmp_path) == (None, [])
    (tmp_path / savepoint_name(5)).write_bytes(b"")
    sp, notes = latest_savepoint(tmp_path)
    assert sp is None and notes == ["savepoint-00000005.wps: truncated (0 bytes, shorter than the 20-byte "
                                    "header) (skipped)"]


def test_name_and_metadata_disagree(tmp_path):
    path = write_savepoint(tmp_path, mixed_savepoint(10))
    misnamed = path.rename(tmp_path / savepoint_name(20))
    assert "chunk in name (20) and metadata (10) disagree" in error_of(misnamed)
    assert latest_savepoint(tmp_path)[0] is None


def test_version_trailing_bytes_and_lying_length(tmp_path):
    path = write_savepoint(tmp_path, mixed_savepoint(7))
    good = path.read_bytes()
    path.write_bytes(good[:7] + b"\x02" + good[8:])
    assert "unsupported version 2" in error_of(path)
    path.write_bytes(good + b"\x00")
    assert "1 bytes after the payload" in error_of(path)
    for length in (2 ** 64 - 1, 2 ** 63, len(good)):
        path.write_bytes(good[:8] + struct.pack("<Q", length) + good[16:])
        assert "truncated (header promises" in error_of(path)


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / savepoint_name(3)
    os.mkfifo(fifo)
    with hang_guard():
        assert "not a regular file" in error_of(fifo)
    folder = tmp_path / savepoint_name(4)
    folder.mkdir()
    assert error_of(folder)
    assert "unreadable" in error_of(tmp_path / savepoint_name(5))
    with hang_guard():
        assert latest_savepoint(tmp_path)[0] is None


def test_error_pickles():
    exc = pickle.loads(pickle.dumps(SavePointError(Path("/x/savepoint-00000001.wps"), "crc mismatch")))
    assert exc.reason == "crc mismatch" and str(exc) == "save point /x/savepoint-00000001.wps: crc mismatch"


# ---- fuzz -----------------------------------------------------------------------------------------

def small_file(tmp_path: Path) -> bytes:
    sp = SavePoint(chunk=9, facts={"frames": 144, "slots": [1, 2]},
                   tensors={"a": torch.arange(3, dtype=torch.float32), "b": torch.tensor([7], dtype=torch.uint8),
                            "c": torch.ones(2, dtype=torch.bfloat16)})
    return write_savepoint(tmp_path, sp).read_bytes()


def reads_or_fails_cleanly(path: Path, data: bytes) -> SavePoint | None:
    path.write_bytes(data)
    try:
        sp = read_savepoint(path)
    except SavePointError as exc:
        one_line(exc, path)
        return None
    assert isinstance(sp, SavePoint) and isinstance(sp.facts, dict) and sp.chunk > 0
    assert all(isinstance(t, torch.Tensor) for t in sp.tensors.values())
    return sp


def with_crc(payload: bytes, magic: bytes = b"WPSAVE\x00\x01") -> bytes:
    return HEADER.pack(magic, len(payload), zlib.crc32(payload)) + payload


def test_fuzz_truncations(tmp_path):
    good = small_file(tmp_path)
    path = tmp_path / savepoint_name(9)
    with hang_guard(30):
        for n in range(len(good)):
            assert reads_or_fails_cleanly(path, good[:n]) is None, n
        # truncated payloads with the length and crc fixed up reach the safetensors parser
        for n in range(len(good) - HEADER.size):
            assert reads_or_fails_cleanly(path, with_crc(good[HEADER.size:HEADER.size + n])) is None, n


def test_fuzz_byte_flips(tmp_path):
    rng = random.Random(1234)
    good = small_file(tmp_path)
    path = tmp_path / savepoint_name(9)
    with hang_guard(30):
        for trial in range(250):
            data = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            reads_or_fails_cleanly(path, bytes(data))
            # the same damage behind a matching crc: the payload parser must reject or accept it cleanly
            reads_or_fails_cleanly(path, with_crc(bytes(data[HEADER.size:])))


def test_fuzz_garbage(tmp_path):
    rng = random.Random(99)
    path = tmp_path / savepoint_name(9)
    header_len = struct.pack("<Q", 2 ** 62)
    with hang_guard(30):
        for trial in range(150):
            junk = rng.randbytes(rng.choice([0, 1, 7, 8, 19, 20, 21, 64, 500, 4096]))
            assert reads_or_fails_cleanly(path, junk) is None
            reads_or_fails_cleanly(path, with_crc(junk))
            reads_or_fails_cleanly(path, with_crc(struct.pack("<Q", len(junk)) + junk))
        # a lying safetensors header length behind a valid crc
        assert reads_or_fails_cleanly(path, with_crc(header_len + b"{}")) is None
        for text in (b'{"__metadata__": {"chunk": "9", "facts": "[1]"}}', b'{"__metadata__": 5}',
                     b'{"__metadata__": {"chunk": "0", "facts": "{}"}}', b"[" * 100000,
                     b'{"__metadata__": {"chunk": "9", "facts": "' + b"[" * 100000 + b'"}}',
                     b'{"__metadata__": {"chunk": "\xd9\xa9", "facts": "{}"}}',
                     b'{"__metadata__": {"chunk": "9", "facts": "{}"}, "t": {"dtype": "F32", '
                     b'"shape": [1000000000000], "data_offsets": [0, 4000000000000]}}'):
            padded = text + b" " * (-len(text) % 8)
            assert reads_or_fails_cleanly(path, with_crc(struct.pack("<Q", len(padded)) + padded)) is None


def test_the_save_schedule_counts_chunks_or_wall_time_on_an_injected_clock():
    from engine.session.save import SaveSchedule

    now = [0.0]
    by_time = SaveSchedule(None, interval_s=30.0, clock=lambda: now[0])
    assert not by_time.due(0) and not by_time.due(5)
    now[0] = 29.9
    assert not by_time.due(6)
    now[0] = 30.0
    assert by_time.due(7)                    # the first boundary once the interval has passed
    by_time.saved()
    now[0] = 59.0
    assert not by_time.due(8)
    assert [c for c in range(12) if SaveSchedule(4, clock=lambda: now[0]).due(c)] == [4, 8]
    never = SaveSchedule(0, clock=lambda: now[0])
    now[0] = 1e9
    assert not any(never.due(c) for c in range(100))


def test_the_save_interval_is_a_setting_that_resume_does_not_compare():
    from engine.settings.overlay import resolve_session_config
    from engine.session.save import config_digest
    from engine.errors import ConfigError

    a = resolve_session_config(None, {"model": "micro"})
    b = resolve_session_config(None, {"model": "micro", "save_interval_s": 5.0})
    assert b.save_interval_s == 5.0 and config_digest(a) == config_digest(b)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="save_interval_s"):
            resolve_session_config(None, {"model": "micro", "save_interval_s": bad})


def test_the_writer_reports_when_it_is_idle(tmp_path):
    """wait_idle returns once the save point in flight is written (a stop's last one is never skipped)."""
    import threading

    from engine.session.save import SavePointWriter
    from engine.session.savepoint import SavePoint

    gate = threading.Event()
    writer = SavePointWriter(tmp_path / "save", durable=lambda chunk, timeout: gate.wait(timeout))
    assert writer.wait_idle(0)
    assert writer.submit(SavePoint(chunk=1, facts={"chunk": 1, "frames_total": 9}, tensors={}))
    assert writer.busy and not writer.wait_idle(0.05) and not writer.submit(
        SavePoint(chunk=2, facts={"chunk": 2, "frames_total": 21}, tensors={}))
    gate.set()
    assert writer.wait_idle(PATIENCE_S) and not writer.busy
    assert [w.chunk for w in writer.close()] == [1]
