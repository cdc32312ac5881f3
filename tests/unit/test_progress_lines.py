"""The test run's progress lines (``tests/progress_lines.py``): one at each test file's end and, while
nothing else is printed, one every interval naming the tests still running, even under ``-q`` and under
pytest-xdist (the README's test command)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from progress_lines import Progress
from tests_support import PATIENCE_S

TESTS_DIR = Path(__file__).resolve().parents[1]


def run_dummy_suite(tmp_path: Path, *args: str) -> str:
    (tmp_path / "test_a.py").write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    (tmp_path / "test_b.py").write_text("def test_three():\n    print('hello')\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS_DIR), "WORLDPAGER_PROGRESS_S": "30"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "progress_lines",
                           *args, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=PATIENCE_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_each_files_end_prints_a_line_under_q(tmp_path, args):
    out = run_dummy_suite(tmp_path, *args)
    ends = re.findall(r"^\[ ?(\d)/3 +(\d+)% \d+s\] (test_\w\.py)$", out, re.MULTILINE)
    assert sorted(e[2] for e in ends) == ["test_a.py", "test_b.py"], out   # each file once, at its end
    assert ("3", "100") in [e[:2] for e in ends] and len({e[0] for e in ends}) == 2, out
    assert "3 passed" in out.splitlines()[-1]


class FakeWriter:
    def __init__(self):
        self.lines: list[str] = []

    def line(self, text):
        self.lines.append(text)

    def flush(self):
        pass


class FakeTerminal:
    def __init__(self):
        self._tw = FakeWriter()


class FakeReport:
    def __init__(self, nodeid, when="teardown"):
        self.nodeid, self.when = nodeid, when


def test_a_long_test_gets_a_line_every_interval_naming_it():
    now = [100.0]
    terminal = FakeTerminal()
    progress = Progress(terminal, 30.0, clock=lambda: now[0])
    progress.collected(["t/test_x.py::test_quick", "t/test_x.py::test_long", "t/test_y.py::test_z"])
    progress.pytest_runtest_logstart("t/test_x.py::test_quick", None)
    progress.pytest_runtest_logreport(FakeReport("t/test_x.py::test_quick"))
    progress.pytest_runtest_logstart("t/test_x.py::test_long", None)
    now[0] = 129.0
    assert progress.heartbeat() is None                # nothing is due before the interval
    now[0] = 131.0
    line = progress.heartbeat()
    assert line == "[1/3  33% 31s] running: t/test_x.py::test_long (31s)"
    progress.write(line)
    now[0] = 150.0
    assert progress.heartbeat() is None                # the interval counts from the last line printed
    now[0] = 200.0
    progress.pytest_runtest_logreport(FakeReport("t/test_x.py::test_long"))
    assert terminal._tw.lines[-1] == "[2/3  66% 1m40s] t/test_x.py"
