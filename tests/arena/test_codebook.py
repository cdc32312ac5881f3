"""The codebook output of the arena model: layout, start, what inference emits and what training changes."""
from __future__ import annotations

import dataclasses

import torch

from engine.arena import codebook
from engine.arena.config import ArenaModelConfig
from engine.arena.data import training_episode
from engine.arena.model import ArenaDiT
from engine.arena.patches import patchify
from engine.arena.train import Recipe, train

CFG = ArenaModelConfig(layers=1, codebook=16)


def test_sub_patches_are_the_frames_smaller_patches():
    frame = torch.randn(3, CFG.height, CFG.width)
    subs = codebook.split(patchify(frame, CFG.patch), CFG)                    # [tokens, 4, 48]
    n = CFG.patch // CFG.code_patch
    small = patchify(frame, CFG.code_patch).view(CFG.rows, n, CFG.cols, n, -1)
    assert torch.equal(subs, small.permute(0, 2, 1, 3, 4).reshape(CFG.tokens_per_frame, n * n, -1))
    assert torch.equal(codebook.join(subs, CFG), patchify(frame, CFG.patch))


def test_the_head_starts_at_the_code_nearest_the_mean():
    torch.manual_seed(0)
    head, code_head = torch.nn.Linear(CFG.dim, CFG.patch_dim), torch.nn.Linear(CFG.dim, 4 * CFG.codebook)
    codes = torch.randn(CFG.codebook, 3 * CFG.code_patch ** 2) * 0.5
    codebook.init_head(code_head, head, codes, CFG)
    z = torch.randn(32, CFG.dim)
    likeliest = code_head(z).unflatten(-1, (4, CFG.codebook)).argmax(-1)
    assert torch.equal(likeliest, codebook.nearest(codebook.split(head(z), CFG), codes))


def test_codes_are_fitted_deterministically_on_training_renders():
    a, b = codebook.fit_codes(CFG, iterations=3), codebook.fit_codes(CFG, iterations=3)
    assert a.shape == (CFG.codebook, 3 * CFG.code_patch ** 2) and torch.equal(a, b)
    assert a.abs().max() <= 1.0 and len({tuple(c.tolist()) for c in a}) == CFG.codebook   # renders in [-1, 1], distinct


def test_inference_emits_codes_and_training_the_mean():
    torch.manual_seed(0)
    model = ArenaDiT(CFG)
    model.init_new_parts(["code_head.weight"])
    with torch.no_grad():
        model.gate.bias.fill_(-40.0)                                         # nothing copied
    ep = training_episode(7, 0, 0, CFG, 4, 3)
    args = (ep.frames[None], torch.randn(ep.frames.shape)[None], torch.ones(1, 4), ep.actions[None], ep.cam[None],
            torch.zeros(1, dtype=torch.long), ep.ctx_ids[None], ep.mem_shift[None])
    with torch.no_grad():
        coded = model.eval().train_forward(*args)[0]
        mean = model.train().train_forward(*args)[0]
    subs = codebook.split(patchify(coded, CFG.patch), CFG).reshape(-1, 3 * CFG.code_patch ** 2)
    nearest = model.codes[codebook.nearest(subs, model.codes)]
    assert (subs - nearest).abs().max() < 1e-6                               # every sub-patch is a code, whole
    assert not torch.allclose(coded, mean, atol=1e-3)


def test_head_only_training_changes_the_code_head_alone(tmp_path):
    recipe = Recipe(steps=2, batch=1, chunks=4, warmup=1, head_only=True)
    train(tmp_path / "a", recipe, CFG, save_every=1, quiet=True)
    torch.manual_seed(recipe.seed)                                           # train()'s start, again
    start = ArenaDiT(CFG)
    start.init_new_parts(["code_head.weight"])
    trained = torch.load(tmp_path / "a" / "last.pt", weights_only=True)["model"]
    changed = {k for k, v in start.state_dict().items() if not torch.equal(v, trained[k])}
    assert changed == {"code_head.weight", "code_head.bias"}


def test_the_code_loss_is_part_of_the_loss():
    from engine.arena.train import batch_for, loss_of

    torch.manual_seed(0)
    recipe = Recipe(batch=1, chunks=3)
    plain = dataclasses.replace(CFG, codebook=0)
    eps, context, noisy, t, start = batch_for(recipe, CFG, 0)
    model = ArenaDiT(CFG)
    model.init_new_parts(["code_head.weight"])
    other = ArenaDiT(plain)
    other.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith(("code", "codes"))})
    with torch.no_grad():
        with_codes = loss_of(model, eps, context, noisy, t, start, recipe)
        without = loss_of(other, eps, context, noisy, t, start, recipe)
        no_weight = loss_of(model, eps, context, noisy, t, start, dataclasses.replace(recipe, code_weight=0.0))
    assert torch.equal(no_weight, without) and with_codes > without + 1.0   # cross-entropy of 16 codes: nats


def test_head_only_without_a_codebook_is_one_line_and_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from worldpager_cli.main import cli

    result = CliRunner().invoke(cli, ["train", "arena", "--out", str(tmp_path / "run"), "--head-only", "--steps", "1"])
    assert result.exit_code == 2
    assert "--head-only" in result.output and "--codebook" in result.output
    assert not (tmp_path / "run").exists()
