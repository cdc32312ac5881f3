"""The arena model's weights: the packaged fp16 safetensors, strict loading, and export from training.

Owns the file format: a safetensors file whose tensors are exactly ``ArenaDiT(cfg).state_dict()`` (fp16
on disk, float32 or the session dtype in memory) and whose metadata holds the model config (JSON) and
the training figures (steps, wall time, loss). Loading is strict like MG2's: a missing, unexpected or
mis-shaped key is a ``CheckpointError`` naming the key and the file; a config in the file that differs
from the one asked for is an error too. ``with_seeded_depth_head`` writes a file of the same format whose
model has a depth head with seeded random weights (what costs compute, not what it predicts: for
measuring a session with depth re-projection where no trained depth head exists).
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from engine.arena.config import ArenaModelConfig
from engine.arena.model import ArenaDiT
from engine.files.bounded_json import OBJECT, expect_kind, parse_json
from engine.errors import CheckpointError, InputError
from engine.files.input_files import check_input_file


def packaged_weights_path() -> Path:
    return Path(__file__).resolve().parent / "weights" / "arena.safetensors"


def packaged_depth_weights_path() -> Path:
    """The packaged weights plus a trained conv depth head (``engine.arena.depth_train``), when packaged."""
    return Path(__file__).resolve().parent / "weights" / "arena-depth.safetensors"


def config_of(path: Path) -> ArenaModelConfig:
    """The model config stored in a weights file's metadata."""
    meta = read_metadata(path)
    try:
        raw = expect_kind(parse_json(meta.get("config", "{}"), f"{path}: its arena config", 1 << 20),
                          f"{path}: its arena config", OBJECT)
    except InputError as exc:
        raise CheckpointError(str(exc)) from None
    if "steps" in raw:
        raw["steps"] = tuple(raw["steps"])
    try:
        return ArenaModelConfig(**raw)
    except (TypeError, AssertionError) as exc:
        raise CheckpointError(f"{path}: its arena config is not valid ({exc})") from None


def read_metadata(path: Path) -> dict:
    from safetensors import safe_open

    _check_exists(path)
    try:
        with safe_open(str(path), framework="pt") as fh:
            return dict(fh.metadata() or {})
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def _check_exists(path: Path) -> None:
    if not os.path.lexists(path):
        raise CheckpointError(f"arena weights file {path} does not exist "
                              "(reinstall the package, or pass --arena-weights FILE)")
    try:   # a FIFO or a directory: refused before safetensors opens it
        check_input_file(path, "arena weights file", fix="pass --arena-weights FILE (a .safetensors file)")
    except InputError as exc:
        raise CheckpointError(str(exc)) from None


def load_state_dict(path: Path, cfg: ArenaModelConfig) -> dict[str, torch.Tensor]:
    """The file's tensors as float32, checked strictly against ``ArenaDiT(cfg)``."""
    _check_exists(path)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in ArenaDiT(cfg).state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing:
        raise CheckpointError(f"{path}: missing key {missing[0]!r} ({len(missing)} missing)")
    if extra:
        raise CheckpointError(f"{path}: unexpected key {extra[0]!r} ({len(extra)} unexpected)")
    for key, shape in expected.items():
        if tuple(tensors[key].shape) != shape:
            raise CheckpointError(f"{path}: key {key!r} has shape {tuple(tensors[key].shape)}, "
                                  f"the arena model expects {shape}")
    return {k: v.float() for k, v in tensors.items()}


def init_from(model: ArenaDiT, path: Path, generator: torch.Generator | None = None) -> list[str]:
    """Start ``model`` from the weights of ``path`` (checked against their own config): every tensor of
    the file must fit the model; the model's parts the file lacks (an output design the file's model
    did not have) are initialised by the model (``init_new_parts``). Returns those parts' keys."""
    tensors = load_state_dict(path, config_of(path))
    result = model.load_state_dict(tensors, strict=False)
    if result.unexpected_keys:
        raise CheckpointError(f"{path}: key {result.unexpected_keys[0]!r} has no place in the model to train")
    model.init_new_parts(list(result.missing_keys), generator)
    return list(result.missing_keys)


def load_model(path: Path | None = None, device="cpu", dtype=torch.float32) -> ArenaDiT:
    """The arena model with the weights of ``path`` (default: the packaged file), in eval mode."""
    path = Path(path) if path is not None else packaged_weights_path()
    cfg = config_of(path)
    with torch.device("meta"):
        model = ArenaDiT(cfg)
    model.load_state_dict(load_state_dict(path, cfg), assign=True)
    return model.to(device=device, dtype=dtype).eval()


SEEDED_INVERSE_DEPTH = 0.25   # 1 / world units: the seeded head's mean (4 units, inside any arena's walls)
SEEDED_SPREAD = 0.08          # scale of its random weights (measured: 0.25 +- 0.02, from 0.10 to 0.40 over a
                              # session: surfaces 2.5 to 10 units away, none read as sky)


def with_seeded_depth_head(path: Path, out: Path, seed: int) -> Path:
    """Write ``out``: the weights of ``path`` (which must have no depth head) plus a depth head drawn from
    ``seed`` (reproducible), its predicted inverse depth about ``SEEDED_INVERSE_DEPTH`` (never sky), so
    that every pixel is moved as a trained head's would be. The metadata says it is seeded."""
    cfg = config_of(path)
    if cfg.depth_head:
        raise CheckpointError(f"{path}: its model already has a depth head")
    tensors = load_state_dict(path, cfg)
    generator = torch.Generator().manual_seed(seed)
    p2 = cfg.patch * cfg.patch
    # the head reads layer-normed, modulated hidden states (about unit scale per channel)
    tensors["depth_out.weight"] = torch.randn((p2, cfg.dim), generator=generator) * (SEEDED_SPREAD / cfg.dim ** 0.5)
    tensors["depth_out.bias"] = torch.full((p2,), SEEDED_INVERSE_DEPTH)
    meta = {**read_metadata(path), "config": json.dumps(dataclasses.asdict(dataclasses.replace(cfg, depth_head=True))),
            "depth_head": f"seeded {seed}: random, for measuring compute (its depth is not the world's)"}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.float16).contiguous() for k, v in tensors.items()}, str(out), metadata=meta)
    return out


def export_checkpoint(ckpt: Path, out: Path, extra_meta: dict | None = None) -> dict:
    """Write a training checkpoint's model as fp16 safetensors with config and figures in metadata."""
    _check_exists(Path(ckpt))
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    cfg = ArenaModelConfig(**{**state["config"], "steps": tuple(state["config"]["steps"])})
    meta = {"config": json.dumps(dataclasses.asdict(cfg)), "train_steps": str(state["step"]),
            "train_wall_s": f"{state.get('wall_s', 0.0):.0f}", "train_avg_loss": f"{state.get('avg_loss', 0.0):.5f}",
            "recipe": json.dumps(state.get("recipe", {})), **(extra_meta or {})}
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in state["model"].items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    return meta
