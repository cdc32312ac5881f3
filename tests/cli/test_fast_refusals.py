"""``generate`` checks its flags, its inputs and its config before it imports torch (seconds of start-up):
a refused input is told at once, and the tests that start a process to see a refusal stay cheap."""
from __future__ import annotations

import os
import subprocess
import sys

from tests_support import PATIENCE_S

PROBE = """import sys
from worldpager_cli.main import cli
try:
    cli(sys.argv[1:])
except SystemExit as stop:
    print("exit", stop.code, "torch" in sys.modules)
"""


def refused(tmp_path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, "generate", *args, "--out", str(tmp_path / "o.mp4")],
                          capture_output=True, text=True, timeout=PATIENCE_S, cwd=tmp_path)
    return done.stdout.strip().splitlines()[-1]


def test_a_refused_input_or_flag_never_imports_torch(tmp_path):
    fifo = tmp_path / "start.png"
    os.mkfifo(fifo)
    assert refused(tmp_path, "--image", str(fifo)) == "exit 1 False"          # a FIFO input: refused unopened
    assert refused(tmp_path, "--host-mem", "24X") == "exit 2 False"           # a bad size: a usage error
    assert refused(tmp_path, "--set", "memory.bogus=1") == "exit 1 False"     # an unknown config key
    assert not list(tmp_path.glob("o.*"))
