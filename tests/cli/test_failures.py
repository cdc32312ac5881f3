"""Failure paths as users meet them: each fault injected, then the exit code, one line naming the bad
value and the fix (no traceback), and — where outputs exist — the log's summary line and a decodable MP4."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.config import SessionConfig
from engine.errors import OutputError
from engine.io.video import count_frames
from engine.memory.disk import DATA_NAME, INDEX_NAME
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, start_generate, wait_for_chunks
from worldpager_cli.main import cli

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC = ["--model", "synthetic", "--chunk-ms", "0", "--kv-scale", "0.034"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_line(result, code: int, *needles: str) -> str:
    """The result failed with ``code`` and exactly one ``worldpager: error:`` line, last, holding every needle."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("worldpager: error: "), result.output
    assert sum(line.startswith("worldpager: error") for line in lines) == 1, result.output
    assert "Traceback" not in result.output and "Usage:" not in result.output, result.output
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def no_outputs(tmp_path, *keep: str) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


# ---- 1. usage errors: exit 2, one line; 70 is for our bugs ---------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["generate", "--chunks", "abc"], ["--chunks", "'abc'", "generate --help"]),
    (["generate", "--kv-bits", "3"], ["--kv-bits", "'3'"]),
    (["generate", "--bogus"], ["--bogus"]),
    (["tail"], ["LOG"]),
    (["nosuch"], ["nosuch", "--help"]),
    (["--bogus"], ["--bogus"]),
    (["bench", "store", "--chunks", "x"], ["--chunks", "'x'"]),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, needles):
    one_line(run(*args), 2, *needles)


def test_an_internal_error_exits_70_with_its_traceback(monkeypatch):
    def broken(cfg):
        raise RuntimeError("a bug")
    monkeypatch.setattr("engine.model.registry.model_header_facts", broken)
    result = run("inspect")
    assert result.exit_code == 70 and "Traceback" in result.output
    assert result.output.strip().splitlines()[-1] == "worldpager: internal error: RuntimeError: a bug"


# ---- 2. outputs that collide ------------------------------------------------------------------------

@pytest.mark.parametrize("log_name, needles", [
    ("o.mp4", ["--log", "o.mp4", "is the video file", "o.log.jsonl"]),
    ("o.config.json", ["--log", "o.config.json", "resolved config", "o.log.jsonl"]),
])
def test_a_log_on_another_output_is_refused_before_any_output(tmp_path, log_name, needles):
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "o.mp4",
                 "--log", tmp_path / log_name), 1, *needles)
    no_outputs(tmp_path)


def test_an_output_on_an_input_is_refused(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("segments:\n  - {keys: [w], seconds: 1}\n")
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--trajectory", path, "--out", tmp_path / "o.mp4",
                 "--log", path), 1, "--log", "--trajectory", "overwritten")
    assert path.read_text().startswith("segments:")
    no_outputs(tmp_path, "t.yaml")


# ---- 3. bad numbers and bad log paths: one line, not a traceback ---------------------------------------

@pytest.mark.parametrize("flag, value", [
    ("--host-mem", "nan"), ("--host-mem", "inf"), ("--host-mem", "-1"), ("--host-mem", "0"),
    ("--pool-slots", "0"), ("--pool-slots", "-3"), ("--device-mem", "nan"), ("--chunk-ms", "inf"),
])
def test_bad_memory_numbers_are_one_line_before_any_output(tmp_path, flag, value):
    """A flag's number out of its range is a usage error (exit 2), said in the flag's unit."""
    line = one_line(run("generate", *SYNTHETIC, "--chunks", "2", "--out", tmp_path / "o.mp4", flag, value), 2, flag)
    assert value.lstrip("-") in line
    no_outputs(tmp_path)


def test_a_log_that_is_a_directory(tmp_path):
    (tmp_path / "logs").mkdir()
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "o.mp4", "--log",
                 tmp_path / "logs"), 1, "--log", "is a directory", "session.log.jsonl")
    no_outputs(tmp_path, "logs")


