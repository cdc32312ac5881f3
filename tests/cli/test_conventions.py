"""The command line's conventions (docs/conventions.md): the exit code of each kind of ending, human
text on stderr and results on stdout, ``--json`` as one object (one record per line for ``tail``) with
its documented keys, help in sections with examples, and ``tail --plot`` as the deprecated alias of
``report --follow``."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.io.trajectory import packaged_trajectory
from engine.settings.options import SECTIONS, SESSION_OPTIONS
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, inline_decode, one_line_error
from worldpager_cli.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_UNFINISHED, EXIT_USAGE
from worldpager_cli.main import cli
from worldpager_cli.run_summary import RUN_SUMMARY_KEYS

MICRO = ["--model", "micro", "--save-every", "0"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def shell(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(WORLDPAGER + [str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=PATIENCE_S)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 3-chunk micro run with a save point after every chunk (a fork needs one, and a spill
    directory)."""
    root = tmp_path_factory.mktemp("finished")
    result = shell("generate", "--model", "micro", "--chunks", 3, "--save-every", 1, "--spill", "a.spill",
                   "--out", "a.mp4", cwd=root)
    assert result.returncode == 0, result.stderr
    return root / "a.mp4"


# ---- exit codes ------------------------------------------------------------------------------------

def test_the_exit_codes_of_each_kind(tmp_path, monkeypatch, finished):
    assert EXIT_USAGE == 2 and EXIT_BAD_INPUT == 1 and EXIT_UNFINISHED == 3 and EXIT_INTERNAL == 70
    assert run("tail", "--no-follow", finished.with_suffix(".log.jsonl")).exit_code == 0
    for usage in (["generate", "--bogus"], ["nosuch"], ["generate", "--kv-bits", "3"], ["tail"],
                  ["plan", "--chunks", "many"]):
        assert run(*usage).exit_code == 2, usage
    assert run("report", tmp_path / "absent.log.jsonl", "--out", tmp_path / "r").exit_code == 1
    cut = tmp_path / "cut.log.jsonl"
    cut.write_bytes(b"".join(finished.with_suffix(".log.jsonl").read_bytes().splitlines(keepends=True)[:2]))
    assert run("tail", "--no-follow", cut).exit_code == 3

    def broken(cfg):
        raise RuntimeError("a bug")
    monkeypatch.setattr("engine.model.registry.model_header_facts", broken)
    assert run("inspect").exit_code == 70


