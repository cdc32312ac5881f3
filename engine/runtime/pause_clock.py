"""Time the process spent stopped (SIGSTOP, SIGTSTP, a debugger), so that it is logged as paused, not as
time a chunk's step took.

Contract. ``PauseClock.start()`` (on the main thread) makes SIGCONT wake a daemon thread through a
wakeup pipe (``signal.set_wakeup_fd``); the thread ticks every ``TICK_S``. Every thread of a stopped
process stops, so the stop shows as a gap between two looks at the clock (the thread's ticks and every
``paused_s()`` call are such looks); a SIGCONT says the latest gap was a stop, and it is counted as paused.
The gap and the SIGCONT are seen in either order: after a continue, the first look may come before the
signal's byte is in the pipe (the look then only remembers the gap) or after it. The byte is read under
the lock the count is kept under, so a ``paused_s()`` after a continue never returns the count without
the stop the byte announced. The kernel may hand SIGCONT to any thread, so other threads can run on
before the byte is written: each stop is kept as an interval of the clock the steps are timed with,
and ``paused_between(a, b)`` is how much of ``[a, b]`` the stops confirmed so far cover. Asked once at
the end of a chunk about each of its steps and its whole wall time, it can never count a stop in a step
and again as paused (a stop confirmed later is in neither); ``settle()`` first waits up to one tick for
the byte of a gap seen but not yet explained. ``paused_s()`` is the total so far (monotonic). ``stop()`` restores
the previous handler and wakeup fd. Where it cannot be installed (not the main thread, a wakeup fd in
use, no SIGCONT, a thread that cannot start) ``paused_s()`` stays 0. A suspended machine needs no
counting: the monotonic clock the steps are timed with does not advance while suspended.
"""
from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections import deque

TICK_S = 0.05
KEPT_STOPS = 256   # stop intervals remembered; a chunk asks only about its own time


class PauseClock:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused = 0.0
        self._last_tick = time.perf_counter()   # the clock the loop times its steps with
        self._gap: tuple[float, float] | None = None   # the latest gap between two looks no SIGCONT explained yet
        self._stops: deque[tuple[float, float]] = deque(maxlen=KEPT_STOPS)
        self._pipe: tuple[int, int] | None = None
        self._previous = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "PauseClock":
        sigcont = getattr(signal, "SIGCONT", None)
        if sigcont is None or threading.current_thread() is not threading.main_thread():
            return self
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        try:
            previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:
            os.close(r)
            os.close(w)
            return self
        if previous_fd != -1:   # someone else's wakeup fd (an event loop): leave it be
            signal.set_wakeup_fd(previous_fd)
            os.close(r)
            os.close(w)
            return self
        self._previous = signal.signal(sigcont, lambda signum, frame: None)   # a handler: the pipe gets it
        self._pipe = (r, w)
        self._thread = threading.Thread(target=self._run, name="wp-pause-clock", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:   # no thread can start (a memory limit): no counting, nothing left installed
            self._thread = None
            self.stop()
        return self

    def paused_s(self) -> float:
        """Seconds the process was stopped since ``start()``."""
        self._check(wait=0.0)
        with self._lock:
            return self._paused

    def paused_between(self, start: float, end: float) -> float:
        """Seconds of ``[start, end]`` (``time.perf_counter()`` values) the confirmed stops cover."""
        self._check(wait=0.0)
        with self._lock:
            stops = list(self._stops)
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in stops)

    def settle(self) -> None:
        """Wait up to one tick for the SIGCONT of a gap already seen (the byte may still be on its way)."""
        with self._lock:
            pending = self._gap is not None
        if pending:
            self._check(wait=TICK_S)

    def _run(self) -> None:
        while not self._closed.is_set():
            self._check(wait=TICK_S)

    def _check(self, wait: float) -> None:
        pipe = self._pipe
        if pipe is None:
            return
        try:
            select.select([pipe[0]], [], [], wait)
        except (OSError, ValueError):   # closed under us by stop()
            return
        with self._lock:
            try:
                got = os.read(pipe[0], 512)   # under the lock: whoever reads the byte counts its stop
            except (OSError, ValueError):     # nothing there (EAGAIN), or closed by stop()
                got = b""
            now = time.perf_counter()
            gap = max(0.0, now - self._last_tick - TICK_S)
            self._last_tick = now
            if gap > TICK_S:   # a whole tick missed: the latest such gap is a stop's, if a SIGCONT follows
                self._gap = (now - gap, now)
            if signal.SIGCONT in got and self._gap is not None:
                self._stops.append(self._gap)
                self._paused += self._gap[1] - self._gap[0]
                self._gap = None

    def stop(self) -> None:
        """Put back what ``start()`` changed (idempotent)."""
        if self._pipe is None:
            return
        self._closed.set()
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCONT, self._previous or signal.SIG_DFL)
        except ValueError:   # not on the main thread: the process is ending anyway
            pass
        try:
            os.write(self._pipe[1], b"\0")   # wake the thread now
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            if self._thread.is_alive():
                return   # never close a descriptor a running thread may still read (its number may be reused)
        pipe, self._pipe = self._pipe, None
        for fd in pipe:
            os.close(fd)