@pytest.mark.parametrize("where", ["under-a-file", "missing-dir"])
def test_a_log_where_none_can_be_written(tmp_path, where):
    """Root may write anywhere, so an unwritable place is a path under a regular file or a missing directory."""
    (tmp_path / "file").write_text("x")
    log = tmp_path / ("file" if where == "under-a-file" else "nodir") / "x.log.jsonl"
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "o.mp4", "--log", log),
             1, str(log), "choose another --log")
    no_outputs(tmp_path, "file")


def test_a_failing_output_is_reported_and_only_what_was_created_is_removed(tmp_path, monkeypatch):
    """The config path is a directory: refused before anything is written. A config that fails to be
    written after the MP4 and log exist: the error is the real one, and only those two are removed."""
    (tmp_path / "o.config.json").mkdir()
    (tmp_path / "o.config.json" / "keep").write_text("mine")
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "o.mp4"), 1,
             "the resolved config", "o.config.json", "is a directory")
    no_outputs(tmp_path, "o.config.json")
    assert (tmp_path / "o.config.json" / "keep").read_text() == "mine"

    def full(cfg, path):
        assert (tmp_path / "p.mp4").is_file() and (tmp_path / "p.log.jsonl").is_file()
        raise OutputError(f"cannot write the resolved config {path}: No space left on device")
    monkeypatch.setattr("engine.session.outputs.write_resolved_config", full)
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "p.mp4"), 1,
             "cannot write the resolved config", "p.config.json", "No space left")
    no_outputs(tmp_path, "o.config.json")


def test_a_log_that_fails_to_open_does_not_hide_its_error(tmp_path, monkeypatch):
    def refuse(path):
        raise OutputError(f"cannot write log {path}: Read-only file system; choose another --log")
    monkeypatch.setattr("engine.session.outputs.SessionLog", refuse)
    one_line(run("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "o.mp4"), 1,
             "Read-only file system")
    no_outputs(tmp_path)


# ---- 4. limits that follow from memory, checked before any output -------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["--chunks", "1000000000000"], ["1,000,000,000,000 chunks", "PiB", "fewer chunks"]),
    (["--chunks", "10000000"], ["10,000,000 chunks", "GiB", "budget", "--host-mem 16"]),
    (["--retrieve-k", "1000"], ["--retrieve-k 1000", "GiB", "budget", "lower --retrieve-k"]),
    (["--pool-slots", "100000"], ["--pool-slots 100,000", "budget", "lower --pool-slots"]),
])
def test_settings_that_cannot_fit_are_refused_at_once(tmp_path, args, needles):
    t0 = time.monotonic()
    one_line(run("generate", *SYNTHETIC, "--host-mem", "16", "--out", tmp_path / "o.mp4", *args), 1, *needles)
    assert time.monotonic() - t0 < 30   # not a hang: nothing was expanded
    no_outputs(tmp_path)


def test_retrieve_k_over_the_host_budget_names_the_bytes_and_the_budget(tmp_path):
    """Two layers of MG2 KV: 30 memory and 30 staging slots of 62 MiB cannot fit in 4.5 GiB less 2 GiB."""
    line = one_line(run("generate", "--model", "synthetic", "--kv-scale", "0.067", "--host-mem", "4.5",
                        "--retrieve-k", "30", "--chunks", "4", "--out", tmp_path / "o.mp4"), 1,
                    "--retrieve-k 30", "32 + 30 chunks of 61.9 MiB", "--host-mem 4.5 GiB", "raise --host-mem")
    assert "more than the" in line
    no_outputs(tmp_path)


def test_default_settings_pass_the_memory_check(tmp_path):
    cfg = resolve_session_config(None, {"out": tmp_path / "o.mp4"})
    assert cfg.chunks == SessionConfig().chunks
    Session(cfg)._discard_outputs()   # constructing it runs every check; nothing is left behind
    no_outputs(tmp_path)


# ---- 5. SIGTERM and SIGHUP stop like Ctrl-C -------------------------------------------------------------

