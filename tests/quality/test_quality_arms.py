"""Every arm is the product's own config: its overlay merges like a preset into a valid session config."""
from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.quality.arms import DRIFT_ARMS, POSITION_ARMS, REVISIT_ARMS, arms_named
from engine.quality.episodes import leave_and_return
from engine.quality.session_run import session_config


@pytest.mark.parametrize("arm", REVISIT_ARMS + POSITION_ARMS + DRIFT_ARMS, ids=lambda a: a.name)
def test_each_arm_is_a_valid_session_config(arm, tmp_path):
    cfg = session_config(arm, leave_and_return(0, 3).episode, 10, tmp_path)
    assert cfg.model == "arena" and cfg.memory.spill == tmp_path / "spill" and cfg.memory.pool_slots == 4
    for key, value in arm.overlay.get("memory", {}).items():
        assert getattr(cfg.memory, key) == value
    for key, value in arm.overlay.items():
        if key != "memory":
            assert getattr(cfg, key) == value


def test_the_arms_cover_the_issue():
    names = {a.name for a in REVISIT_ARMS}
    assert {"window", "bf16", "int8", "int4", "int2", "k1", "k6", "sink", "sync", "on-demand"} <= names
    assert {a.overlay.get("rerotate_offset_frames") for a in POSITION_ARMS} == {None, 6.0, 30.0, 96.0}


def test_arms_by_name_keep_the_references():
    assert [a.name for a in arms_named(["int2"])] == ["window", "bf16", "int2"]
    with pytest.raises(ConfigError, match="int3"):
        arms_named(["int3"])


def test_the_long_benchmark_can_run_the_model_without_re_projection(tmp_path):
    from engine.quality.long_run import long_arms

    arms = long_arms(["noreproject"])
    assert [a.name for a in arms] == ["window", "int4", "noreproject"]
    cfg = session_config(arms[-1], leave_and_return(0, 3).episode, 10, tmp_path)
    assert cfg.arena_reproject == 0.0 and cfg.memory.kv_bits == 4
    assert session_config(arms[1], leave_and_return(0, 3).episode, 10, tmp_path).arena_reproject is None


def test_the_long_benchmark_can_run_only_the_named_arms():
    from engine.quality.long_run import long_arms

    assert [a.name for a in long_arms(["extend", "rerotate96"], baselines=False)] == ["extend", "rerotate96"]
    with pytest.raises(ConfigError, match="--no-baselines"):
        long_arms([], baselines=False)
