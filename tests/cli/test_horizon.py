"""Sessions past MG2's positional horizon (chunk 341): extend and rerotate run on, native stops."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from engine.telemetry import read_log
from worldpager_cli.main import cli

HORIZON = 341


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.slow
def test_native_stops_at_the_horizon_with_a_one_line_error(tmp_path):
    out = tmp_path / "native.mp4"
    result = run("generate", "--model", "micro", "--store", "window", "--positions", "native",
                 "--chunks", str(HORIZON + 2), "--quiet", "--out", str(out))
    assert result.exit_code == 1
    message = result.output.strip().splitlines()[-1]
    assert message.startswith("worldpager: error: chunk 341 is past MG2's positional horizon")
    assert "1024 latent frames" in message
    records = read_log(tmp_path / "native.log.jsonl")
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed"
    assert records[-1]["chunks"] == HORIZON          # everything before the horizon was kept


@pytest.mark.slow
@pytest.mark.parametrize("positions, store", [("extend", "window"), ("rerotate", "prefetch")])
def test_extend_and_rerotate_run_past_the_horizon(tmp_path, positions, store):
    out = tmp_path / f"{positions}.mp4"
    result = run("generate", "--model", "micro", "--store", store, "--positions", positions,
                 "--kv-bits", "16", "--chunks", str(HORIZON + 3), "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    records = read_log(tmp_path / f"{positions}.log.jsonl")
    assert records[-1]["status"] == "done" and records[-1]["chunks"] == HORIZON + 3
    assert records[0]["config"]["positions"] == positions and records[0]["model"]["horizon_chunk"] == HORIZON
    if positions == "rerotate":
        chunks = [r for r in records if r["type"] == "chunk"]
        assert all(r.get("rerotated", 0) == 0 for r in chunks[:HORIZON])
        assert sum(r.get("rerotated", 0) for r in chunks[HORIZON:]) > 0   # memory re-placed past it