def _interrupted(proc, out, log):
    stdout, stderr = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    summary = read_log(log)[-1]
    assert summary["type"] == "summary" and summary["status"] == "interrupted", summary
    assert 1 <= summary["chunks"] < 500
    assert count_frames(out) == summary["frames"]   # every frame written decodes
    return stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_finish_the_chunk_and_close_video_and_log(tmp_path, sig):
    proc, out, log = start_generate(tmp_path, "stop", 500)
    wait_for_chunks(log, 1, proc)
    proc.send_signal(sig)
    stderr = _interrupted(proc, out, log)
    assert f"{sig.name}: stopping after the current chunk" in stderr
    assert stderr.strip().splitlines()[-1].startswith("worldpager: interrupted after")


def test_a_second_sigterm_aborts_at_once(tmp_path):
    proc, out, log = start_generate(tmp_path, "abort", 500)
    wait_for_chunks(log, 1, proc)
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)   # (if both arrive as one, this is the first test again)
    stderr = _interrupted(proc, out, log)
    assert stderr.strip().splitlines()[-1].startswith("worldpager: interrupted")


def test_a_second_signal_aborts_at_once_whatever_the_drive_does(tmp_path):
    """A spill drive that crawls (100 kB/s, a 4.3 MB chunk every 43 s): after a few chunks the loop waits
    for write-back and a save point waits for the drive, so the first SIGTERM's stop would wait on it
    for minutes; a second signal ends the run without waiting for the drive."""
    out, log = tmp_path / "crawl.mp4", tmp_path / "crawl.log.jsonl"
    proc = subprocess.Popen(WORLDPAGER + ["generate", *SYNTHETIC, "--chunks", "500", "--out", str(out),
                                          "--spill", str(tmp_path / "spill"), "--pool-slots", "4", "--save-every", "2",
                                          "--drive-bw", "0.0001", "--io-deadline", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    wait_for_chunks(log, 4, proc)      # chunk 4 or 5 now waits for a pool slot, the save point for the drive
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert proc.poll() is None, proc.communicate()   # the stop is still waiting on the drive
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    stdout, stderr = proc.communicate(timeout=PATIENCE_S)
    assert time.monotonic() - t0 < 10, stderr   # a hang guard (it took 84 s before), not a timing test
    assert proc.returncode == 130 and "Traceback" not in stderr, (stdout, stderr)
    assert "SIGTERM: stopping after the current chunk" in stderr
    assert stderr.strip().splitlines()[-1] == "worldpager: interrupted", stderr
    records = read_log(log)
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "interrupted", records[-1]
    assert count_frames(out) == records[-1]["frames"] == sum(r["frames"] for r in records if r["type"] == "chunk")


# ---- 6. tail ----------------------------------------------------------------------------------------------

def _write_log(path, records, pid=None):
    header = {"type": "header", "schema": 1, "config": {"model": "micro", "chunks": 9}, "model": {"fps": 16}}
    if pid is not None:
        header.update(pid=pid, host=socket.gethostname(), started=time.time())
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]))


CHUNK = {"type": "chunk", "chunk": 0, "frames": 9, "wall_ms": 100.0}


def test_tail_of_a_missing_file_says_so_at_once(tmp_path):
    one_line(run("tail", tmp_path / "none.log.jsonl"), 1, "log not found", "none.log.jsonl")


def test_tail_of_a_directory(tmp_path):
    one_line(run("tail", tmp_path), 1, "is a directory")


def test_tail_of_a_binary_file(tmp_path):
    path = tmp_path / "v.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00" + bytes(range(256)))
    one_line(run("tail", "--no-follow", path), 1, "v.mp4", "not a session log")


def test_tail_names_a_damaged_line(tmp_path):
    path = tmp_path / "d.log.jsonl"
    _write_log(path, [CHUNK])
    with open(path, "a") as f:
        f.write('{"type": "chunk", "chunk": 1, "wall\n')
    one_line(run("tail", "--no-follow", path), 1, "d.log.jsonl line 3", "not valid JSON")


