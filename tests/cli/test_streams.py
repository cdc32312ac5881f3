"""Closed and full standard streams, devices that are not here, and the log of a session that died
while loading: one line (or none), the documented exit code, never a traceback, nothing lost.

* stdout full (``> /dev/full``): a command whose output is what it prints (``plan``, ``inspect``) says so
  in one line and exits 1; ``generate`` makes its whole video and warns at the end (exit 0).
* stdout or stderr closed (``>&-``, ``2>&-``): the command runs as if they went to /dev/null.
* ``--device tpu`` / ``--device cuda`` without CUDA: one line, exit 1, no output file.
* ``tail`` of an empty log that no process holds open for writing: exit 3 at once, not a wait forever.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import av
import pytest
import torch

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, run_cli_inprocess

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
MICRO = ["generate", "--model", "micro", "--chunks", "2"]


def _run(args, cwd: Path, stdout=subprocess.PIPE, close: str | None = None) -> subprocess.CompletedProcess:
    """``worldpager ARGS``; ``close``: a shell redirection that closes a descriptor (``>&-``, ``2>&-``)."""
    if close is None:
        return subprocess.run(WORLDPAGER + list(args), cwd=cwd, env=ENV, stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=PATIENCE_S)
    shell = f'exec "$@" {close}'
    return subprocess.run(["sh", "-c", shell, "sh", *WORLDPAGER, *args], cwd=cwd, env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=PATIENCE_S)


def _frames(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


@pytest.fixture
def full(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as f:
        yield f


@pytest.mark.parametrize("args", [["plan", "--minutes", "1"], ["inspect"]], ids=["plan", "inspect"])
def test_a_printing_command_into_a_full_stdout_is_one_line(tmp_path, full, args):
    result = _run(args, tmp_path, stdout=full)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == "worldpager: error: cannot write to standard output: No space left on device"


def test_generate_into_a_full_stdout_makes_the_whole_video(tmp_path, full):
    result = _run([*MICRO, "--out", "g.mp4", "--json"], tmp_path, stdout=full)   # --json: its only stdout
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "standard output failed (No space left on device)" in result.stderr.splitlines()[-1]
    assert read_log(tmp_path / "g.log.jsonl")[-1]["status"] == "done"
    assert _frames(tmp_path / "g.mp4") == 21


@pytest.mark.parametrize("close", [">&-", "2>&-"], ids=["stdout", "stderr"])
def test_plan_with_a_closed_stream_runs(tmp_path, close):
    result = _run(["plan", "--minutes", "1"], tmp_path, close=close)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_generate_with_stderr_closed_makes_the_whole_video(tmp_path):
    result = _run([*MICRO, "--out", "g.mp4"], tmp_path, close="2>&-")
    assert result.returncode == 0, result.stdout
    assert read_log(tmp_path / "g.log.jsonl")[-1]["status"] == "done"


def test_a_usage_error_with_stderr_closed_still_exits_2(tmp_path):
    assert _run([*MICRO, "--chunks", "abc"], tmp_path, close="2>&-").returncode == 2


@pytest.mark.parametrize("device, needle", [
    ("tpu", "--device 'tpu' is not a device WorldPager runs on"),
    pytest.param("cuda", "--device cuda: no CUDA device here; use --device cpu",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    ("cuda:99", "--device cuda:99"),
])
def test_a_device_that_is_not_here_is_one_line(tmp_path, device, needle):
    result = _run([*MICRO, "--out", "d.mp4", "--device", device], tmp_path)
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("worldpager: error: ") and needle in line, line
    assert list(tmp_path.iterdir()) == []


def test_tail_of_an_empty_log_nobody_writes_stops(tmp_path):
    """What kill -9 during the model load leaves: an empty log, its writer gone."""
    log = tmp_path / "k.log.jsonl"
    log.write_text("")
    result = _run(["tail", str(log)], tmp_path)
    assert result.returncode == 3, result.stderr
    assert "no process has it open for writing" in result.stderr.splitlines()[-1]


def test_tail_of_a_binary_file_starting_like_json_is_not_a_log(tmp_path):
    path = tmp_path / "b.log.jsonl"
    path.write_bytes(b"{\x00\x01\xff\xfe binary, no newline")
    result = _run(["tail", "--no-follow", str(path)], tmp_path)
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "is not a session log" in line and str(path) in line


def _log_with_a_hole(tmp_path) -> tuple[Path, int]:
    """A finished micro run's log with three chunk records overwritten by NUL bytes (what a log
    truncated while its writer went on holds), and how many chunk records are left."""
    code, _, err = run_cli_inprocess([*MICRO, "--chunks", "6", "--out", "h.mp4", "--quiet"], cwd=tmp_path)
    assert code == 0, err   # made in this process: the log is what is read
    log = tmp_path / "h.log.jsonl"
    lines = log.read_bytes().split(b"\n")
    hole = b"\0" * sum(len(line) + 1 for line in lines[1:4])
    log.write_bytes(lines[0] + b"\n" + hole + b"\n".join(lines[4:]))
    return log, sum(1 for r in read_log_lines(lines[4:]) if r["type"] == "chunk")


def read_log_lines(lines):
    import json
    return [json.loads(line) for line in lines if line.strip()]


def test_tail_and_report_read_past_nul_bytes(tmp_path):
    from engine.report.read import read_session

    log, after = _log_with_a_hole(tmp_path)
    result = _run(["tail", "--no-follow", str(log)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert sum(1 for line in result.stdout.splitlines() if line.startswith("chunk")) == after
    session = read_session(log)
    assert len(session.chunks) == after and session.summary["status"] == "done"
