"""``--kv-paging chunk|layer`` on the command line: generate, resume and fork take it; the log says which
ran and what was copied; ``tail`` and ``report`` show the context K/V moved; a bad value is a usage error.

A micro run with chunk paging, stopped after chunk 2 and resumed with ``--kv-paging layer``, gives the
uninterrupted chunk-paged video byte for byte (the save point's tensors are the same bytes either way);
a fork of it with layer paging runs to the end.
"""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from engine.io.trajectory import packaged_trajectory
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import inline_decode, one_line_error
from worldpager_cli.main import cli

CHUNKS = 6
COMMON = ("--model", "micro", "--device", "cpu", "--pool-slots", "4", "--late-prefetch", "wait", "--quiet")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _records(log: Path, kind: str) -> list[dict]:
    return [r for r in read_log(log) if r.get("type") == kind]


def test_generate_logs_the_paging_and_tail_and_report_show_the_bytes(tmp_path):
    out = tmp_path / "paged.mp4"
    done = run("generate", *COMMON, "--chunks", 4, "--kv-paging", "layer", "--out", out, "--spill", tmp_path / "s")
    assert done.exit_code == 0, done.output
    log = out.with_suffix(".log.jsonl")
    assert read_log(log)[0]["kv_paging"] == "layer"
    chunks = _records(log, "chunk")
    moved = [r["kv_bytes_to_device"] for r in chunks]
    assert moved[0] == 0 and all(m > 0 for m in moved[1:])
    assert all(r["kv_device_bytes"] > 0 for r in chunks)
    shown = run("tail", "--no-follow", log)
    assert shown.exit_code == 0 and shown.output.count(" held") == 4, shown.output
    report = run("report", log, "--out", tmp_path / "report")
    assert report.exit_code == 0, report.output
    page = (tmp_path / "report" / "report.html").read_text()
    held = chunks[-1]["kv_device_bytes"]
    assert f"layer: {sum(moved) / 2 ** 20:,.1f} MiB to the device, {held / 2 ** 20:,.1f} MiB held" in page


def test_a_bad_mode_is_a_usage_error():
    one_line_error(CliRunner().invoke(cli, ["generate", "--kv-paging", "sideways", "--chunks", "2"]),
                   "--kv-paging", "'sideways'", code=2)
    one_line_error(CliRunner().invoke(cli, ["resume", "x.mp4", "--kv-paging", "sideways"]), "--kv-paging", code=2)


def _config(root: Path, name: str, save_every: int):
    return resolve_session_config(None, {
        "model": "micro", "device": "cpu", "chunks": CHUNKS, "save_every": save_every,
        "out": str(root / f"{name}.mp4"),
        "memory": {"pool_slots": 4, "late_prefetch": "wait", "spill": str(root / f"{name}.spill")}})


def test_resume_and_fork_take_the_paging(tmp_path):
    whole = _config(tmp_path, "whole", 0)
    assert Session(whole).run().status == "done"
    cut = inline_decode(_config(tmp_path, "cut", 1))
    session = Session(cut, on_chunk=lambda r: r["chunk"] == 2 and session.request_stop())
    assert session.run().status == "interrupted"
    resumed = run("resume", cut.out, "--kv-paging", "layer", "--quiet")
    assert resumed.exit_code == 0, resumed.output
    assert cut.out.read_bytes() == whole.out.read_bytes()
    assert _records(cut.log_path, "resume")[-1]["kv_paging"] == "layer"
    assert any(r["kv_bytes_to_device"] > 0 for r in _records(cut.log_path, "chunk"))
    branch = tmp_path / "branch.mp4"
    forked = run("fork", cut.out, "--at", 4, "--trajectory", packaged_trajectory("yaw.yaml"), "--out", branch,
                 "--chunks", CHUNKS, "--kv-paging", "layer", "--quiet")
    assert forked.exit_code == 0, forked.output
    assert _records(branch.with_suffix(".log.jsonl"), "fork")[-1]["kv_paging"] == "layer"