def test_tail_without_a_summary_exits_3(tmp_path):
    path = tmp_path / "p.log.jsonl"
    _write_log(path, [CHUNK])
    result = run("tail", "--no-follow", path)
    one_line(result, 3, "did not finish", "no summary line", "--no-follow")
    assert "chunk     0" in result.output


def test_tail_idle_timeout_says_why_and_exits_3(tmp_path):
    path = tmp_path / "i.log.jsonl"
    _write_log(path, [CHUNK], pid=os.getpid())   # the writer is alive (this process): only the timeout ends it
    t0 = time.monotonic()
    one_line(run("tail", "--idle-timeout", "0.5", path), 3, "did not finish", "nothing new for 0.5 s")
    assert time.monotonic() - t0 < 10


def test_tail_of_an_empty_log_does_not_wait_silently(tmp_path):
    path = tmp_path / "e.log.jsonl"
    with open(path, "w"):   # a session still loading holds its log open
        result = run("tail", "--idle-timeout", "0.3", path)
    assert "waiting for the session's first line" in result.output
    one_line(result, 3, "nothing new for 0.3 s")


def test_tail_sees_that_a_killed_session_is_dead(tmp_path):
    """No idle timeout: the writer's pid in the header is gone, so tail stops with exit 3."""
    proc, _, log = start_generate(tmp_path, "killed", 500)
    wait_for_chunks(log, 1, proc)
    proc.kill()
    proc.communicate(timeout=PATIENCE_S)
    tail = subprocess.run(WORLDPAGER + ["tail", str(log)], capture_output=True, text=True, timeout=PATIENCE_S)
    assert tail.returncode == 3, tail
    [error] = [line for line in tail.stderr.splitlines() if line.strip()]
    assert error.startswith("worldpager: error: ") and f"pid {proc.pid}" in error and "has exited" in error
    lines = tail.stdout.splitlines()
    assert lines[0].startswith("session:") and any(line.startswith("chunk     0") for line in lines[1:])


# ---- 7. corrupt disk blocks are counted in the log ------------------------------------------------------

def _corrupt_spilled_blocks(spill, chunks):
    """Flip bytes inside the blocks of ``chunks`` that the spill index lists (the file, under the tier)."""
    index = json.loads((spill / INDEX_NAME).read_text())["blocks"]
    hit = [c for c in chunks if str(c) in index]
    with open(spill / DATA_NAME, "r+b") as f:
        for c in hit:
            f.seek(index[str(c)]["offset"] + 100)
            f.write(b"\xde\xad\xbe\xef")
        f.flush()
        os.fsync(f.fileno())
    return hit


def test_corrupt_spill_blocks_are_counted_per_chunk_and_in_the_summary(tmp_path):
    """yaw.yaml revisits after 20 chunks: with a 2-chunk pool, chunks 1-5 come back from the drive then."""
    spill, out = tmp_path / "spill", tmp_path / "c.mp4"
    cfg = resolve_session_config(None, {
        "model": "synthetic", "chunk_ms": 0, "kv_scale": 0.034, "chunks": 26, "out": out,
        "trajectory": REPO / "trajectories" / "yaw.yaml", "memory": {"pool_slots": 2, "spill": spill}})
    damaged = []

    def after(record):
        if record["chunk"] == 12:
            damaged.extend(_corrupt_spilled_blocks(spill, range(1, 6)))
    result = Session(cfg, on_chunk=after).run()
    assert result.status == "done" and damaged
    records = read_log(cfg.log_path)
    chunks, summary = [r for r in records if r["type"] == "chunk"], records[-1]
    per_chunk = [r["corrupt_blocks"] for r in chunks]
    assert sum(per_chunk) == summary["corrupt_blocks"] > 0, per_chunk
    assert all(n == 0 for n in per_chunk[:13])
    assert summary["retrieval"]["misses"] >= summary["corrupt_blocks"]   # each one a miss, never data
    assert count_frames(out) == summary["frames"]
    tail = run("tail", cfg.log_path)
    assert tail.exit_code == 0 and f"{summary['corrupt_blocks']} corrupt disk blocks" in tail.output