def test_a_usage_error_is_one_line_on_stderr_and_nothing_on_stdout(tmp_path):
    result = shell("generate", "--chunks", "abc", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: ") and "'abc'" in lines[0], result.stderr


def test_a_bad_job_line_is_bad_input(tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"chunks": "two"}\n')
    result = run("batch", jobs, "--out-dir", tmp_path / "out", "--model", "synthetic")
    assert result.exit_code == 1 and "jobs.jsonl line 1" in result.output


# ---- streams and --json ----------------------------------------------------------------------------

def _one_json_object(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    summary = json.loads(lines[0])
    assert tuple(summary) == RUN_SUMMARY_KEYS
    assert set(summary["stalls"]) == {"count", "total_ms", "p50_ms", "p99_ms", "max_ms"}
    return summary


def test_generate_prints_only_its_json_on_stdout(tmp_path):
    plain = shell("generate", *MICRO, "--chunks", 2, "--out", "plain.mp4", cwd=tmp_path)
    assert plain.returncode == 0 and plain.stdout == ""
    assert "wrote 21 frames" in plain.stderr and "chunk 2/2" in plain.stderr
    result = shell("generate", *MICRO, "--chunks", 2, "--out", "g.mp4", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote 21 frames" in result.stderr.splitlines()[-1]
    summary = _one_json_object(result.stdout)
    assert summary["status"] == "done" and summary["chunks"] == summary["chunks_made"] == 2
    assert summary["frames"] == 21 and summary["out"] == "g.mp4" and summary["log"] == "g.log.jsonl"
    chunks = [r for r in read_log(tmp_path / "g.log.jsonl") if r["type"] == "chunk"]
    assert summary["peak_rss_bytes"] == max(r["rss_bytes"] for r in chunks)
    assert summary["stalls"]["count"] == sum(r["stall_ms"] > 0 for r in chunks)
    assert summary["s_per_chunk"] == pytest.approx(summary["wall_s"] / 2, abs=1e-3)
    quiet = shell("generate", *MICRO, "--chunks", 1, "--out", "q.mp4", "--json", "--quiet", cwd=tmp_path)
    assert quiet.stderr == "" and _one_json_object(quiet.stdout)["frames"] == 9


def test_resume_json_counts_the_chunks_it_made(tmp_path):
    cfg = resolve_session_config(None, {"model": "micro", "chunks": 4, "out": tmp_path / "r.mp4", "save_every": 1,
                                        "memory": {"spill": tmp_path / "sp", "pool_slots": 4}})
    session = Session(inline_decode(cfg), on_chunk=lambda r: r["chunk"] == 1 and session.request_stop())
    assert session.run().status == "interrupted"
    result = shell("resume", "r.mp4", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = _one_json_object(result.stdout)
    assert summary["status"] == "done" and summary["chunks"] == 4 and summary["chunks_made"] == 2
    assert "resuming r.mp4 at chunk 2" in result.stderr


def test_fork_json(tmp_path, finished):
    result = shell("fork", finished, "--at", 2, "--trajectory", packaged_trajectory("yaw.yaml"),
                   "--out", "b.mp4", "--chunks", 3, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = _one_json_object(result.stdout)
    assert summary["chunks"] == 3 and summary["chunks_made"] == 1 and summary["out"] == "b.mp4"


def test_tail_json_is_one_record_per_line_as_the_log_has_them(finished):
    log = finished.with_suffix(".log.jsonl")
    result = run("tail", "--no-follow", "--json", log)
    assert result.exit_code == 0 and result.stderr == ""
    assert [json.loads(line) for line in result.stdout.splitlines()] == read_log(log)
    assert json.loads(result.stdout.splitlines()[-1])["type"] == "summary"


def test_plan_prints_its_table_then_one_json_line(tmp_path):
    result = shell("plan", "--minutes", "1", cwd=tmp_path)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0 and len(lines) > 2
    assert isinstance(json.loads(lines[-1]), dict) and not lines[0].startswith("{")


# ---- help ----------------------------------------------------------------------------------------

def _sections(text: str) -> dict[str, str]:
    """Section title -> its text, for the unindented ``Title:`` lines of a help page."""
    parts = re.split(r"^([A-Z][A-Za-z ]*):$", text, flags=re.M)
    return {title: body for title, body in zip(parts[1::2], parts[2::2])}


def test_generate_help_lists_each_option_in_its_section_then_examples():
    sections = _sections(run("generate", "-h").output)
    assert [s for s in SECTIONS if s in sections] == list(SECTIONS)
    assert list(sections)[-1] == "Examples" and "worldpager generate" in sections["Examples"]
    for option in SESSION_OPTIONS:
        assert re.search(rf"^\s+{re.escape(option.flag)}\b", sections[option.group], flags=re.M), option.name
    assert "--json" in sections["Output"] and "--quiet" in sections["Output"]


@pytest.mark.parametrize("command", ["resume", "fork", "plan", "batch"])
def test_other_commands_have_sections_and_examples(command):
    sections = _sections(run(command, "-h").output)
    assert "Output" in sections and f"worldpager {command}" in sections["Examples"], sections


def test_the_tool_help_lists_whole_descriptions_and_examples():
    text = run("-h").output
    commands = _sections(text)["Commands"]
    assert "..." not in commands and "generate" in commands and "report" in commands
    assert "worldpager generate" in _sections(text)["Examples"]


# ---- one live report -----------------------------------------------------------------------------

def test_tail_plot_is_a_hidden_deprecated_alias_of_report_follow(tmp_path, finished):
    assert "--plot" not in run("tail", "-h").output
    result = run("tail", "--no-follow", finished.with_suffix(".log.jsonl"), "--plot", tmp_path / "r")
    assert result.exit_code == 0
    warning = [line for line in result.stderr.splitlines() if "deprecated" in line]
    assert len(warning) == 1 and "worldpager report" in warning[0] and "--follow" in warning[0]
    assert (tmp_path / "r" / "report.html").is_file()


def test_h_still_works_after_a_command_ran_on_its_own():
    """click builds a command's help option once: a command first invoked on its own (not through the
    group) must still take ``-h`` through the group afterwards (a fresh process, so the order is fixed)."""
    code = ("from click.testing import CliRunner; from worldpager_cli.main import cli; "
            "CliRunner().invoke(cli.commands['generate'], ['--help']); "
            "r = CliRunner().invoke(cli, ['generate', '-h']); "
            "assert r.exit_code == 0 and 'Inputs:' in r.output, r.output")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_missing_checkpoint_is_the_only_line(tmp_path):
    """The checkpoint's files are checked before the banner and the set-up notes: the error is all that is
    said, and nothing is written."""
    (tmp_path / "ckpt").mkdir()
    result = CliRunner().invoke(cli, ["generate", "--checkpoint", str(tmp_path / "ckpt"), "--chunks", "2",
                                      "--out", str(tmp_path / "x.mp4")])
    one_line_error(result, "checkpoint file missing", "base_distill.safetensors")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
