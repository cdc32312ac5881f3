"""Training the arena model: deterministic for a seed, resumable to the same bits, exportable."""
from __future__ import annotations

import json

import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.train import Recipe, train
from engine.arena.weights import export_checkpoint, load_model, read_metadata

CFG = ArenaModelConfig(layers=1)
RECIPE = Recipe(steps=2, batch=1, chunks=4, warmup=1, self_context=0.5)


def _losses(path):
    return [json.loads(line)["loss"] for line in (path / "train.log.jsonl").read_text().splitlines()]


def test_same_seed_same_losses_and_resume_is_exact(tmp_path):
    train(tmp_path / "a", RECIPE, CFG, save_every=1, quiet=True)
    train(tmp_path / "b", RECIPE, CFG, save_every=1, quiet=True)
    assert _losses(tmp_path / "a") == _losses(tmp_path / "b") and len(_losses(tmp_path / "a")) == 2
    # stop after one step, then resume: the second step is the uninterrupted run's, bit for bit
    import dataclasses
    train(tmp_path / "c", dataclasses.replace(RECIPE, steps=1), CFG, save_every=1, quiet=True)
    with open(tmp_path / "c" / "train.log.jsonl", "a") as log:        # a step made but never saved
        log.write(json.dumps({"step": 2, "loss": 123.0}) + "\n")
    train(tmp_path / "c", RECIPE, CFG, save_every=1, quiet=True)
    assert _losses(tmp_path / "c") == _losses(tmp_path / "a")
    a = torch.load(tmp_path / "a" / "last.pt", weights_only=True)["model"]
    c = torch.load(tmp_path / "c" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], c[k]) for k in a)


def test_export_writes_fp16_weights_the_loader_accepts(tmp_path):
    train(tmp_path / "run", RECIPE, CFG, save_every=1, quiet=True)
    out = tmp_path / "w.safetensors"
    export_checkpoint(tmp_path / "run" / "last.pt", out)
    meta = read_metadata(out)
    assert meta["train_steps"] == "2" and json.loads(meta["config"])["layers"] == 1
    model = load_model(out)
    state = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(model.state_dict()[k], state[k].half().float()) for k in state)
