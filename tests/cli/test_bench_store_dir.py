"""``bench store --spill DIR`` as a first run meets it: a directory that does not exist yet is made and
removed again (the drive is left as found), progress comes every few chunks, a file is one line."""
from __future__ import annotations

import json

from click.testing import CliRunner

from tests_support import one_line_error
from worldpager_cli.main import cli

SMALL = ("--modes", "prefetch", "--drive-bw", "unlimited", "--chunks", "3", "--warmup", "0",
         "--kv-scale", "0.005", "--chunk-ms", "0")


def test_a_missing_directory_is_made_used_and_removed(tmp_path):
    spill = tmp_path / "new" / "bench"
    result = CliRunner().invoke(cli, ["bench", "store", "--spill", str(spill), *SMALL])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    assert doc["runs"][0]["status"] == "done" and doc["runs"][0]["chunks"] == 3
    assert "run 1/1: prefetch, drive unlimited" in result.stderr
    assert "prefetch-unlimited-background: chunk 3/3" not in result.stdout   # progress is not a result
    assert list(tmp_path.iterdir()) == []                                    # made, then removed


def test_an_existing_directory_is_left_as_it_was(tmp_path):
    (tmp_path / "mine.txt").write_text("keep")
    result = CliRunner().invoke(cli, ["bench", "store", "--spill", str(tmp_path), *SMALL])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    one_line_error(CliRunner().invoke(cli, ["bench", "store", "--spill", str(tmp_path / "f"), *SMALL]),
                   "is a file, not a directory")


def test_the_default_chunk_time_keeps_mg2s_bandwidth_need(tmp_path):
    result = CliRunner().invoke(cli, ["bench", "store", "--spill", str(tmp_path), "--dry-run"])
    doc = json.loads(result.stdout.strip().splitlines()[-1])["params"]
    assert doc["kv_scale"] == 0.25 and doc["chunk_ms"] == 300.0 and doc["chunks"] == 28
