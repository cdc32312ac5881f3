"""``scripts/device_train.sh``: the device training run's path, checked on the CPU by its dry run (two
steps from the packaged weights, batches rendered in a worker process): the fp16 weights the loader
accepts, the training log and the summary land in $OUT; without a CUDA device a real run refuses in one
line. The timed schedule: warm-up, peak, a linear decay over the time's last fifth."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from engine.arena.train import DECAY_SHARE, Recipe, timed_learning_rate
from engine.arena.weights import load_model, packaged_weights_path, read_metadata

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "device_train.sh"


def _run(tmp_path, *args):
    env = dict(os.environ, OUT=str(tmp_path / "out"), OMP_NUM_THREADS="1")
    return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)


def test_dry_run_writes_weights_log_and_summary_to_out(tmp_path):
    result = _run(tmp_path, "--dry-run")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["arena.safetensors", "device_train.json", "train.log.jsonl"]
    summary = json.loads((out / "device_train.json").read_text())
    assert summary["dry_run"] and summary["step"] == 2 and summary["workers"] == 1
    assert json.loads(result.stdout.strip().splitlines()[-1])["step"] == 2
    log = [json.loads(line) for line in (out / "train.log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and all(r["lr"] > 0 for r in log)
    meta = read_metadata(out / "arena.safetensors")
    assert meta["train_steps"] == "2" and meta["init_train_steps"] == read_metadata(packaged_weights_path())["train_steps"]
    model = load_model(out / "arena.safetensors")
    shipped = load_model(packaged_weights_path())
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, shipped.state_dict()[k])]
    assert changed                                  # trained from the packaged weights, not a copy of them


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_a_real_run_refuses_in_one_line(tmp_path):
    result = _run(tmp_path, "0.1")
    assert result.returncode == 1 and "no CUDA device" in result.stderr
    assert not (tmp_path / "out" / "arena.safetensors").exists()


def test_timed_schedule_warms_up_holds_then_decays():
    r = Recipe(lr=1e-3, warmup=10, min_lr_ratio=0.1)
    assert timed_learning_rate(r, 0, 0.0) == pytest.approx(1e-4)
    assert timed_learning_rate(r, 50, 0.5) == pytest.approx(1e-3)
    assert timed_learning_rate(r, 50, 1 - DECAY_SHARE) == pytest.approx(1e-3)
    assert timed_learning_rate(r, 50, 1 - DECAY_SHARE / 2) == pytest.approx(0.55e-3)
    assert timed_learning_rate(r, 50, 1.0) == pytest.approx(1e-4)
