"""A LingBot-World-Fast release folder: its files, their checks, and the networks and prompt context they give.

Owns the layout of the official release (the folder ``generate_fast.py --ckpt_dir`` takes):

    DIR/lingbot_world_fast/config.json                    the DiT's config (diffusers style)
    DIR/lingbot_world_fast/*.safetensors                  its weights: one file, or shards listed by
                                                          diffusion_pytorch_model.safetensors.index.json
    DIR/Wan2.1_VAE.pth                                    the Wan2.1 VAE (MG2's: same keys and shapes)
    DIR/models_t5_umt5-xxl-enc-bf16.pth                   Wan's UMT5-XXL encoder (engine.model.lingbot.text)
    DIR/google/umt5-xxl/                                  its tokenizer

and what a session gets from it: every file present (a missing one is one ``CheckpointError`` line
naming it), the DiT config read from ``config.json`` with the named model's cache window and sink as
overrides (as the official pipeline passes them) and required to match the named model's shape (a
different one is one line naming the field: the session's geometry and KV layout come from the name),
the text width taken from the encoder file (``text_dim`` is never in the released config), strict key
and shape checks of the three weight files, and the prompt's context ``[1, n, text_dim]``.

``check_release`` makes every check without reading the weights (shapes from the file headers), for
``worldpager download``.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.files.bounded_json import OBJECT, STRING, expect_kind, expect_object
from engine.errors import CheckpointError, ConfigError, InputError
from engine.facts.lingbot_config import CONTROL_CHANNELS, FastDiTConfig
from engine.facts.lingbot_models import LingbotModelConfig
from engine.model.lingbot.text import (TEXT_LEN, TOKENIZER_DIR, WAN_T5_FILE, hf_state, load_text_encoder,
                                       load_tokenizer, t5_shape)
from engine.model.lingbot.text_cache import cache_path, cached_context, encoder_identity, store
from engine.model.lingbot.weights import CHECKPOINT_SUBFOLDER, empty_model, load_state, read_config
from engine.model.load import (assign_strict, checked_checkpoint_dir, checked_checkpoint_file, read_checkpoint_json,
                               read_shapes, read_weights)
from engine.model.vae import WanVAE

VAE_FILE = "Wan2.1_VAE.pth"
DIT_CONFIG = "config.json"
SHARD_INDEX = "diffusion_pytorch_model.safetensors.index.json"
PIPELINE_SETTINGS = ("local_attn_size", "sink_size")     # the pipeline's overrides, not the checkpoint's


@dataclass(frozen=True)
class ReleaseFiles:
    root: Path
    dit_config: Path
    dit_shards: tuple[Path, ...]
    vae: Path
    t5: Path
    tokenizer: Path


def is_release_folder(root: Path) -> bool:
    """Whether ``root`` looks like a LingBot-World-Fast release (it has the DiT's subfolder)."""
    return (Path(root).expanduser() / CHECKPOINT_SUBFOLDER).is_dir()


def _shards(folder: Path) -> tuple[Path, ...]:
    index = folder / SHARD_INDEX
    if os.path.lexists(index):
        data = read_checkpoint_json(index, "the shard index")
        try:
            expect_object(data, f"the shard index {index}", required={"weight_map": OBJECT})
            names = sorted(set(expect_kind(v, f"the shard index {index}: a shard", STRING)
                               for v in data["weight_map"].values()))
        except InputError as exc:
            raise CheckpointError(str(exc)) from None
        for name in names:
            checked_checkpoint_file(folder / name, f" (listed in {index.name})")
        return tuple(folder / n for n in names)
    shards = tuple(sorted(folder.glob("*.safetensors")))
    if not shards:
        raise CheckpointError(f"checkpoint file missing: no .safetensors weights in {folder}")
    return shards


def release_files(root: Path) -> ReleaseFiles:
    """The release's files under ``root``; the first missing one is named in the error."""
    root = checked_checkpoint_dir(Path(root).expanduser())
    folder = root / CHECKPOINT_SUBFOLDER
    for path in (folder / DIT_CONFIG, root / VAE_FILE, root / WAN_T5_FILE):
        checked_checkpoint_file(path)
    if not (root / TOKENIZER_DIR).is_dir():
        raise CheckpointError(f"checkpoint folder missing: {root / TOKENIZER_DIR} (the tokenizer)")
    return ReleaseFiles(root, folder / DIT_CONFIG, _shards(folder), root / VAE_FILE, root / WAN_T5_FILE,
                        root / TOKENIZER_DIR)


def text_width(files: ReleaseFiles) -> int:
    """The encoder's width (the DiT's ``text_dim``), with the encoder's keys and shapes checked."""
    state = read_shapes(files.t5)
    shape = t5_shape(state, files.t5)
    hf_state(state, shape, files.t5)
    return shape.dim


def dit_config(files: ReleaseFiles, m: LingbotModelConfig, text_dim: int) -> FastDiTConfig:
    """``config.json`` with the named model's pipeline settings; its shape must be the named model's.
    The control type is the file's ``control_type``, else what the weights hold (the control patch
    embedding's inputs: 6 channels ``cam``, 7 ``act``) — never the folder's name, which the official
    loader reads ("cam" or "act" in the path): a release folder works whatever it is called."""
    overrides = {k: getattr(m.dit, k) for k in PIPELINE_SETTINGS}
    if "control_type" not in _official_fields(files):
        overrides["control_type"] = control_type_of_weights(files)
    try:
        cfg = read_config(files.dit_config.parent, overrides)
    except ConfigError as exc:     # an unknown field or control type: the file is the user's to fix
        raise CheckpointError(f"{files.dit_config}: {exc}") from None
    cfg = dataclasses.replace(cfg, text_dim=text_dim)
    for field in dataclasses.fields(FastDiTConfig):
        if field.name != "text_dim" and getattr(cfg, field.name) != getattr(m.dit, field.name):
            raise CheckpointError(f"{files.dit_config}: {field.name} {getattr(cfg, field.name)!r}, but --model "
                                  f"{m.name} is {getattr(m.dit, field.name)!r} (choose the model of this shape)")
    return cfg


def _official_fields(files: ReleaseFiles) -> set[str]:
    fields = read_checkpoint_json(files.dit_config, "the DiT config")
    return set(fields) if isinstance(fields, dict) else set()


CONTROL_WEIGHT = "patch_embedding_wancamctrl.weight"


def control_type_of_weights(files: ReleaseFiles) -> str:
    """``cam`` or ``act`` from the control patch embedding's input width in the shards' headers."""
    probe = FastDiTConfig()
    by_width = {dataclasses.replace(probe, control_type=c).control_in_features: c for c in CONTROL_CHANNELS}
    for shard in files.dit_shards:
        shapes = read_shapes(shard)
        if CONTROL_WEIGHT in shapes:
            width = shapes[CONTROL_WEIGHT].shape[-1]
            if width not in by_width:
                raise CheckpointError(f"{shard}: {CONTROL_WEIGHT} takes {width} inputs, neither a camera ({min(by_width)}) "
                                      f"nor an action ({max(by_width)}) control")
            return by_width[width]
    raise CheckpointError(f"{files.dit_config.parent}: no shard holds {CONTROL_WEIGHT} (not a LingBot-World-Fast DiT?)")


def release_model(files: ReleaseFiles, m: LingbotModelConfig) -> LingbotModelConfig:
    """The named configuration with the release's DiT config (its text width)."""
    return dataclasses.replace(m, dit=dit_config(files, m, text_width(files)))


def _dit_state(files: ReleaseFiles, read) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for shard in files.dit_shards:
        for key, value in read(shard).items():
            if key in state:
                raise CheckpointError(f"key {key!r} appears in two shards of {shard.parent}")
            state[key] = value
    return state


def check_release(root: Path, m: LingbotModelConfig) -> Path:
    """Every check ``load_release`` makes, from the files' headers (no weights read); the root checked."""
    files = release_files(root)
    mr = release_model(files, m)
    meta = torch.device("meta")
    assign_strict(empty_model(mr.dit), _dit_state(files, read_shapes), files.dit_config.parent, torch.float32, meta)
    with meta:
        vae = WanVAE(mr.vae)
    assign_strict(vae, read_shapes(files.vae), files.vae, torch.float32, meta)
    load_tokenizer(files.tokenizer)
    return files.root


@dataclass
class LingbotRelease:
    model: LingbotModelConfig      # the named configuration with the release's DiT config
    dit: torch.nn.Module
    vae: WanVAE
    text: torch.Tensor             # the prompt's context [1, n, text_dim]
    root: Path


def encode_prompt(files: ReleaseFiles, prompt: str, device: torch.device | str) -> torch.Tensor:
    """The prompt's context on the CPU, computed on ``device`` in the encoder file's dtype (the release:
    bfloat16, as the official code runs it); the encoder is freed afterwards."""
    encoder = load_text_encoder(files.t5, files.tokenizer, device)
    text = encoder.encode(prompt).float().cpu()
    del encoder
    return text


def load_release(root: Path, m: LingbotModelConfig, prompt: str, device: torch.device,
                 dtype: torch.dtype, text_device: str = "cpu", cache_dir: Path | None = None,
                 dit_device: torch.device | None = None) -> LingbotRelease:
    """The release's networks in ``dtype`` on ``device`` and the prompt's context (text first, so that
    the encoder is gone before the DiT arrives). The encoder runs on the CPU (``text_device`` "cpu", the
    default: it never takes device memory) or on ``device``; with ``cache_dir`` its output is read from,
    or written to, the session's text cache there (``engine.model.lingbot.text_cache``) once the networks
    have loaded, so a later run with the same prompt does not load the encoder. ``dit_device``: where the
    DiT is loaded (default ``device``; host memory when its weights are placed on the device afterwards:
    ``--weights``)."""
    files = release_files(root)
    mr = release_model(files, m)
    where = "cpu" if text_device == "cpu" else device
    path = None if cache_dir is None else cache_path(
        cache_dir, prompt, encoder_identity(files.t5, files.tokenizer, str(where), "file", TEXT_LEN))
    text, cached = cached_context(path, lambda: encode_prompt(files, prompt, where))
    with torch.device("meta"):
        vae = WanVAE(mr.vae)
    assign_strict(vae, read_weights(files.vae), files.vae, dtype, torch.device(device))
    dit = load_state(mr.dit, _dit_state(files, read_weights), files.dit_config.parent, dtype,
                     device if dit_device is None else dit_device)
    if path is not None and not cached:
        store(path, text)
    return LingbotRelease(mr, dit, vae.eval(), text, files.root)
