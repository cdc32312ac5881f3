"""Block streaming (``engine.model.weight_stream``, ``engine.model.weight_place``): exact against resident
weights on every model with blocks, the device budget enforced on the CPU, the log and the refusals."""
from __future__ import annotations

import functools

import pytest
import torch
from click.testing import CliRunner

import engine.model.weight_place as weight_place
from engine.settings.overlay import resolve_session_config
from engine.planner.weight_plan import Residency
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import one_line_error

CHUNKS = 3


def _cfg(tmp_path, name, model, **extra):
    memory = {"late_prefetch": "wait", **extra.pop("memory", {})}
    flags = {"model": model, "chunks": CHUNKS, "out": tmp_path / f"{name}.mp4", "save_every": 0,
             "decode_overlap": False, "memory": memory, **extra}
    if model == "arena":
        flags["look_around"] = 0
    return resolve_session_config(None, flags)


def _outputs(cfg) -> tuple[list[torch.Tensor], list[dict], dict]:
    """The model's output of every chunk (before decoding), the chunk records and the header."""
    outputs: list[torch.Tensor] = []
    result = Session(cfg, on_output=lambda chunk, latents: outputs.append(latents.detach().clone())).run()
    assert result.status == "done"
    records = read_log(cfg.log_path)
    return outputs, [r for r in records if r["type"] == "chunk"], records[0]


def _force_streaming(monkeypatch, buffers: int) -> None:
    """Every block streams, through ``buffers`` slots (2-block models cannot stream by budget: the two
    slots alone would hold them all), so that the slots are rewritten chunk after chunk."""
    monkeypatch.setattr(weight_place, "weight_budget", lambda cfg, dtype, other: 0)
    monkeypatch.setattr(weight_place, "resident_blocks",
                        lambda sizes, budget: Residency(len(sizes), 0, 0, buffers * max(sizes)))
    monkeypatch.setattr(weight_place, "attach_streamer",
                        functools.partial(weight_place.attach_streamer, buffers=buffers))


@pytest.mark.parametrize("model, buffers, weights", [   # micro: MG2 tiny's DiT, a smaller VAE
    ("micro", 1, "bf16"), ("micro", 2, "bf16"), ("lingbot-tiny", 1, "bf16"), ("lingbot-tiny", 2, "bf16"),
    ("lingbot-tiny", 1, "int8")])
def test_streamed_blocks_compute_what_resident_ones_do_bit_for_bit(tmp_path, monkeypatch, model, buffers, weights):
    resident, _, head = _outputs(_cfg(tmp_path, "resident", model, weights=weights))
    assert head["weight_plan"]["streamed_blocks"] == 0 and head["weight_plan"]["format"] == weights
    _force_streaming(monkeypatch, buffers)
    streamed, records, head = _outputs(_cfg(tmp_path, "streamed", model, weights=weights))
    assert head["weight_plan"]["streamed_blocks"] == head["weight_plan"]["blocks"] > 0
    assert len(resident) == len(streamed) == CHUNKS
    for a, b in zip(resident, streamed):
        assert torch.equal(a, b)
    copied = [r["weight_bytes_streamed"] > 0 for r in records]
    assert all(copied) if buffers == 1 else copied[0]      # two slots hold micro's two blocks after chunk 0


@pytest.mark.parametrize("weights, mib", [("bf16", 16.0), ("int8", 12.0)])
def test_the_arena_model_streams_under_a_device_budget_below_its_weights_exactly(tmp_path, weights, mib):
    """--device-mem 16M leaves the blocks less than the arena model's 10.3 MB of weights (fp32 on the CPU;
    int8: 12M, its 7.4 MB) once the KV, the other weights and the reserve (45% of so small a budget) are
    set aside: the budget is enforced on the CPU too, the run ends with no stall, the log says what
    streamed, and the frames are those of the resident weights bit for bit."""
    window = {"store": "window"}
    resident, _, _ = _outputs(_cfg(tmp_path, "resident", "arena", weights=weights, memory=window))
    cfg = _cfg(tmp_path, "streamed", "arena", weights=weights, memory={**window, "device_mem_gib": mib / 1024})
    streamed, records, head = _outputs(cfg)
    plan = head["weight_plan"]
    assert plan["format"] == weights and plan["streamed_blocks"] > 0
    assert plan["resident_blocks"] + plan["streamed_blocks"] == plan["blocks"] == 4
    assert plan["device_weight_bytes"] < mib * 2 ** 20
    assert all(r["weight_bytes_streamed"] > 0 and r["stall_ms"] == 0 for r in records)
    for a, b in zip(resident, streamed):
        assert torch.equal(a, b)


def test_a_budget_below_the_two_slots_is_one_line(tmp_path):
    from worldpager_cli.main import cli

    result = CliRunner().invoke(cli, ["generate", "-q", "--chunks", "2", "--look-around", "0", "--store", "window",
                                      "--device-mem", "5M", "--out", str(tmp_path / "a.mp4")])
    one_line_error(result, "--device-mem", "slots of the largest block", "raise --device-mem")
    assert not (tmp_path / "a.mp4").exists()


def test_fp8_on_a_device_without_it_is_one_line_naming_the_device(tmp_path):
    from worldpager_cli.main import cli

    result = CliRunner().invoke(cli, ["generate", "-q", "--chunks", "2", "--device", "cpu", "--weights", "fp8",
                                      "--out", str(tmp_path / "a.mp4")])
    one_line_error(result, "--weights fp8", "cpu", "--weights int8")


def test_a_bad_weight_format_is_a_usage_error(tmp_path):
    from worldpager_cli.main import cli

    result = CliRunner().invoke(cli, ["generate", "--weights", "int4", "--out", str(tmp_path / "a.mp4")])
    assert result.exit_code == 2 and "int4" in result.output


def test_the_device_checks_weights_step_runs_dry_on_the_cpu(tmp_path):
    """``bench device --dry-run --steps weights``: resident, streamed and int8 chunks of micro's DiT;
    the streamed ones exact, the int8 error measured (the GPU run gives the full-size figures)."""
    import json

    from tests_support import PATIENCE_S, run_cli_inprocess

    out = tmp_path / "check"
    code, _, err = run_cli_inprocess(["bench", "device", "--dry-run", "--steps", "weights", "--out", out,
                                      "--step-budget", f"weights={PATIENCE_S}"])   # its step in a child process
    assert code == 0, err[-3000:]
    (row,) = json.loads((out / "device_check.json").read_text())["steps"]
    assert row["name"] == "weights" and row["status"] == "ok", row
    figures = row["figures"]
    assert figures["streamed_exact"] is True and figures["streamed"]["streamed_bytes_per_chunk"] > 0
    assert 0 < figures["int8_error"]["rel_l2"] < 0.05
