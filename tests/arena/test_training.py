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


def test_a_new_output_design_trains_from_weights_without_it(tmp_path):
    """``--init`` weights of the plain design start a model with the pixel warp and three candidates:
    every tensor of the file is loaded, the extra candidates start as the head plus a little noise, and
    the model trains (its loss is the winner-takes-all one)."""
    import dataclasses

    from engine.arena.train import model_config
    from engine.arena.weights import init_from
    from engine.arena.model import ArenaDiT

    train(tmp_path / "plain", RECIPE, CFG, save_every=1, quiet=True)
    plain = tmp_path / "plain.safetensors"
    export_checkpoint(tmp_path / "plain" / "last.pt", plain)
    cfg = model_config(tmp_path / "new", plain, warp=True, hypotheses=3)
    assert cfg == dataclasses.replace(CFG, warp=True, hypotheses=3)
    model = ArenaDiT(cfg)
    missing = init_from(model, plain, torch.Generator().manual_seed(0))
    assert sorted(missing) == ["head_extra.bias", "head_extra.weight", "hyp_logits.bias", "hyp_logits.weight",
                               "warp_gate.bias", "warp_gate.weight"]
    head = model.head.weight
    extra = model.head_extra.weight.unflatten(0, (2, -1))
    assert torch.equal(head, load_model(plain).head.weight)
    assert all(0 < (e - head).abs().max() < head.abs().max() for e in extra)
    train(tmp_path / "new", RECIPE, cfg, save_every=1, init=plain, quiet=True)
    assert len(_losses(tmp_path / "new")) == 2 and all(v == v for v in _losses(tmp_path / "new"))


def test_memory_distance_moves_memory_keys_as_far_as_a_long_session_does():
    """By default memory keys are moved at most the native table's length back; with ``memory_distance``
    as far as ``--positions extend`` puts a memory minutes old (what the long benchmark found untrained)."""
    from engine.arena.config import ArenaModelConfig
    from engine.arena.data import training_episode

    cfg = ArenaModelConfig()

    def farthest(distance):
        out = 0.0
        for step in range(40):
            ep = training_episode(5, step, 0, cfg, 12, 3, distance)
            chunk = torch.arange(12)[:, None].float() * cfg.frames_per_chunk
            slot = ep.ctx_ids[:, :3].float() * cfg.frames_per_chunk
            moved = chunk - (slot + ep.mem_shift)                # how far back each slot's keys sit
            used = moved[ep.ctx_ids[:, :3] >= 0]
            out = max(out, float(used.max())) if len(used) else out
        return out

    assert farthest(None) <= cfg.rope_table_frames
    assert farthest(1440.0) > 2 * cfg.rope_table_frames
