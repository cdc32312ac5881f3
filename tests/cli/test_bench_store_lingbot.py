"""``bench store --model lingbot-fast``: LingBot's KV per chunk in the store experiment, checked in its
``--dry-run`` mode only (no run, so nothing here depends on the machine's speed)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from engine.bench.lingbot_store import scaled_store
from engine.errors import ConfigError
from worldpager_cli.main import cli


def _plan(tmp_path, *args):
    result = CliRunner().invoke(cli, ["bench", "store", "--spill", str(tmp_path), "--model", "lingbot-fast",
                                      "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output.splitlines()[-1])


def test_full_size_plan_compares_prefetch_and_on_demand_at_three_drives(tmp_path):
    plan = _plan(tmp_path)
    runs = [(r["store"], r["drive_bw"]) for r in plan["runs"]]
    assert runs == [(m, b) for m in ("prefetch", "on-demand") for b in ("1.0", "0.5", "0.25")]
    chunk, lingbot = plan["params"]["chunk_bytes_int4"], plan["params"]["lingbot_chunk_bytes_int4"]
    assert lingbot == 1_019_187_200 and abs(chunk / lingbot - 1) < 0.005      # within one MG2 layer


def test_size_scale_shrinks_bytes_and_bandwidths_together(tmp_path):
    plan = _plan(tmp_path, "--size-scale", "0.125")
    chunk, lingbot = plan["params"]["chunk_bytes_int4"], plan["params"]["lingbot_chunk_bytes_int4"]
    for run in plan["runs"]:                  # a chunk's read time at the emulated drive = the full size's
        full_s = lingbot / (float(run["drive_bw"]) * 1e9)
        scaled_s = chunk / (float(run["drive_bw_emulated"]) * 1e9)
        assert scaled_s == pytest.approx(full_s, rel=1e-4)
    assert chunk < lingbot / 7


def test_bad_scales_and_bandwidths_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="size-scale"):
        scaled_store(2.0)
    result = CliRunner().invoke(cli, ["bench", "store", "--spill", str(tmp_path), "--model", "lingbot-fast",
                                      "--drive-bw", "fast", "--dry-run"])
    assert result.exit_code == 1 and "'fast'" in result.output
