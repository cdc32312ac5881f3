"""``worldpager train arena`` and ``worldpager bench arena`` end to end (small sizes)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from engine.arena.weights import load_model, read_metadata
from tests_support import one_line_error
from worldpager_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_train_arena_writes_a_log_a_checkpoint_and_loadable_weights(tmp_path):
    out, weights = tmp_path / "run", tmp_path / "w.safetensors"
    result = run("train", "arena", "--out", str(out), "--steps", "1", "--batch", "1", "--chunks", "3",
                 "--quiet", "--export", str(weights))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["step"] == 1
    assert (out / "last.pt").is_file() and len((out / "train.log.jsonl").read_text().splitlines()) == 1
    assert read_metadata(weights)["train_steps"] == "1" and load_model(weights) is not None


def test_bench_arena_prints_a_table_and_a_json_line(tmp_path):
    result = run("bench", "arena", "--episodes", "3", "--chunks", "6", "--workdir", str(tmp_path),
                 "--strip", str(tmp_path / "strip.png"), "--strip-episode", "0")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["episodes"] == 3 and set(summary["kinds"]) == {"all", "glance", "spin", "out_back"}
    assert summary["hits"] > 0
    assert any(line.startswith("all ") for line in lines)
    assert (tmp_path / "strip.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("worldpager-arena")]   # temp dirs removed


@pytest.mark.parametrize("where,says", [
    ("/proc/self/x", "--out /proc/self/x is under /proc, not on a drive"),
    ("/sys/kernel/x", "--out /sys/kernel/x is under /sys"),
    ("/dev/worldpager-train", "--out /dev/worldpager-train is under /dev"),
    ("FILE", "is a regular file, not a directory"),
    ("FILE/run", "cannot make --out"),
])
def test_train_arena_out_that_cannot_be_a_directory_is_one_line(tmp_path, where, says):
    """Was a FileNotFoundError traceback (exit 70) for ``/proc/self/x``; the check comes before any model."""
    file = tmp_path / "a-file"
    file.write_text("mine\n")
    result = CliRunner().invoke(cli, ["train", "arena", "--out", where.replace("FILE", str(file)), "--steps", "1",
                                      "--batch", "1", "--chunks", "3", "--quiet"])
    one_line_error(result, says)
    assert file.read_text() == "mine\n"
