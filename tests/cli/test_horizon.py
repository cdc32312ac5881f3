"""Sessions past the positional horizon: extend and rerotate run on, native stops with one line.

The sessions run the micro model, whose rotary table (15 latent frames) puts its horizon at chunk 5, so
each one crosses it in a few seconds; MG2's own horizon (chunk 341 of a 1024-frame table) is checked
from the configs without running 341 chunks.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from engine.config import MODEL_CONFIGS, model_config
from engine.model.facts import horizon_chunk, model_facts
from engine.runtime.telemetry import read_log
from worldpager_cli.main import cli

MICRO_HORIZON = 5


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("name", sorted(set(MODEL_CONFIGS) - {"micro"}))
def test_mg2s_configs_have_its_real_horizon(name):
    cfg = model_config(name)
    assert cfg.dit.rope_table_frames == 1024 and cfg.sampler.frames_per_chunk == 3
    # chunk c covers latent frames [3c, 3c + 3): chunk 340 ends at frame 1022, chunk 341 would need 1025
    assert horizon_chunk(cfg) == 341
    assert model_facts(cfg)["horizon_chunk"] == 341


def test_micro_has_a_short_table_and_its_horizon_follows_from_it():
    cfg = model_config("micro")
    assert cfg.dit.rope_table_frames == 15 and horizon_chunk(cfg) == MICRO_HORIZON
    # below the horizon the table's length changes nothing: the same rotary angles as a full table
    from engine.model.rope import DiTRope
    full = model_config("tiny").dit
    rope, ref = (DiTRope(d.head_dim, d.rope_split, d.rope_theta) for d in (cfg.dit, full))
    import torch
    k = torch.randn(1, 3 * cfg.tokens_per_chunk // 3, cfg.dit.num_heads, cfg.dit.head_dim)
    assert torch.equal(rope.rotate_time(k, 7.0), ref.rotate_time(k, 7.0))


def test_native_stops_at_the_horizon_with_a_one_line_error(tmp_path):
    out = tmp_path / "native.mp4"
    result = run("generate", "--model", "micro", "--store", "window", "--positions", "native",
                 "--chunks", str(MICRO_HORIZON + 2), "--save-every", "0", "--quiet", "--out", str(out))
    assert result.exit_code == 1
    message = result.output.strip().splitlines()[-1]
    assert message.startswith(f"worldpager: error: chunk {MICRO_HORIZON} is past MG2's positional horizon")
    assert "15 latent frames" in message
    records = read_log(tmp_path / "native.log.jsonl")
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed"
    assert records[-1]["chunks"] == MICRO_HORIZON          # everything before the horizon was kept


@pytest.mark.parametrize("positions, store", [("extend", "window"), ("rerotate", "prefetch")])
def test_extend_and_rerotate_run_past_the_horizon(tmp_path, positions, store):
    out = tmp_path / f"{positions}.mp4"
    chunks = MICRO_HORIZON + 4
    result = run("generate", "--model", "micro", "--store", store, "--positions", positions,
                 "--kv-bits", "16", "--chunks", str(chunks), "--save-every", "0", "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    records = read_log(tmp_path / f"{positions}.log.jsonl")
    assert records[-1]["status"] == "done" and records[-1]["chunks"] == chunks
    assert records[0]["config"]["positions"] == positions
    assert records[0]["model"]["horizon_chunk"] == MICRO_HORIZON
    if positions == "rerotate":
        per_chunk = [r for r in records if r["type"] == "chunk"]
        assert all(r.get("rerotated", 0) == 0 for r in per_chunk[:MICRO_HORIZON])
        assert sum(r.get("rerotated", 0) for r in per_chunk[MICRO_HORIZON:]) > 0   # memory re-placed past it
