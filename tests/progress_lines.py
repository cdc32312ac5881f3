"""Signs of life from a long test run: a progress line at each test file's end, and while nothing else is
printed, one at least every ``WORLDPAGER_PROGRESS_S`` seconds (30; 0: none), even under ``-q``.

    [ 412/1802 23% 4m10s] tests/quality/test_walk_bench.py
    [ 415/1802 23% 4m40s] running: tests/cli/test_resume.py::test_a (1m05s), tests/arena/test_x.py::test_b (12s)

Registered by ``tests/conftest.py`` (and usable alone: ``pytest -p progress_lines``). Under pytest-xdist the
controller prints (the workers stay silent): the totals come from the workers' collections, the counts
from the reports they send back. A file's line comes when its last test ends, however the files are spread
over the workers. The heartbeat runs on a thread, so a single test that runs for minutes still shows life;
it writes to a duplicate of the terminal's file descriptor taken before any test ran, so that a test's
output capture never swallows it. Nothing here decides an outcome: the lines only say how far the run got.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

PLUGIN_NAME = "worldpager-progress"
DEFAULT_INTERVAL_S = 30.0


@pytest.hookimpl(trylast=True)   # after the terminal reporter is there
def pytest_configure(config) -> None:
    register(config)


def register(config) -> None:
    """Start the progress lines for this run: in the controller or a plain run, not in xdist workers."""
    if hasattr(config, "workerinput") or config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    interval = float(os.environ.get("WORLDPAGER_PROGRESS_S", DEFAULT_INTERVAL_S) or 0)
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None or interval <= 0:
        return
    config.pluginmanager.register(Progress(terminal, interval), PLUGIN_NAME)


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Counts finished tests against the collected ones and prints the lines of the module docstring."""

    def __init__(self, terminal, interval_s: float, clock=time.monotonic):
        self.terminal, self.interval_s, self.clock = terminal, interval_s, clock
        self.start = self.last_line = clock()
        self.total, self.done = 0, 0
        self.left_in_file: dict[str, int] = {}
        self.running: dict[str, float] = {}      # node id -> when it started
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.fd = _duplicate(terminal)

    # ---- what is there to run, what has run ---------------------------------------------------------

    def collected(self, node_ids) -> None:
        with self.lock:
            if self.total:
                return   # every xdist worker collects the same tests
            self.total = len(node_ids)
            for node_id in node_ids:
                path = node_id.split("::", 1)[0]
                self.left_in_file[path] = self.left_in_file.get(path, 0) + 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session) -> None:
        self.collected([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.collected(ids)

    @pytest.hookimpl(tryfirst=True)   # before the loop that runs the tests (or xdist's) takes over
    def pytest_runtestloop(self, session) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._beat, name="test-progress", daemon=True)
            self.thread.start()

    def pytest_runtest_logstart(self, nodeid, location) -> None:
        with self.lock:
            self.running[nodeid] = self.clock()

    def pytest_runtest_logreport(self, report) -> None:
        if report.when != "teardown":
            return
        path = report.nodeid.split("::", 1)[0]
        with self.lock:
            self.running.pop(report.nodeid, None)
            self.done += 1
            left = self.left_in_file.get(path)
            if left is not None:
                self.left_in_file[path] = left - 1
            line = self.line(path) if left == 1 else None
        if line is not None:
            self.write(line)

    def pytest_sessionfinish(self) -> None:
        self.stop.set()

    def pytest_unconfigure(self) -> None:
        self.stop.set()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    # ---- the lines ---------------------------------------------------------------------------------

    def line(self, what: str) -> str:
        now = self.clock()
        share = f"{100 * self.done // self.total:3d}%" if self.total else "  ?%"
        width = len(str(self.total or ""))
        return f"[{self.done:{width}d}/{self.total} {share} {clock_text(now - self.start)}] {what}"

    def heartbeat(self) -> str | None:
        """The line to print now when nothing was printed for ``interval_s`` (None otherwise)."""
        with self.lock:
            now = self.clock()
            if now - self.last_line < self.interval_s or (self.total and self.done >= self.total):
                return None
            oldest = sorted(self.running.items(), key=lambda item: item[1])[:3]
            tests = ", ".join(f"{node_id} ({clock_text(now - began)})" for node_id, began in oldest)
            return self.line(f"running: {tests}" if tests else "running" if self.total else "collecting")

    def _beat(self) -> None:
        while not self.stop.wait(min(5.0, self.interval_s / 2)):
            line = self.heartbeat()
            if line is not None:
                self.write(line)

    def write(self, line: str) -> None:
        """One line, on a line of its own, through the terminal reporter's writer when it can write (not
        during a captured test: then through the duplicate of the terminal's descriptor)."""
        with self.lock:
            self.last_line = self.clock()
            writer = self.terminal._tw
            writer.flush()
            fresh = "" if not getattr(writer, "width_of_current_line", 0) else "\n"
            if self.fd is None:
                writer.line(fresh + line)
                writer.flush()
                return
            try:
                os.write(self.fd, (fresh + line + "\n").encode("utf-8", "replace"))
            except OSError:
                return   # the terminal is gone: the run goes on without its progress lines
            if hasattr(writer, "_current_line"):
                writer._current_line = ""   # the dots go on on a fresh line


def _duplicate(terminal) -> int | None:
    """A duplicate of the descriptor the terminal reporter writes to, taken now (before capture redirects
    the original during a test); None when it writes to something without one."""
    try:
        return os.dup(terminal._tw._file.fileno())
    except (AttributeError, OSError, ValueError):
        return None
