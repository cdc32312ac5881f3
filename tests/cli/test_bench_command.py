"""``worldpager bench quant|disk`` as users run them: a table, a parseable JSON last line, clean spill
directories and one-line errors. No timing is asserted (benchmarks are never tests)."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from worldpager_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, ["bench", *map(str, args)], catch_exceptions=False)


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_bench_quant_prints_a_table_then_json():
    result = run("quant", "--preset", "micro", "--tokens", "8", "--repeats", "1", "--device", "cpu")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert any(line.startswith("quantise") for line in lines)
    assert any(line.startswith("dequantise") for line in lines)
    doc = last_json(result.stdout)
    assert doc["bench"] == "quant" and doc["tokens"] == 8 and doc["format"] == "int4"
    for key in ("quant_vs_copy", "dequant_vs_copy", "quant_gbps", "dequant_gbps", "copy_gbps"):
        assert doc[key] > 0, key
    assert doc["machine"]["cpus"] >= 1 and doc["machine"]["device"]
    assert doc["params"] == {"preset": "micro", "bits": 4, "tokens": 8, "full_tokens": 24,
                             "device": "cpu", "backend": "auto", "threads": doc["params"]["threads"],
                             "repeats": 1}
    assert doc["backend"] == "fused"   # auto on a CPU


def test_bench_quant_times_backends_side_by_side():
    result = run("quant", "--preset", "micro", "--tokens", "8", "--repeats", "1", "--device", "cpu",
                 "--backend", "reference,fused", "--threads", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    for op in ("quantise", "dequantise"):
        assert [line.split()[1] for line in lines if line.startswith(op + " ")] == ["reference", "fused"]
    doc = last_json(result.stdout)
    assert [b["backend"] for b in doc["backends"]] == ["reference", "fused"]
    assert all(b["quant_vs_copy"] > 0 and b["dequant_vs_copy"] > 0 for b in doc["backends"])
    assert doc["params"]["backend"] == "reference,fused" and doc["params"]["threads"] == 1


@pytest.mark.parametrize("spec, named", [("fast", "'fast'"), ("fused,fused", "twice")])
def test_bench_quant_rejects_a_bad_backend_in_one_line(spec, named):
    result = run("quant", "--preset", "micro", "--tokens", "8", "--device", "cpu", "--backend", spec)
    one_line_error(result, named)


def test_bench_quant_reduces_the_chunk_on_a_cpu_and_says_so():
    result = run("quant", "--preset", "tiny", "--bits", "2", "--repeats", "1", "--device", "cpu")
    assert result.exit_code == 0, result.output
    doc = last_json(result.stdout)
    assert doc["params"]["tokens"] == 256 < doc["params"]["full_tokens"] == 660
    assert doc["format"] == "int2"
    assert "256 of 660 tokens" in result.stdout and "--tokens" in result.stdout


@pytest.mark.parametrize("raw", ["auto", "python"])
def test_bench_disk_prints_ratios_and_leaves_the_spill_dir_empty(tmp_path, raw):
    spill = tmp_path / "spill"
    spill.mkdir()
    result = run("disk", "--spill", spill, "--total-gib", 16 / 1024, "--rounds", 2, "--raw", raw)
    assert result.exit_code == 0, result.output
    assert "tier write" in result.stdout and "tier read" in result.stdout
    doc = last_json(result.stdout)
    assert doc["bench"] == "disk" and doc["rounds"] == 2 and doc["blocks"] == 4
    assert doc["write_vs_raw"] > 0 and doc["read_vs_raw"] > 0
    for key in ("raw_write_gbps", "raw_read_gbps", "write_gbps", "read_gbps", "crc_gbps"):
        assert doc[key] > 0, key
    assert len(doc["write_vs_raw_rounds"]) == len(doc["read_vs_raw_rounds"]) == 2
    assert isinstance(doc["o_direct"], bool) and doc["io_mode"] in ("direct", "buffered")
    assert doc["raw_method"] == ("python" if raw == "python" else doc["raw_method"])
    assert doc["machine"]["cpus"] >= 1 and doc["params"]["spill"] == str(spill)
    assert list(spill.iterdir()) == []


def test_bench_disk_without_dd_measures_the_raw_drive_in_python(tmp_path, monkeypatch):
    monkeypatch.setattr("engine.bench.disk.shutil.which", lambda name: None)
    result = run("disk", "--spill", tmp_path, "--total-gib", 8 / 1024, "--rounds", 1)
    assert result.exit_code == 0, result.output
    doc = last_json(result.stdout)
    assert doc["raw_method"] == "python" and any("dd not found" in n for n in doc["notes"])
    assert list(tmp_path.iterdir()) == []


def test_bench_disk_with_a_multi_piece_block_round_trips(tmp_path):
    """Blocks larger than one I/O piece take the threaded-crc path of the disk tier."""
    result = run("disk", "--spill", tmp_path, "--total-gib", 4 / 1024, "--block-mib", 1,
                 "--piece-mib", 0.25, "--rounds", 1)
    assert result.exit_code == 0, result.output
    doc = last_json(result.stdout)
    assert doc["block_bytes"] == 1 << 20 and doc["piece_bytes"] == 1 << 18 and doc["blocks"] == 4
    assert list(tmp_path.iterdir()) == []


def one_line_error(result, *needles, code: int = 1) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: error:"), lines
    for needle in needles:
        assert str(needle) in lines[0]


def test_missing_spill_dir_is_a_one_line_error(tmp_path):
    missing = tmp_path / "absent"
    one_line_error(run("disk", "--spill", missing, "--total-gib", 0.01), missing, "does not exist")
    assert not missing.exists()   # a benchmark never creates the directory it was pointed at


def test_spill_path_that_is_a_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    one_line_error(run("disk", "--spill", path, "--total-gib", 0.01), path, "not a writable directory")


def test_unwritable_spill_dir_is_a_one_line_error(tmp_path, monkeypatch):
    spill = tmp_path / "ro"
    spill.mkdir(mode=0o500)
    if os.geteuid() == 0:   # root writes through directory permissions: make access() say what a user gets
        monkeypatch.setattr("engine.bench.disk.os.access", lambda path, mode: not mode & os.W_OK)
    try:
        one_line_error(run("disk", "--spill", spill, "--total-gib", 0.01), spill, "not a writable directory")
    finally:
        spill.chmod(0o700)


def test_bad_sizes_and_devices_are_one_line_errors(tmp_path):
    one_line_error(run("disk", "--spill", tmp_path, "--total-gib", 0), "--total-gib", code=2)   # a size: usage
    one_line_error(run("disk", "--spill", tmp_path, "--total-gib", 0.01, "--block-mib", 64), "larger than")
    one_line_error(run("disk", "--spill", tmp_path, "--total-gib", 1e6), "free")
    one_line_error(run("quant", "--preset", "micro", "--device", "tpu"), "--device")
    assert list(tmp_path.iterdir()) == []


def test_bench_memory_prints_rss_blocks_then_json(tmp_path):
    result = run("memory", "--spill", tmp_path, "--chunks", 14, "--kv-scale", 0.034, "--warmup", 4, "--block", 5)
    assert result.exit_code == 0, result.output
    assert "RSS median" in result.stdout and "4-8" in result.stdout and "9-13" in result.stdout
    doc = last_json(result.stdout)
    assert doc["bench"] == "memory" and doc["status"] == "done" and doc["chunks"] == 14
    assert [b["first_chunk"] for b in doc["blocks"]] == [4, 9] and doc["drift"] >= 0 and doc["spread"] >= 0
    assert doc["rss_max_bytes"] >= doc["rss_min_bytes"] > 0 and doc["host_baseline_bytes"] > 0
    assert doc["pool_bytes"] > 0 and doc["host_mem_gib"] is None and doc["params"]["pool_slots"] == 16
    assert set(doc["allocator"]) >= {"applied", "libc", "mmap_threshold"}
    assert list(tmp_path.iterdir()) == []   # the disk tier's sub-directory is removed


def test_bench_memory_bad_values_are_one_line_errors(tmp_path):
    (tmp_path / "file").write_text("x")   # a directory that is missing is made (bench store, bench memory)
    one_line_error(run("memory", "--spill", tmp_path / "file"), "--spill", "is a file")
    one_line_error(run("memory", "--spill", tmp_path, "--host-mem", -1), "--host-mem", code=2)   # a size: usage
    one_line_error(run("memory", "--spill", tmp_path, "--chunks", 10, "--warmup", 10), "--warmup")


def test_bench_speed_reports_the_steps_medians_and_leaves_nothing_behind(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    result = CliRunner().invoke(cli, ["bench", "speed", "--chunks", "6", "--warmup", "2", "--workdir", str(work)])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("bench speed: arena on cpu, 1 intra-op thread(s), decode on a worker")
    doc = json.loads(lines[-1])
    assert doc["bench"] == "speed" and doc["status"] == "done" and doc["chunks"] == 6 and doc["measured"] == 4
    assert set(doc["medians_ms"]) == {"wall_ms", "compute_ms", "memory_ms", "store_ms", "decode_ms", "stall_ms"}
    assert doc["chunks_per_s"] > 0 and doc["threads"] == 1 and doc["decode_overlap"] is True
    assert list(work.iterdir()) == []
    off = CliRunner().invoke(cli, ["bench", "speed", "--chunks", "3", "--warmup", "1", "--no-decode-overlap",
                                   "--threads", "2", "--workdir", str(work), "--json"])
    assert off.exit_code == 0, off.output
    doc = json.loads(off.stdout)
    assert doc["decode_overlap"] is False and doc["threads"] == 2


def test_bench_speed_compare_depth_interleaves_both_arms_and_reports_the_ratio(tmp_path, monkeypatch):
    from engine.arena.depth_net import DepthNet
    from engine.arena.model import ArenaDiT

    work = tmp_path / "work"
    work.mkdir()
    calls = []
    from engine.arena.weights import packaged_depth_weights_path

    trained = packaged_depth_weights_path().exists()   # the packaged conv heads; else a seeded linear one
    owner, name = (DepthNet, "forward") if trained else (ArenaDiT, "inverse_depth")
    real = getattr(owner, name)

    def counted(self, *args):   # the depth arm runs a depth head (today's does not)
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(owner, name, counted)
    result = run("speed", "--compare", "depth", "--chunks", 3, "--warmup", 1, "--rounds", 2, "--workdir", work)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("bench speed --compare depth: arena on cpu")
    note = "trained depth head (arena-depth.safetensors)" if trained else "seeded random depth head"
    assert any(note in line for line in lines)
    assert any(line.split()[:3] == ["step", "today", "ms"] for line in lines)
    doc = last_json(result.stdout)
    assert doc["bench"] == "speed" and doc["compare"] == "depth" and doc["status"] == "done"
    assert set(doc["arms"]) == {"today", "depth"}
    for arm in doc["arms"].values():
        assert arm["measured"] == 2 * 2 and set(arm["medians_ms"]) == {"wall_ms", "compute_ms", "memory_ms",
                                                                       "store_ms", "decode_ms", "stall_ms"}
    assert set(doc["ratio"]) == {"wall_ms", "compute_ms"} and all(v > 0 for v in doc["ratio"].values())
    assert doc["target"] == 1.5
    assert [set(r) for r in doc["round_ratios"]] == [{"round", "wall_ms", "compute_ms"}] * 2
    assert doc["within_target"] == {k: v <= 1.5 for k, v in doc["ratio"].items()}
    assert [(s["arm"], s["round"]) for s in doc["sessions"]] == [("today", 0), ("depth", 0), ("depth", 1), ("today", 1)]
    assert all(s["load_before"] is not None for s in doc["sessions"]) and doc["load_1min"]["max"] >= 0
    assert len(calls) == 2 * 3   # every chunk of the two depth sessions, none of today's
    assert list(work.iterdir()) == []


def test_bench_speed_compare_is_for_the_arena_model_and_rounds_for_compare():
    result = run("speed", "--compare", "depth", "--model", "micro", "--chunks", 2)
    assert result.exit_code == 2 and "--compare depth is for the arena model" in result.output
    result = run("speed", "--rounds", 3, "--chunks", 2)
    assert result.exit_code == 2 and "--rounds is for --compare" in result.output


def test_the_seeded_depth_head_is_reproducible_and_loads_as_a_depth_head(tmp_path):
    import torch

    from engine.arena.weights import load_model, packaged_weights_path, read_metadata, with_seeded_depth_head
    from engine.errors import CheckpointError

    a = with_seeded_depth_head(packaged_weights_path(), tmp_path / "a.safetensors", 3)
    b = with_seeded_depth_head(packaged_weights_path(), tmp_path / "b.safetensors", 3)
    c = with_seeded_depth_head(packaged_weights_path(), tmp_path / "c.safetensors", 4)
    ma, mb, mc = load_model(a), load_model(b), load_model(c)
    assert ma.cfg.depth_head and "seeded 3" in read_metadata(a)["depth_head"]
    assert torch.equal(ma.depth_out.weight, mb.depth_out.weight)
    assert not torch.equal(ma.depth_out.weight, mc.depth_out.weight)
    base = load_model(packaged_weights_path())
    assert torch.equal(ma.head.weight, base.head.weight)   # the rest is the packaged model's
    with pytest.raises(CheckpointError, match="already has a depth head"):
        with_seeded_depth_head(a, tmp_path / "d.safetensors", 0)
