"""Presets and flag overlays: precedence, strictness, types."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import SessionConfig
from engine.errors import ConfigError
from engine.settings.overlay import (config_to_json, load_preset, preset_names, replace_strict,
                            resolve_session_config)


def test_packaged_presets_resolve():
    assert {"tiny", "mg2-universal", "mg2-gta", "mg2-templerun", "mg2-4090-32g"} <= set(preset_names())
    for name in preset_names():
        resolve_session_config(name, {})
    paper = resolve_session_config("mg2-4090-32g", {})
    assert paper.model == "mg2-universal" and paper.memory.host_mem_gib == 32.0
    assert paper.memory.kv_bits == 4 and paper.memory.retrieve_k == 3


def test_flags_override_preset_which_overrides_defaults():
    cfg = resolve_session_config("mg2-4090-32g", {"memory": {"host_mem_gib": 64}, "seed": 7})
    assert cfg.memory.host_mem_gib == 64.0 and cfg.memory.kv_bits == 4 and cfg.seed == 7
    assert resolve_session_config(None, {}) == SessionConfig()


@pytest.mark.parametrize("overlay, message", [
    ({"modle": "tiny"}, "unknown config key 'modle'"),
    ({"memory": {"host_mem": 3}}, "unknown config key 'memory.host_mem'"),
    ({"chunks": "ten"}, "'chunks' must be int"),
    ({"chunks": True}, "'chunks' must be int"),
    ({"memory": {"host_mem_gib": "lots"}}, "'memory.host_mem_gib' has the wrong type"),
    ({"memory": 3}, "memory must be a mapping"),
    ({"chunks": 0}, "chunks must be at least 1"),
    ({"memory": {"store": "magic"}}, "store must be one of"),
    ({"model": "nope"}, "unknown model 'nope' .choose from arena, "),
])
def test_bad_overlays_name_the_key(overlay, message):
    with pytest.raises(ConfigError, match=message):
        resolve_session_config(None, overlay)


def test_preset_files_are_checked(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: tiny\nsurprise: 1\n")
    with pytest.raises(ConfigError, match="unknown config key 'surprise'"):
        resolve_session_config(bad, {})
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [tiny\n")
    with pytest.raises(ConfigError, match="cannot parse preset .*broken.yaml line"):
        load_preset(broken)
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        load_preset("nope")
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_preset(listy)


def test_paths_and_json_round_trip():
    cfg = replace_strict(SessionConfig(), {"out": "a/b.mp4", "memory": {"spill": "/tmp/spill"}})
    assert cfg.out == Path("a/b.mp4") and cfg.memory.spill == Path("/tmp/spill")
    assert cfg.log_path == Path("a/b.log.jsonl") and cfg.config_path == Path("a/b.config.json")
    as_json = config_to_json(cfg)
    assert as_json["memory"]["spill"] == "/tmp/spill"
    assert replace_strict(SessionConfig(), as_json) == cfg
