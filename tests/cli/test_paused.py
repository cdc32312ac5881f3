"""A stopped process (SIGSTOP, then SIGCONT: a shell's Ctrl-Z and ``fg``, a debugger) is logged as paused
time (``paused_ms``), not as the time one of the chunk's steps took.

The run is really stopped: the test sends SIGSTOP after the first chunk record, waits, sends SIGCONT.
Nothing depends on the machine's speed: the pause logged is at least most of the time the test held the
process stopped (a lower bound the test itself makes), and no step's time holds it.
"""
from __future__ import annotations

import signal
import time

from engine.telemetry import read_log
from tests_support import PATIENCE_S, start_generate, wait_for_chunks

STOPPED_S = 2.0


def test_a_stopped_process_is_logged_as_paused_not_as_a_step(tmp_path):
    proc, _, log = start_generate(tmp_path, "p", 6, "--quiet")
    try:
        wait_for_chunks(log, 1, proc)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(STOPPED_S)
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    chunks = [r for r in read_log(log) if r["type"] == "chunk"]
    assert sum(r["paused_ms"] for r in chunks) >= 0.8 * STOPPED_S * 1e3
    for r in chunks:   # the steps are parts of the chunk's wall time, the pause is not in them
        assert r["memory_ms"] + r["compute_ms"] + r["store_ms"] + r["paused_ms"] <= r["wall_ms"] + 1.0, r
