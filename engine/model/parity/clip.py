"""Parity of our CLIP vision tower against the official MG2 code's fixture (README §7.3).

Owns the replay of the CLIP case: build the full-size tower without random init, fill it from the
fixture's key list one key at a time (so the peak memory stays near the model size plus one float64
temporary), verify every generated tensor against ``clip.weights.checksum``, then compare our
preprocessing (``clip.pixel_values``) and our output tokens (``clip.tokens``). Rows are
``(name, max |ours - ref| / std(ref))`` as in :mod:`engine.model.parity.dit`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.config import CLIPConfig
from engine.errors import InputError
from engine.model.clip import VISUAL_PREFIX, CLIPVisionTower, is_unused_checkpoint_key
from engine.model.parity.fixture import Fixture, relative_error
from engine.model.parity.dit import Row
from engine.model.parity.vae import check_checksum, checksum_table, weight_seed
from engine.model.seeded_weights import seeded_array


def _empty_tower(cfg: CLIPConfig) -> CLIPVisionTower:
    # Meta-device construction skips the random init of ~610 M values that would be overwritten anyway.
    with torch.device("meta"):
        tower = CLIPVisionTower(cfg)
    return tower.to_empty(device="cpu")


def fixture_tower(fx: Fixture, cfg: CLIPConfig = CLIPConfig()) -> tuple[CLIPVisionTower, list[str]]:
    """The tower filled with the fixture's verified weights, and the (unprefixed) keys it skipped.

    Keys MG2 never uses (:func:`is_unused_checkpoint_key`) are skipped without being generated; every
    other key must name a parameter of the right shape, and every parameter must get a key.
    """
    keys, table = checksum_table(fx, "clip_", "clip.weights.checksum")
    seed = weight_seed(fx, "clip_")
    tower = _empty_tower(cfg)
    params = dict(tower.named_parameters())
    skipped = []
    with torch.no_grad():
        for row, (key, shape) in enumerate(keys):
            if not key.startswith(VISUAL_PREFIX):
                raise InputError(f"{fx.path}: clip weight key {key} is not a visual-tower key")
            name = key[len(VISUAL_PREFIX):]
            if is_unused_checkpoint_key(key, cfg):
                assert name not in params, f"unused key {name} is allocated"
                skipped.append(name)
                continue
            target = params.pop(name, None)
            if target is None or tuple(target.shape) != tuple(shape):
                raise InputError(f"{fx.path}: clip weight key {key} {tuple(shape)} matches no parameter "
                                 f"of the tower")
            value = seeded_array(seed, key, tuple(shape))
            check_checksum(fx, key, value, table[row])
            target.copy_(torch.from_numpy(value))
            del value        # free the array before the next key is generated
    if params:
        raise InputError(f"{fx.path}: tower parameters without a weight key: {sorted(params)[:5]}")
    return tower.eval(), skipped


def clip_case_rows(fx: Fixture, tower: CLIPVisionTower) -> list[Row]:
    image = fx.tensor("clip.image")                                # [B, 3, 1, H, W] in [-1, 1]
    pixels = tower.preprocess(image)
    # Tokens from our own preprocessing, so both halves of encode() are under the bound together.
    tokens = tower.encode(image)
    return [("clip.pixel_values", relative_error(pixels, fx.tensor("clip.pixel_values"))),
            ("clip.tokens", relative_error(tokens, fx.tensor("clip.tokens")))]


def clip_rows(path: str | Path) -> list[Row]:
    """Rows of the CLIP case (``clip.*`` tensors)."""
    fx = Fixture.open(path)
    tower, _ = fixture_tower(fx)
    return clip_case_rows(fx, tower)
