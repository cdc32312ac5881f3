"""A stopped process (SIGSTOP, then SIGCONT: a shell's Ctrl-Z and ``fg``, a debugger) is logged as paused
time (``paused_ms``), not as the time one of the chunk's steps took.

The run is really stopped: the test sends SIGSTOP, waits until the kernel says the process is stopped
(state ``T`` in /proc/PID/stat), waits, sends SIGCONT. Nothing depends on the machine's speed: the pause
logged is at least most of the time the test held the process stopped (a lower bound the test itself
makes), and no step's time holds it.

Where the stop lands is chosen, not left to timing: the session runs in a child process whose step
(the memory step, the denoise, the store) at chunk 2 says so on stdout and then waits on an event, as
the store's take and prefetch wait on their threads, until the test has continued it.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, start_generate, wait_for_chunks

STOPPED_S = 2.0
LONG_STOP_S = 3.0

# ``python -c`` code: a worldpager process whose step ``argv[1]`` at chunk 2 prints "in-step" and waits
# until the file ``argv[2]`` exists; the rest of argv is the command line.
IN_STEP = r"""
import sys, threading
from pathlib import Path
import engine.session.loop as loop
from engine.session.memory import SessionMemory

step, flag = sys.argv[1], Path(sys.argv[2])

def held(run, at=1):   # at: where the chunk is among the arguments
    def wrapper(*args, **kwargs):
        if args[at] == 2:
            print("in-step", flush=True)
            wake = threading.Event()
            while not flag.exists():
                wake.wait(0.01)
        return run(*args, **kwargs)
    return wrapper

if step == "memory":
    SessionMemory.prepare = held(SessionMemory.prepare)
elif step == "store":
    SessionMemory.store_chunk = held(SessionMemory.store_chunk)
else:
    build = loop.build_world_model
    def build_held(*args, **kwargs):
        model = build(*args, **kwargs)
        denoise = model.denoise
        model.denoise = held(denoise, at=0)
        return model
    loop.build_world_model = build_held
sys.argv = ["worldpager"] + sys.argv[3:]
from worldpager_cli.main import cli
cli()
"""

STEP_FIELD = {"memory": "memory_ms", "compute": "compute_ms", "store": "store_ms"}


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def stop_for(proc: subprocess.Popen, seconds: float) -> None:
    """SIGSTOP, wait until the process is stopped, hold it ``seconds``, SIGCONT."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + PATIENCE_S
    while process_state(proc.pid) != "T":
        assert time.monotonic() < deadline, "the process did not stop"
        time.sleep(0.01)
    time.sleep(seconds)
    proc.send_signal(signal.SIGCONT)


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


@pytest.mark.parametrize("step", ["memory", "compute", "store"])
def test_a_stop_inside_a_step_is_paused_time_not_the_steps(tmp_path, step):
    """The stop lands inside the step, while it waits on an event (the memory step's take and prefetch
    wait on threads and locks): the chunk's ``paused_ms`` holds it, the step's time does not."""
    flag = tmp_path / "continued"
    out = tmp_path / "s.mp4"
    proc = subprocess.Popen([sys.executable, "-c", IN_STEP, step, str(flag), "generate", "--model", "micro",
                             "--chunks", "4", "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout.readline().strip() == "in-step", proc.communicate(timeout=PATIENCE_S)
        stop_for(proc, LONG_STOP_S)
        flag.touch()
        _, err = proc.communicate(timeout=PATIENCE_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    record = next(r for r in read_log(tmp_path / "s.log.jsonl") if r["type"] == "chunk" and r["chunk"] == 2)
    assert record["paused_ms"] >= 2000, record
    for field in STEP_FIELD.values():   # neither the step stopped in nor any other holds the stop
        assert record[field] < LONG_STOP_S * 1e3, (field, record)
    assert record["memory_ms"] + record["compute_ms"] + record["store_ms"] + record["paused_ms"] \
        <= record["wall_ms"] + 1.0, record


# ``python -c`` code: a pause clock in a process whose every thread blocks SIGCONT, so that after the
# continue the clock is looked at (the gap seen) before the SIGCONT is handled (the byte in the pipe);
# prints the pause it counted.
GAP_BEFORE_SIGNAL = r"""
import signal, sys, time
from engine.runtime.pause_clock import PauseClock
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCONT})   # the clock's thread inherits the mask
clock = PauseClock().start()
before = time.perf_counter()
print("ready", flush=True)
sys.stdin.readline()            # continued: SIGCONT is pending, not handled
seen = time.perf_counter()
clock.paused_s()                # a look after the stop, before the signal
unconfirmed = clock.paused_between(before, seen)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCONT})   # now the handler writes the byte
clock.settle()
print(clock.paused_s(), unconfirmed, clock.paused_between(before, time.perf_counter()),
      clock.paused_between(before - 10.0, before), flush=True)
clock.stop()
"""


def test_a_stop_seen_before_its_sigcont_is_still_counted():
    """After a continue, the clock may be looked at before the SIGCONT reaches its pipe (another
    thread runs first): the gap that look saw is the stop, counted when the signal comes."""
    proc = subprocess.Popen([sys.executable, "-c", GAP_BEFORE_SIGNAL], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=PATIENCE_S)
        stop_for(proc, STOPPED_S)
        out, err = proc.communicate("continued\n", timeout=PATIENCE_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    total, unconfirmed, covered, earlier = map(float, out.split())
    assert total >= 0.8 * STOPPED_S, out
    assert unconfirmed == 0.0, out   # a gap no SIGCONT explained yet is in no window
    assert covered == pytest.approx(total), out   # the stop is one interval, inside the window around it
    assert earlier == 0.0, out       # and in no window before it
