"""One source of truth for a session's options (``engine.settings.options``): ``generate``, ``plan``, ``batch``'s flags,
its job lines and presets take the same settings.

* the flag sets: generate's flags are the table; plan takes every one of them; batch's flags are the
  table less what a batch sets per job or for itself; a job line takes the table less the device;
* every option's config key exists, and every config key (what a preset can set) is reachable from a
  flag, a job line and a preset alike (``--set KEY=VALUE``, a job's ``set``);
* the same value, given as a generate flag or as a job option, resolves to the same config, for every
  option of the table (the batch job options that once drifted, ``writeback`` and ``decode_overlap``,
  among them).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from engine.batch.jobs import OPTION_TYPES, Job, typed_options
from engine.batch.plan import job_config
from engine.errors import ConfigError
from engine.settings.options import BY_NAME, SESSION_OPTIONS, config_keys, overlay, parse_settings
from engine.settings.overlay import resolve_session_config
from worldpager_cli.batch import NOT_SHARED, SHARED, batch
from worldpager_cli.main import generate
from worldpager_cli.plan import plan

# A valid value of every option of the table, as a user would type it on the command line.
SAMPLES = {
    "preset": "mg2-4090-32g", "image": "start.png", "trajectory": "path.yaml", "observe": "tour.yaml",
    "observe_poses": "tour.poses.csv", "repeat": "pingpong", "out": "a.mp4", "log": "a.log.jsonl",
    "chunks": "7", "seconds": None, "minutes": None, "checkpoint": "ckpt", "seeded_weights": True, "prompt": "a street", "model": "tiny", "arena_seed": "7",
    "arena_weights": "w.safetensors", "arena_reproject": "0.3", "look_around": "3",
    "arena_reproject_depth": True, "seed": "3", "device": "cpu", "save_every": "5", "keep_savepoints": "3",
    "decode_overlap": True, "positions": "extend", "chunk_ms": "10", "kv_scale": "0.5", "store": "on-demand",
    "spill": "sp", "host_mem": "6", "pool_slots": "9", "device_mem": "4", "kv_bits": "8", "kv_keys": "pre-rope", "weights": "int8",
    "drive_bw": "0.25", "spill_max": "4G", "retrieve_k": "2", "retrieve_visit": "newest", "sink": True, "official_sink": True, "io_deadline": "12",
    "late_prefetch": "wait", "kv_paging": "layer", "writeback": "through", "threads": "1",
    "set": ["calibration.mouse_step=0.2", "save_interval_s=12"],
}


# How a command behaves, not what a session is: no config key, so not in the table.
COMMAND_FLAGS = ("quiet", "overwrite", "as_json", "help")


def _params(command) -> set[str]:
    return {p.name for p in command.params if p.name not in COMMAND_FLAGS}


def test_generate_takes_the_table_and_plan_every_flag_of_it():
    assert _params(generate) == set(BY_NAME)
    assert set(BY_NAME) <= _params(plan)


def test_batch_flags_and_job_lines_take_the_table_less_what_a_batch_sets_itself():
    assert set(SHARED) == set(BY_NAME) - set(NOT_SHARED)
    assert set(SHARED) <= _params(batch)
    assert set(OPTION_TYPES) == (set(BY_NAME) - {"device"}) | {"name"}


def test_every_option_sets_a_real_config_key_and_every_key_is_reachable():
    keys = set(config_keys())
    targets = {o.target for o in SESSION_OPTIONS if o.target}
    assert targets <= keys
    assert set(SAMPLES) == set(BY_NAME)
    for key in keys:   # --set reaches what only a preset could set before: a flag, a job line, a preset
        node = parse_settings([f"{key}=1"])
        for part in key.split("."):
            node = node[part]
        assert node == 1


def _generate_overlay(args: list[str]) -> dict:
    ctx = generate.make_context("generate", args)
    return overlay(ctx.params)


def _flag_args(name: str, value) -> list[str]:
    option = BY_NAME[name]
    if option.kind == "switch":
        return [option.flag if value else f"--no-{option.flag[2:]}"]
    if option.kind == "settings":
        return [a for v in value for a in (option.flag, v)]
    return [option.flag, str(value)]


@pytest.mark.parametrize("name", [n for n, v in SAMPLES.items() if v is not None and n not in ("device", "out", "log")])
def test_a_flag_and_a_job_option_resolve_alike(name, tmp_path):
    value = SAMPLES[name]
    from_flag = _generate_overlay(_flag_args(name, value) + ["--out", str(tmp_path / "job.mp4")])
    job = Job("job", typed_options({name: value}, "test line"), "test line")
    base = {"model": "tiny"} if name not in ("model", "checkpoint", "arena_seed", "arena_weights", "preset") else {}
    if name in ("prompt", "official_sink"):   # LingBot options
        base = {"model": "lingbot-tiny"}
    preset = value if name == "preset" else None
    length = {"chunks": int(value)} if name == "chunks" else {}
    generate_cfg = resolve_session_config(preset, {**from_flag, **base, **length})
    batch_cfg = job_config(Job("job", {**job.options, **base}, "test line"), tmp_path)
    assert generate_cfg == batch_cfg


def test_the_options_a_batch_once_refused_plan_as_generate_runs_them(tmp_path):
    job = Job("j", typed_options({"writeback": "through", "decode_overlap": True, "late_prefetch": "wait",
                                   "set": {"calibration.mouse_step": 0.2}}, "line 1"), "line 1")
    cfg = job_config(job, tmp_path)
    assert cfg.memory.writeback == "through" and cfg.decode_overlap and cfg.memory.late_prefetch == "wait"
    assert cfg.calibration.mouse_step == 0.2


def test_set_takes_any_config_key_and_names_a_bad_one():
    cfg = resolve_session_config(None, overlay({"set": ("memory.retrieve_k=5", "save_interval_s=2.5",
                                                        "calibration.quantise_mouse=false")}))
    assert cfg.memory.retrieve_k == 5 and cfg.save_interval_s == 2.5 and cfg.calibration.quantise_mouse is False
    with pytest.raises(ConfigError, match="memory.nope"):
        resolve_session_config(None, overlay({"set": ("memory.nope=1",)}))
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        overlay({"set": ("retrieve_k",)})
    # a flag and --set of the same key: --set, given explicitly, wins
    assert resolve_session_config(None, overlay({"retrieve_k": 2, "set": ("memory.retrieve_k=4",)})).memory.retrieve_k == 4


def test_a_preset_and_set_reach_the_same_keys(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"calibration": {"mouse_step": 0.3}, "memory": {"retrieve_k": 2}}))
    by_preset = resolve_session_config(preset, {})
    by_set = resolve_session_config(None, overlay({"set": ("calibration.mouse_step=0.3", "memory.retrieve_k=2")}))
    assert by_preset == by_set
    assert Path(preset).is_file()


def test_a_jobs_fingerprint_leaves_out_what_does_not_change_its_video():
    from engine.batch.plan import fingerprint

    def job(**extra):
        return Job("j", typed_options({"chunks": 7, "seed": 3, **extra}, "line 1"), "line 1")

    same = fingerprint(job())
    assert fingerprint(job(decode_overlap=False, threads=2, keep_savepoints=5)) == same
    assert fingerprint(job(kv_bits=8)) != same and fingerprint(job(chunks=8)) != same
