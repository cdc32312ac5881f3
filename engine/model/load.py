"""Building the three networks of a model and loading their weights.

Owns the checkpoint directory layout of the official release, strict key/shape checking (a missing,
extra or mis-shaped key is a ``CheckpointError`` naming the key and the file), safe deserialisation
(``.safetensors`` natively; ``.pth`` with ``torch.load(weights_only=True)``, never arbitrary
unpickling), and the seeded weights of the built-in model when no checkpoint is given. Every directory and
file is checked by the input gate (``engine.files.input_files``) before it is opened: a file where the directory
should be, a FIFO, or anything under /proc is one ``CheckpointError`` line, never a wait or a traceback.

Expected layout (file names come from the model config):

    DIR/base_distilled_model/base_distill.safetensors   (or the gta / templerun DiT)
    DIR/Wan2.1_VAE.pth
    DIR/models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch
import torch.nn as nn
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from engine.files.bounded_json import read_json_file
from engine.config import ModelConfig
from engine.errors import CheckpointError, InputError
from engine.files.input_files import check_input_dir, check_input_file
from engine.model.clip import CLIPVisionTower, clip_visual_state_dict, is_unused_checkpoint_key
from engine.model.hub import resolve_checkpoint
from engine.model.mg2 import CausalDiT
from engine.model.seeded_weights import fill_module_
from engine.model.vae import WanVAE

BUILTIN_SEED = 20260101   # seeds of the built-in model's weights (DiT, VAE, CLIP get +0, +1, +2)
MAX_CHECKPOINT_JSON_BYTES = 64 << 20   # a config or a shard index: a few KiB to a few MiB


def checked_checkpoint_dir(root: Path) -> Path:
    """``root`` when it is a directory (through symlinks); a missing one, a file, a FIFO or a folder under
    /proc is one ``CheckpointError`` line saying which."""
    if not os.path.lexists(root):
        raise CheckpointError(f"checkpoint directory not found: {root}")
    try:
        check_input_dir(root, "--checkpoint", fix="name the checkpoint's directory as --checkpoint")
    except InputError as exc:
        raise CheckpointError(str(exc)) from None
    return root


def checked_checkpoint_file(path: Path, missing: str = "") -> Path:
    """``path`` when it is a regular file; missing (``missing`` says more), a FIFO, a directory or a file
    under /proc is one ``CheckpointError`` line, before anything opens it (a FIFO would block the open)."""
    if not os.path.lexists(path):
        raise CheckpointError(f"checkpoint file missing: {path}{missing}")
    try:
        check_input_file(path, "checkpoint file", fix="put the release's file there")
    except InputError as exc:
        raise CheckpointError(str(exc)) from None
    return path


def read_checkpoint_json(path: Path, what: str = "checkpoint file") -> object:
    """A checkpoint's JSON file (a config, a shard index) through the gate and the bounded reader; any
    failure is one ``CheckpointError`` line."""
    checked_checkpoint_file(path)
    try:
        return read_json_file(path, what, MAX_CHECKPOINT_JSON_BYTES)
    except InputError as exc:
        raise CheckpointError(str(exc)) from None


@dataclass
class MG2Models:
    dit: CausalDiT
    vae: WanVAE
    clip: CLIPVisionTower
    source: str            # "checkpoint DIR" or "built-in seeded weights"


def checkpoint_files(cfg: ModelConfig, root: Path) -> dict[str, Path]:
    """The three weight files of ``cfg`` under ``root`` (a directory, or a hub repo id found in the local
    cache: ``engine.model.hub``); a missing one is named in the error."""
    root = checked_checkpoint_dir(resolve_checkpoint(Path(root), [cfg.dit_file, cfg.vae_file, cfg.clip_file]))
    files = {"dit": root / cfg.dit_file, "vae": root / cfg.vae_file, "clip": root / cfg.clip_file}
    for path in files.values():
        checked_checkpoint_file(path)
    return files


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a ``.safetensors`` or ``.pth`` file, on the CPU, without executing code."""
    checked_checkpoint_file(Path(path))
    try:
        if path.suffix == ".safetensors":
            return load_file(str(path), device="cpu")
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
    except (SafetensorError, pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"cannot read weights {path}: {reason[:200]}") from None
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"cannot read weights {path}: not a flat mapping of tensors")
    return dict(state)


