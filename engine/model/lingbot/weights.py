"""Loading LingBot-World-Fast's DiT weights: strict, key for key, by the official state-dict names.

Owns the checkpoint folder of the official release (``DIR/lingbot_world_fast/``: a ``config.json`` and
one or more ``*.safetensors`` shards, as ``from_pretrained`` reads it), the pipeline's config overrides
(``control_type``, ``local_attn_size``, ``sink_size``), and the strict check: a missing, unexpected or
mis-shaped key is a one-line ``CheckpointError`` naming the key. Also the seeded random weights of a
config (the rule of ``engine.model.seeded_weights``), for tests and fixtures.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping

import torch

from engine.files.bounded_json import BOOL, INTEGER, LIST, NUMBER, STRING, expect_kind
from engine.errors import CheckpointError, InputError
from engine.facts.lingbot_config import FastDiTConfig, config_from_official
from engine.model.lingbot.dit import WanModelFast
from engine.model.load import assign_strict, read_checkpoint_json, read_weights
from engine.model.seeded_weights import seeded_state_dict

CHECKPOINT_SUBFOLDER = "lingbot_world_fast"


def empty_model(cfg: FastDiTConfig) -> WanModelFast:
    """The network on the meta device (no memory; shapes, key names and parameter counts only)."""
    with torch.device("meta"):
        return WanModelFast(cfg)


def key_shapes(cfg: FastDiTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every state-dict key of ``cfg``'s model with its shape, sorted by key."""
    return sorted((k, tuple(v.shape)) for k, v in empty_model(cfg).state_dict().items())


def load_state(cfg: FastDiTConfig, state: Mapping[str, torch.Tensor], source: str | Path,
               dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> WanModelFast:
    """A model of ``cfg`` holding ``state`` after the strict key and shape check."""
    model = empty_model(cfg)
    assign_strict(model, state, Path(source), dtype, torch.device(device))
    return model.eval()


def seeded_model(cfg: FastDiTConfig, seed: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> WanModelFast:
    return load_state(cfg, seeded_state_dict(seed, key_shapes(cfg)), f"seeded weights ({seed})", dtype, device)


def read_config(folder: Path, overrides: Mapping[str, object]) -> FastDiTConfig:
    path = folder / "config.json"
    official = read_checkpoint_json(path, "the DiT config")   # gated and bounded: a FIFO is refused, not read
    if not isinstance(official, dict):
        raise CheckpointError(f"the DiT config {path} is not a JSON object")
    _check_kinds(path, official)
    return config_from_official({**official, **overrides})


_KINDS = {int: INTEGER, float: NUMBER, str: STRING, bool: BOOL, tuple: LIST}


def _check_kinds(path: Path, official: dict) -> None:
    """Each known field of ``config.json`` has the kind of its default (a damaged file: one line)."""
    for field in dataclasses.fields(FastDiTConfig):
        kind = _KINDS.get(type(field.default))
        if field.name in official and kind is not None:
            try:
                expect_kind(official[field.name], f"the DiT config {path}: field {field.name!r}", kind)
            except InputError as exc:
                raise CheckpointError(str(exc)) from None


def load_checkpoint(root: Path, overrides: Mapping[str, object], dtype: torch.dtype,
                    device: torch.device | str) -> WanModelFast:
    """The DiT of a release directory ``root`` (or of its ``lingbot_world_fast`` folder itself)."""
    folder = root / CHECKPOINT_SUBFOLDER if (root / CHECKPOINT_SUBFOLDER).is_dir() else root
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise CheckpointError(f"no .safetensors weights in {folder}")
    cfg = read_config(folder, overrides)
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        for key, value in read_weights(shard).items():
            if key in state:
                raise CheckpointError(f"key {key!r} appears in two shards of {folder}")
            state[key] = value
    return load_state(cfg, state, folder, dtype, device)
