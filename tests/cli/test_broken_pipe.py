"""A command whose reader goes away (``worldpager plan | head -1``) stops quietly with 141, no traceback."""
from __future__ import annotations

import subprocess
import sys


def test_plan_into_a_closed_pipe_is_quiet():
    writer = subprocess.Popen([sys.executable, "-c", "from worldpager_cli.main import cli; cli()", "plan"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer.stdout.close()          # the reader is gone before the first line is written
    _, err = writer.communicate(timeout=600)
    assert writer.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