def assign_strict(module: nn.Module, state: Mapping[str, torch.Tensor], path: Path,
                  dtype: torch.dtype, device: torch.device,
                  ignored: Callable[[str], bool] = lambda key: False) -> None:
    """Copy ``state`` into ``module`` after checking the key sets and every shape."""
    expected = module.state_dict(keep_vars=True)
    for key in sorted(expected):
        if key not in state:
            raise CheckpointError(f"missing key {key!r} in {path}")
    for key in sorted(state):
        if key not in expected and not ignored(key):
            raise CheckpointError(f"unexpected key {key!r} in {path}")
    for key, param in expected.items():
        if tuple(state[key].shape) != tuple(param.shape):
            raise CheckpointError(
                f"key {key!r} in {path} has shape {tuple(state[key].shape)}, expected {tuple(param.shape)}")
    converted = {k: state[k].to(device=device, dtype=dtype if state[k].is_floating_point() else None)
                 for k in expected}
    module.load_state_dict(converted, strict=True, assign=True)


def _dit_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The official DiT keys carry the wrapper's ``model.`` prefix; strip it."""
    return {k.removeprefix("model."): v for k, v in state.items()}


def load_models(cfg: ModelConfig, checkpoint: Path | None, device: torch.device,
                dtype: torch.dtype) -> MG2Models:
    """Build DiT, VAE and CLIP for ``cfg``: from ``checkpoint`` or with built-in seeded weights."""
    if checkpoint is None:
        return _seeded_models(cfg, device, dtype)
    files = checkpoint_files(cfg, checkpoint)
    with torch.device("meta"):
        dit, vae, clip = CausalDiT(cfg.dit), WanVAE(cfg.vae), CLIPVisionTower(cfg.clip)
    assign_strict(dit, _dit_state(read_weights(files["dit"])), files["dit"], dtype, device)
    assign_strict(vae, read_weights(files["vae"]), files["vae"], dtype, device)
    assign_strict(clip, clip_visual_state_dict(read_weights(files["clip"])), files["clip"], dtype,
                  device, ignored=lambda key: is_unused_checkpoint_key(key, cfg.clip))
    return MG2Models(dit.eval(), vae.eval(), clip.eval(), source=f"checkpoint {_root(cfg, files)}")


def read_shapes(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a weights file as an empty meta tensor of its shape: its header, no weights read
    (``.pth`` files are memory-mapped, so only their pickled index is)."""
    if path.suffix == ".safetensors":
        checked_checkpoint_file(Path(path))
        try:
            with safe_open(str(path), framework="pt") as f:
                return {k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in f.keys()}
        except (SafetensorError, OSError, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(f"cannot read weights {path}: {reason[:200]}") from None
    return {k: torch.empty(v.shape, device="meta") for k, v in read_weights(path).items()}


def check_checkpoint(cfg: ModelConfig, checkpoint: Path) -> Path:
    """The checks ``load_models`` makes (every file there, every key and shape) without loading weights;
    the directory checked."""
    files = checkpoint_files(cfg, checkpoint)
    meta = torch.device("meta")
    with meta:
        dit, vae, clip = CausalDiT(cfg.dit), WanVAE(cfg.vae), CLIPVisionTower(cfg.clip)
    assign_strict(dit, _dit_state(read_shapes(files["dit"])), files["dit"], torch.float32, meta)
    assign_strict(vae, read_shapes(files["vae"]), files["vae"], torch.float32, meta)
    assign_strict(clip, clip_visual_state_dict(read_shapes(files["clip"])), files["clip"], torch.float32, meta,
                  ignored=lambda key: is_unused_checkpoint_key(key, cfg.clip))
    return _root(cfg, files)


def _root(cfg: ModelConfig, files: dict[str, Path]) -> Path:
    """The directory ``checkpoint_files`` found the files in (a hub id's snapshot, say)."""
    return files["dit"].parents[len(Path(cfg.dit_file).parts) - 1]


def _seeded_models(cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> MG2Models:
    dit = fill_module_(CausalDiT(cfg.dit), BUILTIN_SEED, prefix="model.")
    vae = fill_module_(WanVAE(cfg.vae), BUILTIN_SEED + 1)
    clip = fill_module_(CLIPVisionTower(cfg.clip), BUILTIN_SEED + 2, prefix="visual.")
    models = [m.to(device=device, dtype=dtype).eval() for m in (dit, vae, clip)]
    return MG2Models(*models, source="built-in seeded weights")
