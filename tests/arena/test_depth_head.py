"""The arena model's optional depth head (``ArenaModelConfig.depth_head``, ``train --depth-weight``).

Off by default: the packaged weights load unchanged and have no depth head; a model with the head starts
from them with only the head new. Training with a depth weight reads the renderer's true depth, logs its
depth loss, and a short run on one batch brings that loss down.
"""
from __future__ import annotations

import dataclasses
import json

import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.model import ArenaDiT
from engine.arena.train import Recipe, batch_for, loss_of, main, model_config, train
from engine.arena.weights import config_of, init_from, load_model, packaged_weights_path

CFG = ArenaModelConfig(layers=1, depth_head=True)
RECIPE = Recipe(steps=2, batch=1, chunks=3, warmup=1, self_context=0.0, depth_weight=1.0)


def test_the_packaged_weights_load_unchanged_and_a_depth_head_starts_from_them():
    packaged = packaged_weights_path()
    assert config_of(packaged).depth_head is False
    plain = load_model(packaged)                                           # strict: no key missing or extra
    assert not hasattr(plain, "depth_out")
    model = ArenaDiT(dataclasses.replace(config_of(packaged), depth_head=True))
    missing = init_from(model, packaged, torch.Generator().manual_seed(0))
    assert sorted(missing) == ["depth_out.bias", "depth_out.weight"]
    assert torch.equal(model.head.weight, plain.head.weight)


def test_a_short_run_with_the_depth_head_brings_its_depth_loss_down():
    torch.manual_seed(0)
    model = ArenaDiT(CFG)
    eps, context, noisy, t, start = batch_for(RECIPE, CFG, 0)
    assert eps.depth is not None and eps.depth.shape == (1, RECIPE.chunks, CFG.frames_per_chunk, CFG.height, CFG.width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(15):
        figures: dict = {}
        loss = loss_of(model, eps, context, noisy, t, start, RECIPE, figures)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(figures["depth_loss"])
    assert max(losses[-3:]) < 0.5 * losses[0], losses                     # measured: 0.070 -> 0.006


def test_training_with_a_depth_weight_logs_the_depth_loss(tmp_path):
    train(tmp_path / "run", RECIPE, CFG, save_every=1, quiet=True)
    rows = [json.loads(line) for line in (tmp_path / "run" / "train.log.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["depth_loss"] > 0 for r in rows)
    # without a depth weight there is no depth target, and no figure
    train(tmp_path / "plain", dataclasses.replace(RECIPE, depth_weight=0.0), CFG, save_every=1, quiet=True)
    rows = [json.loads(line) for line in (tmp_path / "plain" / "train.log.jsonl").read_text().splitlines()]
    assert all("depth_loss" not in r for r in rows)


def test_the_depth_weight_adds_the_head_to_a_new_design_and_is_refused_without_it(tmp_path, capsys):
    assert model_config(tmp_path / "new", None, depth_head=True).depth_head is True
    assert model_config(tmp_path / "new", None, depth_head=None).depth_head is False
    train(tmp_path / "old", dataclasses.replace(RECIPE, steps=1, depth_weight=0.0), ArenaModelConfig(layers=1),
          save_every=1, quiet=True)
    try:
        main(["--out", str(tmp_path / "old"), "--steps", "2", "--depth-weight", "1", "--quiet"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("a checkpoint without the depth head took a depth weight")
    assert "has no depth head" in capsys.readouterr().err
