"""The JSON Lines session log and its follower."""
from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from engine.errors import InputError, OutputError
from engine.runtime.telemetry import SessionLog, follow_log, percentile, read_log


def test_percentile_nearest_rank():
    assert percentile([], 50) == 0.0
    assert percentile([5.0], 99) == 5.0
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0


def test_log_schema_and_flush(tmp_path):
    path = tmp_path / "s.log.jsonl"
    log = SessionLog(path)
    log.header({"model": "tiny"}, {"fps": 16})
    for c in range(4):
        log.chunk({"chunk": c, "frames": 12, "frames_total": 12 * c + 9, "wall_ms": 10.0 + c,
                   "compute_ms": 5.0, "stall_ms": float(c), "rss_bytes": 1000 + c})
        # flushed as written: readable before close
        assert len(read_log(path)) == 2 + c
    log.close("done")
    log.close("done")   # idempotent
    records = read_log(path)
    assert [r["type"] for r in records] == ["header"] + ["chunk"] * 4 + ["summary"]
    summary = records[-1]
    assert summary["status"] == "done" and summary["chunks"] == 4 and summary["frames"] == 45
    assert summary["stall_ms"] == {"p50": 1.0, "p99": 3.0, "max": 3.0}
    assert summary["rss_bytes"] == {"min": 1000, "max": 1003}


def test_unwritable_log(tmp_path):
    with pytest.raises(OutputError, match="cannot write log"):
        SessionLog(tmp_path / "missing" / "x.log.jsonl")


def test_follow_sees_lines_as_they_arrive_and_stops_at_summary(tmp_path):
    path = tmp_path / "live.log.jsonl"
    log = SessionLog(path)

    def writer():
        log.header({}, {})
        for c in range(3):
            time.sleep(0.05)
            log.chunk({"chunk": c, "frames_total": c})
        # a partial line must be held back until complete
        log._file.write(b'{"type": "chunk", "chu')
        log._file.flush()
        time.sleep(0.1)
        log._file.write(b'nk": 3}\n')
        log._file.flush()
        log.close("done")
    thread = threading.Thread(target=writer)
    thread.start()
    records = list(follow_log(path, poll_s=0.01, idle_timeout_s=10))
    thread.join()
    assert [r.get("chunk") for r in records if r["type"] == "chunk"] == [0, 1, 2, 3]
    assert records[-1]["type"] == "summary"


def test_follow_without_summary_ends_by_idle_timeout_or_no_follow(tmp_path):
    path = tmp_path / "dead.log.jsonl"
    path.write_text(json.dumps({"type": "header"}) + "\n" + json.dumps({"type": "chunk", "chunk": 0}) + "\n")
    assert len(list(follow_log(path, follow=False))) == 2
    assert len(list(follow_log(path, poll_s=0.01, idle_timeout_s=0.05))) == 2
    with pytest.raises(InputError, match="log not found"):
        list(follow_log(tmp_path / "none.jsonl", follow=False))


def test_follower_says_why_it_stopped(tmp_path):
    from engine.runtime.telemetry import LogFollower

    path = tmp_path / "w.log.jsonl"
    log = SessionLog(path)
    log.header({}, {})
    header = read_log(path)[0]
    assert header["pid"] == os.getpid() and header["host"] == socket.gethostname()
    follower = LogFollower(path)
    assert len(list(follower.records(follow=False))) == 1 and follower.ended == "eof"
    assert len(list(follower.records(poll_s=0.01, idle_timeout_s=0.05))) == 1 and follower.ended == "idle"
    assert not follower.writer_gone()   # this process wrote it
    log.close("done")
    assert [r["type"] for r in follower.records()] == ["header", "summary"] and follower.ended == "summary"


def test_tail_shows_a_small_pool_in_a_unit_that_shows_it():
    from worldpager_cli.tail import chunk_line, human_bytes

    assert human_bytes(14.6 * 2 ** 20) == "14.6 MiB" and human_bytes(3 * 2 ** 30) == "3.00 GiB"
    assert human_bytes(512 * 2 ** 10) == "512.0 KiB" and human_bytes(12) == "12 B"
    line = chunk_line({"chunk": 3, "frames": 12, "wall_ms": 100.0, "stall_ms": 0.0, "rss_bytes": 2 ** 30,
                       "hits": 1, "pool_used_bytes": int(14.6 * 2 ** 20)}, 16)
    assert "pool 14.6 MiB" in line
