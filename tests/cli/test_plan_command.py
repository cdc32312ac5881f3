"""``worldpager plan`` as a user runs it: table, last-line JSON, one-line errors."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests_support import one_line_error
from worldpager_cli.main import cli

REQUIRED = ("bytes_per_chunk", "spill_chunk", "writeback_gbps", "read_gbps", "storage_bytes", "stall_predicted")


def run(*args):
    return CliRunner().invoke(cli, ["plan", *map(str, args)], catch_exceptions=False)


def last_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_the_papers_session_plans_without_stalls():
    result = run("--preset", "mg2-4090-32g", "--minutes", 37.5, "--drive-bw", 1.0)
    summary = last_json(result)
    assert all(key in summary for key in REQUIRED)
    assert summary["bytes_per_chunk"] == 129_438_720 and summary["chunks"] == 3001
    assert summary["spill_chunk"]["device-bf16"] == 21
    assert summary["spill_chunk"]["host-bf16"] == 60 and summary["spill_chunk"]["host-int4"] == 226
    assert summary["writeback_gbps"] == pytest.approx(0.108, abs=0.001) and summary["read_gbps"] > 0
    assert summary["stall_predicted"] is False and summary["max_zero_stall_chunks"] is None
    assert summary["disk_bytes"] / 2**30 == pytest.approx(334, abs=1)
    assert "host-int4" in result.output and "write-back need" in result.output


def test_a_slow_drive_predicts_stalls():
    summary = last_json(run("--minutes", 37.5, "--drive-bw", 0.1))
    assert summary["stall_predicted"] is True and summary["prefetch_stall_ms"] > 0
    assert summary["max_zero_stall_chunks"] == 227


def test_without_a_drive_the_session_stops_at_the_spill_chunk():
    summary = last_json(run("--minutes", 37.5))
    assert summary["disk_tier"] is False and summary["stop_chunk"] == 226 and summary["stall_predicted"] is False


def test_64_gib_dram_only():
    summary = last_json(run("--host-mem", 64, "--store", "dram-only", "--chunks", 600))
    assert summary["spill_chunk"]["host-int4"] == 492 and summary["stop_chunk"] == 492


def test_kv_bits_selects_the_format():
    summary = last_json(run("--kv-bits", 16, "--chunks", 50, "--drive-bw", 1))
    assert summary["format"] == "bf16" and summary["bytes_per_chunk"] == 486_604_800


def test_spill_dir_is_probed_and_left_clean(tmp_path):
    result = run("--spill", tmp_path, "--probe-mib", 8, "--chunks", 300)
    summary = last_json(result)
    assert summary["drive_source"] == "probe" and summary["disk_tier"] is True
    assert summary["drive_read_gbps"] > 0 and summary["disk_free_bytes"] > 0
    assert result.output.startswith("probe: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, needles, code", [
    (("--host-mem=-1",), ("--host-mem", "positive number of GiB"), 2),   # a bad flag value: usage, exit 2
    (("--host-mem", "-4"), ("--host-mem",), 2),
    (("--device-mem", "0"), ("--device-mem",), 2),
    (("--preset", "no-such-preset"), ("unknown preset", "no-such-preset"), 1),
    (("--kv-bits", "3"), ("--kv-bits",), 2),   # not one of the choices: click's usage error
    (("--drive-bw", "fast"), ("--drive-bw",), 1),
    (("--minutes", "-5"), ("--minutes", "-5 is not a positive number of minutes"), 2),
    (("--chunk-ms", "0"), ("--chunk-ms",), 1),
    (("--host-mem", "5"), ("--host-mem 5.00 GiB leaves room",), 1),
])
def test_bad_flags_are_one_line_errors(args, needles, code):
    one_line_error(run(*args), *needles, code=code)


def test_a_missing_spill_dir_is_a_one_line_error(tmp_path):
    one_line_error(run("--spill", tmp_path / "absent"), "not a writable directory")


def test_pool_slots_from_a_flag_or_a_preset_are_planned_as_the_session_runs_them(tmp_path):
    """A preset with kv_scale 0.3 and pool_slots 12 was once planned with 507 slots and no stall."""
    preset = tmp_path / "small-pool.yaml"
    preset.write_text("model: synthetic\nkv_scale: 0.3\nmemory:\n  pool_slots: 12\n  host_mem_gib: 32\n")
    from_preset = last_json(run("--preset", preset, "--chunks", 40, "--drive-bw", 0.02, "--wall-ms", 1500))
    assert from_preset["pool_slots"] == from_preset["session_spill_chunk"] == 12
    assert from_preset["stall_predicted"] is True and from_preset["first_stall_chunk"] is not None
    from_flag = last_json(run("--model", "synthetic", "--kv-scale", 0.3, "--pool-slots", 4, "--chunks", 40,
                              "--drive-bw", 1))
    assert from_flag["pool_slots"] == 4 and from_flag["spill_chunk"]["host-int4"] == 4


def test_generate_flags_are_taken_as_generate_takes_them(tmp_path):
    summary = last_json(run("--model", "synthetic", "--kv-scale", 0.1, "--pool-slots", 6, "--seconds", 10,
                            "--trajectory", "trajectories/yaw.yaml", "--out", tmp_path / "x.mp4", "--seed", 3,
                            "--positions", "extend", "--retrieve-k", 2, "--store", "on-demand", "--drive-bw", 0.5,
                            "--device", "cpu", "--save-every", 0, "--io-deadline", 5, "--quiet"))
    assert summary["store"] == "on-demand" and summary["retrieve_k"] == 2 and summary["chunks"] == 14
    assert summary["device"]["kind"] == "cpu" and not list(tmp_path.iterdir())
    assert len(run("--quiet", "--chunks", 10).output.strip().splitlines()) == 1   # only the JSON line


def test_the_baseline_comes_from_a_session_logs_header(tmp_path):
    log = tmp_path / "s.log.jsonl"
    log.write_text('{"type": "header", "host_baseline_bytes": 1073741824}\n{"type": "chunk"}\n')
    args = ("--model", "synthetic", "--kv-scale", 0.1, "--host-mem", 4, "--chunks", 100, "--device", "cpu")
    summary = last_json(run(*args, "--baseline-from", log))
    assert summary["host_baseline_bytes"] == 2**30
    slot, staging = summary["slot_bytes"], 3 * summary["bytes_by_format"]["bf16"]   # float32 staging on a CPU
    assert summary["pool_slots"] == (4 * 2**30 - 2**30 - staging - 2 * 2**30) // slot
    (tmp_path / "no-pool.log.jsonl").write_text('{"type": "header", "host_baseline_bytes": null}\n')
    one_line_error(run(*args, "--baseline-from", tmp_path / "no-pool.log.jsonl"), "host_baseline_bytes")
    one_line_error(run(*args, "--baseline-from", log, "--baseline-gib", 1), "only one of")


# ---- assumed inputs, and a log that measures them --------------------------------------------------

def _measured_log(path, walls, model="mg2-universal", baseline=3 << 30):
    records = [{"type": "header", "config": {"model": model}, "host_baseline_bytes": baseline}]
    records += [{"type": "chunk", "chunk": i, "wall_ms": w, "stall_ms": 100.0 if i == 2 else 0.0,
                 "paused_ms": 0.0} for i, w in enumerate(walls)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_every_assumed_input_is_marked_and_listed():
    result = run("--preset", "mg2-4090-32g", "--minutes", 1)
    summary = last_json(result)
    assert summary["assumed"] == ["chunk_ms", "host_baseline", "device_runtime"]
    # chunk time, host baseline, and the device's activations, CUDA context, reserve and PCIe rate
    assert result.output.count("(assumed*)") == 6 and "* assumed: the paper's MG2 on an RTX 4090" in result.output
    assert summary["device"]["assumed"] == ["activations", "context", "reserve", "flash_attention", "pcie_gbs"]
    assert summary["device_weights_bytes"] == 2 * 2_357_220_915
    assert summary["device_baseline_bytes"] == summary["device_weights_bytes"] + int(7.6 * 2**30)
    given = last_json(run("--preset", "mg2-4090-32g", "--minutes", 1, "--wall-ms", 900, "--baseline-gib", 3,
                          "--device-baseline-gib", 12))
    assert given["assumed"] == [] and given["chunk_ms"] == 900.0
    assert given["device"]["assumed"] == ["pcie_gbs"]      # the runtime is the given baseline less the weights
    assert given["device"]["activations"] == 12 * 2**30 - 2 * 2_357_220_915


def test_timing_from_a_log_replaces_the_chunk_time_and_the_baseline(tmp_path):
    log = _measured_log(tmp_path / "run.log.jsonl", [9000.0, 1000.0, 1500.0, 1400.0])   # chunk 0 left out
    summary = last_json(run("--preset", "mg2-4090-32g", "--minutes", 1, "--timing-from", log))
    assert summary["chunk_ms"] == 1400.0 and summary["host_baseline_bytes"] == 3 << 30
    assert summary["assumed"] == ["device_runtime"]


def test_timing_from_another_model_warns(tmp_path):
    log = _measured_log(tmp_path / "run.log.jsonl", [9000.0, 800.0, 800.0], model="micro")
    result = CliRunner().invoke(cli, ["plan", "--minutes", "1", "--timing-from", str(log)])
    assert result.exit_code == 0 and "measured micro, this plan is for mg2-universal" in result.stderr


@pytest.mark.parametrize("walls, extra, needle", [
    ([9000.0], (), "no chunk after the first was logged"),
    ([9000.0, 800.0], ("--wall-ms", "900"), "give only one of --wall-ms, --timing-from"),
])
def test_timing_from_that_cannot_say_is_one_line(tmp_path, walls, extra, needle):
    log = _measured_log(tmp_path / "run.log.jsonl", walls)
    one_line_error(CliRunner().invoke(cli, ["plan", "--timing-from", str(log), *extra]), needle)


def test_timing_from_a_file_that_is_not_a_log_is_one_line(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"type": "chunk"}\n')
    one_line_error(CliRunner().invoke(cli, ["plan", "--timing-from", str(bad)]), "not a session log")
