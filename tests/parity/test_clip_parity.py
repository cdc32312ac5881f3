"""CLIP vision tower: parity with the official MG2 code (fixture §7.3) and fast structural checks.

The slow test replays the fixture through ``engine.model.parity.clip`` (the same code as
``python -m engine.model.parity``): full-size ViT-H/14 weights (31 of 32 blocks, ~610 M values) rebuilt
from the key list and checked against ``clip.weights.checksum``, then the preprocessed pixels and the
output tokens compared with the stored reference. The fast tests use a tiny config.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.config import CLIPConfig
from engine.model.parity import clip as parity_clip
from engine.model.clip import (CLIPVisionTower, clip_visual_state_dict, is_unused_checkpoint_key)
from engine.model.parity.fixture import DEFAULT_TOLERANCE, Fixture, relative_error
from engine.model.seeded_weights import fill_module_

TINY = CLIPConfig(width=64, layers=3, heads=2, used_layers=2)
SEED = 1234


def _tiny_tower(cfg: CLIPConfig = TINY) -> CLIPVisionTower:
    return fill_module_(CLIPVisionTower(cfg), SEED, prefix="visual.").eval()


def _official_visual_keys(cfg: CLIPConfig) -> set[str]:
    """Unprefixed visual keys of an official-style file for ``cfg``: every block, post_norm, head."""
    full = CLIPVisionTower(CLIPConfig(**{**cfg.__dict__, "used_layers": cfg.layers}))
    return set(full.state_dict()) | {"post_norm.weight", "post_norm.bias", "head"}


def test_tiny_tower_keys_and_shapes():
    tower = _tiny_tower()
    sd = tower.state_dict()
    assert not any(k.startswith(f"transformer.{TINY.used_layers}.") for k in sd)
    assert {k for k in _official_visual_keys(TINY) if not is_unused_checkpoint_key(k, TINY)} == set(sd)
    w, p, n = TINY.width, TINY.patch_size, TINY.num_tokens
    assert sd["patch_embedding.weight"].shape == (w, 3, p, p)
    assert sd["pos_embedding"].shape == (1, n, w)
    assert sd["transformer.0.attn.to_qkv.weight"].shape == (3 * w, w)
    assert sd["transformer.1.mlp.0.weight"].shape == (TINY.mlp_ratio * w, w)

    image = torch.rand(2, 3, 1, 40, 72) * 2 - 1                   # [B, 3, T, H, W] in [-1, 1]
    tokens = tower.encode(image)
    assert tokens.shape == (2, n, w) and tokens.dtype == torch.float32
    assert torch.isfinite(tokens).all()
    # Video frames fold into the batch, batch-major.
    video = torch.rand(2, 3, 3, 40, 72) * 2 - 1
    frames = video.transpose(1, 2).reshape(6, 3, 40, 72)
    assert torch.equal(tower.preprocess(video), tower.preprocess(frames))


def test_is_unused_checkpoint_key():
    cfg = TINY                                                     # used_layers 2 of 3
    for key in ("transformer.2.norm1.weight", "transformer.2.attn.to_qkv.bias", "post_norm.weight",
                "post_norm.bias", "head", "visual.head", "visual.transformer.2.mlp.0.weight",
                "visual.transformer.10.mlp.2.bias"):
        assert is_unused_checkpoint_key(key, cfg), key
    for key in ("transformer.0.norm1.weight", "transformer.1.mlp.2.weight", "pre_norm.bias",
                "patch_embedding.weight", "cls_embedding", "pos_embedding", "visual.pos_embedding",
                "visual.transformer.1.attn.proj.weight", "textual.head.0.weight", "log_scale",
                "headline", "transformer_extra"):
        assert not is_unused_checkpoint_key(key, cfg), key
    # Full ViT-H: block 31 is the one MG2 skips; "transformer.3" must not match "transformer.30".
    full = CLIPConfig()
    assert is_unused_checkpoint_key("visual.transformer.31.norm1.weight", full)
    assert not is_unused_checkpoint_key("visual.transformer.30.norm1.weight", full)
    assert not is_unused_checkpoint_key("visual.transformer.3.norm1.weight", full)


def test_clip_visual_state_dict_selects_and_strips():
    t = torch.zeros(1)
    full = {"visual.pos_embedding": t, "visual.transformer.0.norm1.weight": t, "visual.head": t,
            "textual.token_embedding.weight": t, "textual.head.0.weight": t, "log_scale": t}
    assert set(clip_visual_state_dict(full)) == {"pos_embedding", "transformer.0.norm1.weight", "head"}


def test_preprocess_deterministic_and_hand_value():
    tower = CLIPVisionTower(TINY)
    s = TINY.image_size
    # 2x in height (source row 2i + 0.5: the four taps have cubic weights below), 3x in width
    # (source column 3j + 1 exactly: the resize picks that column).
    image = torch.rand(1, 3, 2 * s, 3 * s, generator=torch.Generator().manual_seed(0)) * 2 - 1
    a = tower.preprocess(image)
    assert a.shape == (1, 3, s, s) and a.dtype == torch.float32
    assert torch.equal(a, tower.preprocess(image.clone()))
    # Keys cubic kernel, a = -0.75, at distances 1.5, 0.5, 0.5, 1.5.
    taps = np.array([-0.09375, 0.59375, 0.59375, -0.09375])
    i, j, c = 5, 7, 2
    column = image[0, c, 2 * i - 1:2 * i + 3, 3 * j + 1].double().numpy()
    resized = float(taps @ column)
    expected = (resized * 0.5 + 0.5 - TINY.pixel_mean[c]) / TINY.pixel_std[c]
    assert abs(a[0, c, i, j].item() - expected) < 1e-5
    # Bicubic overshoot is kept (no clamp): upsampling a hard -1/+1 edge rings past +-1.
    q = s // 4
    edge = torch.ones(1, 3, q, q)                                  # [1, 3, q, q]
    edge[..., : q // 2] = -1
    mean = torch.tensor(TINY.pixel_mean).view(1, 3, 1, 1)
    std = torch.tensor(TINY.pixel_std).view(1, 3, 1, 1)
    back = (tower.preprocess(edge) * std + mean - 0.5) / 0.5      # undo the normalisation
    assert back.abs().max() > 1.1


def _plain_reference(sd: dict[str, torch.Tensor], cfg: CLIPConfig, pixels: torch.Tensor) -> torch.Tensor:
    """The tower written out with explicit matmuls and softmax, independent of the module code."""
    def ln(x, name):
        return F.layer_norm(x, (cfg.width,), sd[name + ".weight"], sd[name + ".bias"], cfg.norm_eps)

    def lin(x, name):
        return x @ sd[name + ".weight"].T + sd[name + ".bias"]

    b, p, h = pixels.shape[0], cfg.patch_size, cfg.heads
    g = cfg.image_size // p
    # Unfold into patches [B, g*g, 3*p*p] (row-major patches, channels (rgb, py, px)) = the conv.
    patches = pixels.reshape(b, 3, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(b, g * g, 3 * p * p)
    x = patches @ sd["patch_embedding.weight"].reshape(cfg.width, -1).T
    x = torch.cat([sd["cls_embedding"].expand(b, 1, -1), x], 1) + sd["pos_embedding"]
    x = ln(x, "pre_norm")
    d = cfg.width // h
    for i in range(cfg.used_layers):
        pre = f"transformer.{i}"
        qkv = lin(ln(x, pre + ".norm1"), pre + ".attn.to_qkv")
        q, k, v = (qkv[..., j * cfg.width:(j + 1) * cfg.width].reshape(b, -1, h, d).transpose(1, 2)
                   for j in range(3))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
        x = x + lin(att.transpose(1, 2).reshape(b, -1, cfg.width), pre + ".attn.proj")
        hid = lin(ln(x, pre + ".norm2"), pre + ".mlp.0")
        x = x + lin(0.5 * hid * (1 + torch.erf(hid / math.sqrt(2))), pre + ".mlp.2")
    return x


def test_forward_matches_plain_reference():
    tower = _tiny_tower()
    gen = torch.Generator().manual_seed(1)
    pixels = torch.randn(2, 3, TINY.image_size, TINY.image_size, generator=gen)
    with torch.no_grad():
        ours = tower(pixels)
        ref = _plain_reference(tower.state_dict(), TINY, pixels)
    assert relative_error(ours, ref) < 3e-5                         # tanh GELU here: 7e-4


@pytest.mark.slow
def test_clip_parity_with_official(parity_fixtures):
    fx = Fixture.open(parity_fixtures / "universal_tiny_clip.safetensors")
    cfg = CLIPConfig()
    # Every generated key is checked against clip.weights.checksum inside fixture_tower (it raises).
    tower, skipped = parity_clip.fixture_tower(fx, cfg)
    # Exactly the blocks past used_layers, post_norm and head are left out.
    assert {n.split(".")[1] for n in skipped if n.startswith("transformer.")} == {
        str(i) for i in range(cfg.used_layers, cfg.layers)}
    assert {n for n in skipped if not n.startswith("transformer.")} == {
        "post_norm.weight", "post_norm.bias", "head"}
    rows = parity_clip.clip_case_rows(fx, tower)
    assert [name for name, _ in rows] == ["clip.pixel_values", "clip.tokens"]
    print("clip:", {name: f"{e:.2e}" for name, e in rows})
    assert all(e < DEFAULT_TOLERANCE for _, e in rows), rows
