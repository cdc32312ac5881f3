"""Sessions as users run them: trajectory in, live log out, tail, quiet/scripted output, Ctrl-C."""
from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.io.video import count_frames
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, start_generate, wait_for_chunks
from worldpager_cli.main import cli

REPO = Path(__file__).resolve().parents[2]


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_generate_with_a_trajectory_writes_a_log_that_tail_summarises(tmp_path):
    out = tmp_path / "yaw.mp4"
    result = run("generate", "--model", "micro", "--trajectory", str(REPO / "trajectories" / "yaw.yaml"),
                 "--chunks", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    records = read_log(tmp_path / "yaw.log.jsonl")
    chunks = [r for r in records if r["type"] == "chunk"]     # save points may come between them
    assert records[0]["type"] == "header" and len(chunks) == 4 and records[-1]["type"] == "summary"
    assert records[0]["config"]["trajectory"].endswith("yaw.yaml") and "yaw.yaml" in records[0]["trajectory"]
    for i, r in enumerate(chunks):
        assert r["chunk"] == i and {"wall_ms", "compute_ms", "stall_ms", "rss_bytes"} <= r.keys()
    summary = records[-1]
    assert summary["status"] == "done" and summary["chunks"] == 4 and summary["frames"] == 45
    assert set(summary["stall_ms"]) == {"p50", "p99", "max"} and set(summary["rss_bytes"]) == {"min", "max"}
    assert count_frames(out) == 45
    assert json.loads((tmp_path / "yaw.config.json").read_text())["model"] == "micro"
    tail = run("tail", str(tmp_path / "yaw.log.jsonl"))
    assert tail.exit_code == 0
    lines = tail.output.strip().splitlines()
    assert lines[0].startswith("session: model micro") and len(lines) == 6
    assert lines[-1].startswith("done: 4 chunks, 45 frames")


def test_every_packaged_trajectory_drives_a_session(tmp_path):
    for path in sorted((REPO / "trajectories").iterdir()):
        model = "micro"
        args = ["generate", "--model", model, "--trajectory", str(path), "--chunks", "1", "--quiet",
                "--out", str(tmp_path / f"{path.stem}.mp4")]
        if "templerun" in path.name:
            continue   # templerun's action space needs the templerun model (full size only)
        result = run(*args)
        assert result.exit_code == 0, (path, result.output)
        assert result.output == ""   # --quiet


def test_bad_trajectory_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("frame,x,y,z,yaw,pitch\n0,0,0,0,0,0\n1,0,0,nan,0,0\n")
    result = run("generate", "--model", "micro", "--trajectory", str(bad), "--chunks", "1",
                 "--out", str(tmp_path / "o.mp4"))
    assert result.exit_code == 1
    assert result.output.strip().startswith("worldpager: error: ") and "bad.csv" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.mp4").exists()


def test_sigint_finishes_the_chunk_and_closes_video_and_log(tmp_path):
    proc, out, log = start_generate(tmp_path, "stop", 500)
    wait_for_chunks(log, 3, proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, (stdout, stderr)
    assert "worldpager: interrupted after" in stderr.strip().splitlines()[-1]
    records = read_log(log)
    summary = records[-1]
    assert summary["type"] == "summary" and summary["status"] == "interrupted"
    assert 3 <= summary["chunks"] < 500
    assert count_frames(out) == summary["frames"]   # every frame written is decodable


def test_without_a_tty_progress_is_plain_lines_and_tail_follows_live(tmp_path):
    proc, _, log = start_generate(tmp_path, "live", 40)
    wait_for_chunks(log, 1, proc)
    tail = subprocess.run(WORLDPAGER + ["tail", str(log), "--idle-timeout", "60"], capture_output=True,
                          text=True, timeout=PATIENCE_S)
    stdout, stderr = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, stderr
    assert "\r" not in stderr
    progress = [line for line in stderr.splitlines() if line.startswith("chunk ")]
    assert progress and progress[-1].startswith("chunk 40/40")
    lines = tail.stdout.strip().splitlines()
    assert len([line for line in lines if line.startswith("chunk ")]) == 40
    assert lines[-1].startswith("done: 40 chunks")


@pytest.mark.slow
def test_host_memory_is_constant_over_a_long_session(tmp_path):
    """80 chunks through the whole command (micro's horizon is chunk 5, so re-rotation runs for 75 of
    them): after a 20-chunk warm-up the logged RSS varies by less than 16 MiB. (The long synthetic
    session of tests/memory/test_rss_flat.py is the test of creep over hundreds of chunks.) In a process
    of its own, as a user runs it: its allocator pinned as a session pins it (tests/conftest.py leaves the
    test processes' own allocator as glibc sets it)."""
    result = subprocess.run(WORLDPAGER + ["generate", "--model", "micro", "--chunks", "80", "--quiet", "--out",
                                          str(tmp_path / "long.mp4")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 0, result.stderr
    rss = [r["rss_bytes"] for r in read_log(tmp_path / "long.log.jsonl") if r["type"] == "chunk"]
    assert len(rss) == 80
    assert max(rss[20:]) - min(rss[20:]) < 16 * 2**20, (min(rss[20:]), max(rss[20:]))


def test_attention_sink_is_attended_once_chunk_zero_leaves_the_window(tmp_path):
    result = run("generate", "--model", "micro", "--sink", "--chunks", "6", "--quiet", "--out", str(tmp_path / "s.mp4"))
    assert result.exit_code == 0, result.output
    chunks = [r for r in read_log(tmp_path / "s.log.jsonl") if r["type"] == "chunk"]
    assert [0 in r["memory"] for r in chunks] == [False, False, True, True, True, True]
    assert all(r["stall_ms"] == 0.0 for r in chunks)
