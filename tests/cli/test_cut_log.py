"""A log cut mid-line (the session killed while writing a line, a copy taken while it wrote, a file cut
short) is read up to its last whole record, with one warning line; a damaged line with whole lines after
it is corruption, one error line naming it. ``report`` and ``tail`` alike.

The logs are a finished micro run's, cut or damaged by the test.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, run_cli_inprocess

WORLDPAGER = [sys.executable, "-c", "from worldpager_cli.main import cli; cli()"]
CHUNKS = 3


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("finished")
    code, _, err = run_cli_inprocess(["generate", "--model", "micro", "--chunks", CHUNKS, "--out", "f.mp4", "--quiet"],
                                     cwd=where)
    assert code == 0, err
    return where / "f.log.jsonl"


def _run(cwd: Path, *args: str, here: bool = False) -> subprocess.CompletedProcess:
    """``worldpager ARGS`` from ``cwd`` in a process of its own (its whole stderr is the claim), or with
    ``here`` in this process (the same command and checks without a process's start)."""
    if here:
        code, out, err = run_cli_inprocess(args, cwd=cwd)
        return subprocess.CompletedProcess(args, code, out, err)
    return subprocess.run(WORLDPAGER + list(args), cwd=cwd, capture_output=True, text=True, timeout=PATIENCE_S)


def _lines(log: Path) -> list[bytes]:
    return log.read_bytes().splitlines(keepends=True)


def _stderr_line(result: subprocess.CompletedProcess, start: str, *needles: str) -> str:
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("keep", [0.5, 0.01, 0.99])   # how much of the last line (the summary) is left
def test_report_of_a_log_cut_inside_its_last_line_plots_every_whole_record(tmp_path, finished, keep):
    lines = _lines(finished)
    last = lines[-1]
    cut = tmp_path / "cut.log.jsonl"
    cut.write_bytes(b"".join(lines[:-1]) + last[:max(1, int(len(last) * keep))])
    result = _run(tmp_path, "report", str(cut), "--out", "r", here=keep != 0.5)   # one in a process of its own
    assert result.returncode == 0, result.stderr
    n = len(lines)
    _stderr_line(result, "worldpager: warning: ", f"cut at line {n}", f"plotted up to line {n - 1}")
    assert f'"chunks":[{CHUNKS}]' in result.stdout.splitlines()[-1]
    assert (tmp_path / "r" / "report.html").is_file()


def test_report_of_a_log_with_a_damaged_line_before_its_end_names_the_line(tmp_path, finished):
    lines = _lines(finished)
    lines[2] = lines[2][:40] + b"\n"   # the second line of chunks, cut, and the rest of the log after it
    damaged = tmp_path / "damaged.log.jsonl"
    damaged.write_bytes(b"".join(lines))
    result = _run(tmp_path, "report", str(damaged), "--out", "r")
    assert result.returncode == 1 and result.stdout == ""
    _stderr_line(result, "worldpager: error: ", "line 3 is damaged")
    assert not (tmp_path / "r").exists()


def test_report_of_a_log_cut_inside_its_header_says_so(tmp_path, finished):
    cut = tmp_path / "starting.log.jsonl"
    cut.write_bytes(_lines(finished)[0][:100])
    result = _run(tmp_path, "report", str(cut), "--out", "r")
    assert result.returncode == 1
    _stderr_line(result, "worldpager: error: ", "cut inside its first line", "header")


def test_tail_of_a_log_cut_mid_line_reads_every_whole_record_and_says_so(tmp_path, finished):
    lines = _lines(finished)
    cut = tmp_path / "cut.log.jsonl"
    cut.write_bytes(b"".join(lines[:-1]) + lines[-1][:30])   # the summary line, cut
    result = _run(tmp_path, "tail", "--no-follow", str(cut))
    assert result.returncode == 3   # no summary: the session did not finish, as far as the log says
    assert sum(line.startswith("chunk") for line in result.stdout.splitlines()) == CHUNKS
    warning, unfinished = result.stderr.splitlines()
    n = len(lines)
    assert warning.startswith("worldpager: warning: ") and f"ends inside line {n}" in warning, warning
    assert f"read up to line {n - 1}" in warning
    assert unfinished.startswith("worldpager: error: ") and "did not finish" in unfinished


def test_read_log_skips_a_cut_last_line_and_nul_bytes(tmp_path, finished):
    lines = _lines(finished)
    log = tmp_path / "holed.log.jsonl"
    log.write_bytes(lines[0] + b"\0" * 64 + b"".join(lines[1:-1]) + lines[-1][:30])
    records = read_log(log)
    assert [r["type"] for r in records] == ["header"] + ["chunk"] * CHUNKS
