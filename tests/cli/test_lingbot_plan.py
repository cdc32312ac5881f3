"""``worldpager plan`` and ``inspect`` for LingBot-World-Fast at full size, from its torch-free config
(no weights): bytes per chunk in every format, the spill point of the paper's 32 GiB platform, storage
and write-back need of a 37.5-minute session, and the packaged preset; what cannot generate yet fails
with one line."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from engine.facts.kv_format import byte_figures
from engine.facts.lingbot_models import LINGBOT_FAST
from tests_support import one_line_error
from worldpager_cli.main import cli

INT4 = byte_figures(LINGBOT_FAST.kv_layout())["int4"]


def last_json(*args) -> dict:
    result = CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_full_size_kv_bytes():
    facts = last_json("inspect", "--model", "lingbot-fast")
    assert facts["tokens_per_chunk"] == 3 * 1560 and facts["layers"] == 40 and facts["head_dim"] == 128
    assert facts["kv_bytes_per_chunk_bf16"] == 2 * 40 * 4680 * 5120 * 2 == 3_833_856_000
    assert facts["kv_bytes_per_chunk_int4"] == INT4 and facts["horizon_chunk"] == 341


def test_a_37_minute_session_at_32_gib():
    summary = last_json("plan", "--model", "lingbot-fast", "--host-mem", 32, "--device", "cuda",
                        "--minutes", 37.5, "--drive-bw", 1.0, "--quiet")
    assert summary["model"] == "lingbot-fast" and summary["chunks"] == 3001
    assert summary["bytes_per_chunk"] == INT4
    pool = summary["pool_bytes"]
    assert summary["spill_chunk"]["host-int4"] == pool // summary["slot_bytes"] == 28
    assert summary["storage_bytes"] == 3001 * INT4
    assert summary["writeback_gbps"] == pytest.approx(INT4 / 1.2 / 1e9, abs=1e-3)     # default 1.2 s chunks


def test_the_preset_names_a_gpu_its_weights_fit():
    summary = last_json("plan", "--preset", "lingbot-fast-h100-64g", "--minutes", 37.5, "--drive-bw", 1.0, "--quiet")
    weights = LINGBOT_FAST.shape().device_params * 2
    assert summary["device_weights_bytes"] == weights == 37_342_450_790
    buffers = 9 * LINGBOT_FAST.kv_layout().bytes_per_chunk(2.0)     # window 4, current, k 3, sink
    assert summary["device_baseline_bytes"] + buffers <= 79 * 2**30
    assert summary["spill_chunk"]["host-int4"] == 62 and "device_runtime" in summary["assumed"]


def test_a_device_no_choice_fits_is_one_line():
    result = CliRunner().invoke(cli, ["plan", "--model", "lingbot-fast", "--device", "cuda", "--device-mem", "6",
                                      "--minutes", "1"])
    line = one_line_error(result, "lingbot-fast does not fit the 6.0 GiB device budget")
    assert "the least it needs is" in line and "RTX 4080 16 GB" in line


@pytest.mark.parametrize("args, needle", [
    (("--model", "lingbot-fast"), "no built-in weights"),
    (("--model", "lingbot-tiny", "--checkpoint", "."), "give --prompt TEXT"),
    (("--model", "lingbot-tiny", "--observe", "clip.mp4"), "cannot start from an observed clip"),
])
def test_what_cannot_generate_yet_is_one_line_and_leaves_nothing(tmp_path, args, needle):
    out = tmp_path / "x.mp4"
    args = tuple(str(tmp_path / a) if a == "clip.mp4" else a for a in args)
    one_line_error(CliRunner().invoke(cli, ["generate", *args, "--out", str(out)]), needle)
    assert list(tmp_path.iterdir()) == []
