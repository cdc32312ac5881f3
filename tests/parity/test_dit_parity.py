"""DiT, sampler and attention-context parity against the official MG2 code's fixture."""
from __future__ import annotations

import pytest
import torch

from engine.model import mg2
from engine.model.parity import dit as parity_dit
from engine.model.parity.fixture import DEFAULT_TOLERANCE, Fixture, relative_error
from engine.model.kv_context import AttentionContext


@pytest.fixture(scope="module")
def dit_case(parity_fixtures):
    path = parity_fixtures / "universal_tiny.safetensors"
    fx = Fixture.open(path)
    cfg = parity_dit.fixture_model_config(fx)
    return path, fx, cfg, parity_dit.build_fixture_dit(fx, cfg)


def test_every_tensor_within_tolerance(dit_case):
    path, *_ = dit_case
    rows = parity_dit.dit_rows(path)
    names = {name for name, _ in rows}
    # Every class of stored tensor was compared: per-forward velocities, x0s, re-noised inputs,
    # final latents, both stored layers' KV after each chunk, and the action caches.
    assert len([n for n in names if n.startswith("teacher.velocity")]) == 12
    assert len([n for n in names if n.startswith("chain.x0")]) == 9
    assert len([n for n in names if n.startswith("kv.layer")]) == 12
    assert {"action.block1.keyboard.k", "action.block1.mouse.v"} <= names
    bad = [(n, e) for n, e in rows if not e < DEFAULT_TOLERANCE]
    assert not bad, bad


def _first_velocity_error(fx, cfg, model) -> float:
    ctx = AttentionContext(cfg.kv_layout())
    model.prepare_context(ctx, fx.tensor("inputs.visual_context"))
    x = fx.tensor("inputs.noise")[:, :, :3]
    t = fx.tensor("schedule.timestep_fed")[0, 0]
    with torch.no_grad():
        v = model(x, t, fx.tensor("inputs.cond_concat")[:, :, :3], ctx, 0,
                  fx.tensor("inputs.keyboard"), fx.tensor("inputs.mouse"))
    return relative_error(v, fx.tensor("forward.velocity")[0, 0])


def test_unused_action_norm_weights_stay_unused(dit_case):
    """MG2 never multiplies the action q/k norm weights in; scaling them must change nothing."""
    _, fx, cfg, model = dit_case
    norms = [m.weight for b in model.blocks if b.action_model is not None
             for m in (b.action_model.key_attn_q_norm, b.action_model.img_attn_k_norm)]
    saved = [w.detach().clone() for w in norms]
    with torch.no_grad():
        for w in norms:
            w.mul_(3.0)
    try:
        assert _first_velocity_error(fx, cfg, model) < DEFAULT_TOLERANCE
    finally:
        with torch.no_grad():
            for w, s in zip(norms, saved):
                w.copy_(s)


@pytest.mark.parametrize("mutation", ["rope_theta", "timestep", "keyboard", "mouse"])
def test_a_broken_formula_fails_parity(dit_case, mutation, monkeypatch):
    """The tolerance is tight enough to catch semantic mistakes (the fixture README's claim)."""
    _, fx, cfg, model = dit_case
    if mutation == "rope_theta":
        monkeypatch.setattr(model.rope, "inv_freq", [f * 1.01 for f in model.rope.inv_freq])
    elif mutation == "timestep":
        embed = mg2.sinusoidal_embedding
        monkeypatch.setattr(mg2, "sinusoidal_embedding", lambda dim, pos: embed(dim, pos + 1.0))
    else:
        key = "inputs.keyboard" if mutation == "keyboard" else "inputs.mouse"
        original_tensor = fx.tensor

        def shifted(name):
            value = original_tensor(name)
            return torch.roll(value, 1, dims=1) if name == key else value
        monkeypatch.setattr(fx, "tensor", shifted)
    assert _first_velocity_error(fx, cfg, model) > DEFAULT_TOLERANCE
