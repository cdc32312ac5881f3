"""Drive bandwidth parsing, token-bucket arithmetic (injected clock), workers' failure reporting and
the drive's read priority."""
from __future__ import annotations

import threading
import time

import pytest

from engine.errors import ConfigError
from engine.memory.transfer import (DriveBandwidth, DriveIO, Job, TokenBucket, Worker,
                                    parse_drive_bw)
from engine.memory.types import TransferResult

GB = 1e9


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize("spec, want", [
    ("0.25", DriveBandwidth(0.25 * GB, 0.25 * GB)),
    (0.1, DriveBandwidth(0.1 * GB, 0.1 * GB)),
    ("r=0.5,w=0.2", DriveBandwidth(0.5 * GB, 0.2 * GB)),
    ("read=1, write=2", DriveBandwidth(1 * GB, 2 * GB)),
    ("r=0.5", DriveBandwidth(0.5 * GB, None)),
    (None, DriveBandwidth()),
    ("none", DriveBandwidth()),
])
def test_parse_drive_bw(spec, want):
    assert parse_drive_bw(spec) == want


@pytest.mark.parametrize("spec", ["fast", "0", "r=0", "x=1", "r=1,w=", "-1"])
def test_parse_drive_bw_rejects_with_one_line(spec):
    with pytest.raises(ConfigError, match="--drive-bw") as info:
        parse_drive_bw(spec)
    assert "\n" not in str(info.value)


def test_token_bucket_arithmetic():
    clock = FakeClock()
    bucket = TokenBucket(rate=100, burst=50, clock=clock, sleep=clock.sleep)
    assert bucket.reserve(50) == 0.0                 # the burst is free
    assert bucket.reserve(100) == 1.0                # 100 B of debt at 100 B/s
    clock.now = 1.0
    assert bucket.reserve(100) == 1.0                # 1 s refilled the debt only
    clock.now = 100.0
    assert bucket.reserve(30) == 0.0                 # refill is capped at the burst
    assert bucket.reserve(40) == pytest.approx(0.2)  # 50 - 30 - 40 = -20 B


def test_token_bucket_converges_to_the_rate():
    clock = FakeClock()
    mib = 1 << 20
    bucket = TokenBucket(rate=10 * mib, burst=mib, clock=clock, sleep=clock.sleep)
    waited = sum(bucket.acquire(mib) for _ in range(100))
    assert clock.now == pytest.approx(99 / 10)       # (100 MiB − 1 MiB burst) / 10 MiB/s
    assert waited == pytest.approx(clock.now)


def test_worker_captures_job_and_completion_failures():
    results: list[TransferResult] = []
    sink: list[TransferResult] = []
    done = threading.Event()

    def boom() -> int:
        raise OSError(5, "Input/output error")

    def bad_completion(result: TransferResult) -> None:
        raise ValueError("completion bug")

    worker = Worker("t", sink.append)
    worker.submit(Job("load", 1, boom, results.append))
    worker.submit(Job("load", 2, lambda: 10, bad_completion))
    worker.submit(Job("load", 3, lambda: 20, lambda r: (results.append(r), done.set())))
    assert done.wait(10)
    assert worker.stop(10)
    assert [(r.chunk, r.ok, r.nbytes) for r in results] == [(1, False, 0), (3, True, 20)]
    assert isinstance(results[0].error, OSError) and "failed" in results[0].describe()
    assert len(sink) == 1 and isinstance(sink[0].error, ValueError) and sink[0].chunk == 2


def test_writer_steps_aside_while_a_read_is_queued_or_running():
    io = DriveIO(lambda r: None, readers=1, max_yield_s=30)
    order: list[str] = []
    release_read, at_gate, finished = threading.Event(), threading.Event(), threading.Event()
    gate_pace = io.write_pace(lambda n: None)

    def read() -> int:
        release_read.wait(10)
        order.append("r")
        return 1

    def write() -> int:
        for _ in range(3):                            # three pieces, each paced
            at_gate.set()
            gate_pace(4096)
            order.append("w")
        return 3 * 4096

    io.submit_read(Job("load", 1, read, lambda r: None))
    io.submit_write(Job("writeback", 2, write, lambda r: finished.set()))
    assert at_gate.wait(10)
    time.sleep(0.2)                                   # a writer without priority would write now
    assert order == []
    release_read.set()
    assert finished.wait(10)
    assert order == ["r", "w", "w", "w"]
    assert io.stop(10)
