"""One rule for byte sizes (``engine.settings.sizes``): every size flag of every command, the presets, config files,
``--set`` and batch job lines take ``24G``, ``24GiB``, ``24GB``, ``512M``, ``1.5T`` (binary units; a plain
number in the flag's own unit), and a bad size is one line naming the flag and the value, exit 2."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from engine.errors import ConfigError
from engine.memory.quota import parse_spill_max
from engine.settings.options import job_parsers
from engine.settings.sizes import GiB, MiB, TiB, parse_size, size_in
from tests_support import one_line_error
from worldpager_cli.main import cli

PLAN = ("plan", "--model", "synthetic", "--chunks", "10", "--device", "cpu", "--quiet")


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def plan_json(*args, env=None) -> dict:
    result = invoke(*PLAN, *args, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.parametrize("text, plain, expected", [
    ("24G", GiB, 24 * GiB), ("24GiB", GiB, 24 * GiB), ("24GB", GiB, 24 * GiB), ("24gib", GiB, 24 * GiB),
    ("24 G", GiB, 24 * GiB), ("512M", GiB, 512 * MiB), ("1.5T", GiB, 1.5 * TiB), ("800k", 1, 800 * 1024),
    ("4096B", GiB, 4096), ("24", GiB, 24 * GiB), ("22.5", GiB, 22.5 * GiB), ("24", 1, 24), ("1e3", MiB, 1000 * MiB),
    (24, GiB, 24 * GiB), (22.5, GiB, 22.5 * GiB), (".5G", 1, GiB / 2),
])
def test_the_size_rule(text, plain, expected):
    assert parse_size(text, "--x", plain) == expected


@pytest.mark.parametrize("text", ["24X", "G", "", "24 GiBs", "1,5G", "nan", "inf", "-1G", "24G24", True, None,
                                  [24], float("nan"), "1" * 400, "9" * 300 + "T", "24\nG"])
def test_what_is_not_a_size_is_one_line_naming_it(text):
    with pytest.raises(ConfigError, match=r"^--x: ") as caught:
        parse_size(text, "--x", GiB)
    assert "\n" not in str(caught.value)


def test_a_plain_number_keeps_each_flags_unit():
    assert size_in("22.5", "--host-mem", GiB) == 22.5 and size_in("512M", "--host-mem", GiB) == 0.5
    assert parse_spill_max("4096") == 4096 == parse_spill_max(4096)   # --spill-max: bytes, as it always was
    assert parse_spill_max("2G") == parse_spill_max("2GiB") == parse_spill_max("2GB") == parse_spill_max("2048M") == 2 * GiB


# ---- generate's and plan's flags (one table): the forms, equal values, and the planner reads them -----------

@pytest.mark.parametrize("forms", [("24", "24G", "24GiB", "24GB", "24576M", "0.0234375T"),
                                   ("22.5", "22.5G", "22.5GiB", "23040MiB")])
def test_host_mem_forms_plan_the_same(forms):
    plans = [plan_json("--host-mem", form) for form in forms]
    assert all(p["pool_slots"] == plans[0]["pool_slots"] and p["spill_chunk"] == plans[0]["spill_chunk"]
               for p in plans)


def test_host_mem_in_a_unit_is_that_many_bytes():
    small, large = plan_json("--host-mem", "12G"), plan_json("--host-mem", "12T")
    assert plan_json("--host-mem", "12")["pool_slots"] == small["pool_slots"] < large["pool_slots"]


def test_device_mem_forms_plan_the_same():
    plans = [plan_json("--device-mem", form, "--host-mem", "64") for form in ("24", "24G", "24GiB", "24GB", "24576M")]
    assert all(p["spill_chunk"] == plans[0]["spill_chunk"] for p in plans)
    smaller = plan_json("--device-mem", "12G", "--host-mem", "64")
    assert smaller["spill_chunk"]["device-bf16"] < plans[0]["spill_chunk"]["device-bf16"]


def test_spill_max_forms_plan_the_same(tmp_path):
    quotas = [plan_json("--spill", tmp_path, "--probe-mib", "1", "--spill-max", form)["quota"]["spill_max_bytes"]
              for form in ("2G", "2GiB", "2GB", "2048M", "2147483648")]
    assert quotas == [2 * GiB] * 5


def test_environment_variables_take_sizes():
    assert plan_json(env={"WORLDPAGER_HOST_MEM": "24G"})["pool_slots"] == plan_json("--host-mem", "24")["pool_slots"]


# ---- a bad size, any command: one line naming the flag and the value, exit 2 --------------------------------

BAD_FLAGS = [
    ("generate", "--host-mem"), ("generate", "--device-mem"), ("generate", "--spill-max"),
    ("plan", "--host-mem"), ("plan", "--device-mem"), ("plan", "--spill-max"), ("plan", "--probe-mib"),
    ("plan", "--baseline-gib"), ("plan", "--device-baseline-gib"),
    ("batch jobs.jsonl", "--host-mem"), ("batch jobs.jsonl", "--spill-max"),
    ("bench memory", "--host-mem"), ("bench store", "--spill-max"),
    ("bench disk", "--total-gib"), ("bench disk", "--block-mib"), ("bench disk", "--piece-mib"),
]


@pytest.mark.parametrize("command, flag", BAD_FLAGS)
@pytest.mark.parametrize("value", ["24X", "-3G", "0"])
def test_a_bad_size_is_a_usage_error(command, flag, value):
    if value == "0" and flag == "--baseline-gib" or value == "0" and flag == "--device-baseline-gib":
        return   # a baseline of nothing is a size (the process measured without one)
    line = one_line_error(invoke(*command.split(), flag, value), flag, repr(value), code=2)
    assert any(words in line for words in ("not a size", "not a positive", "not at least"))


def test_the_spill_max_share_is_checked_as_a_flag():
    one_line_error(invoke(*PLAN, "--spill-max", "150%"), "--spill-max", "(0, 100] %", code=2)


def test_the_help_says_the_rule():
    assert "plain number is GiB" in " ".join(invoke("generate", "--help").output.split())


# ---- presets, config files, --set and job lines: the same strings ------------------------------------------

def test_a_preset_takes_sizes(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("memory:\n  host_mem_gib: 24G\n  device_mem_gib: 22.5GiB\n  spill_max: 2GB\n")
    by_preset = plan_json("--preset", preset, "--spill", tmp_path, "--probe-mib", "1")
    by_flags = plan_json("--host-mem", "24", "--device-mem", "22.5", "--spill-max", "2147483648",
                         "--spill", tmp_path, "--probe-mib", "1")
    for key in ("pool_slots", "spill_chunk", "quota"):
        assert by_preset[key] == by_flags[key]


def test_a_config_file_and_set_take_sizes(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  host_mem_gib: 12288M\n")
    expected = plan_json("--host-mem", "12")
    assert plan_json("--set", "memory.host_mem_gib=12288M")["pool_slots"] == expected["pool_slots"]
    assert plan_json(env={"WORLDPAGER_CONFIG": str(config)})["pool_slots"] == expected["pool_slots"]


def test_a_bad_size_in_a_preset_is_one_line_naming_the_key(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("memory:\n  host_mem_gib: 24X\n")
    one_line_error(invoke(*PLAN, "--preset", preset), "memory.host_mem_gib", "'24X'", "not a size", str(preset))


def test_job_lines_take_sizes():
    parsers = job_parsers()
    assert parsers["host_mem"]("24G") == parsers["host_mem"](24) == 24.0 and parsers["device_mem"]("512M") == 0.5
    assert parsers["spill_max"]("10%") == "10%" and parsers["spill_max"]("2G") == "2G"
    for name in ("host_mem", "device_mem", "spill_max"):
        with pytest.raises(ValueError, match="not a size"):
            parsers[name]("24X")
