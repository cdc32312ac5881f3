"""Where world models are made: the one place that names them (a new model is one entry in ``FAMILIES``).

Owns, per model family, three functions of the session config:

* ``model_spec(cfg) -> ModelSpec`` — what the session needs *before* the model exists, without reading
  weights: the start image's size, the trajectory's action space, the video grid and the decoded frame
  size (so inputs are validated and the MP4 opened before the slow load). The built model must agree
  with its spec (``build_world_model`` checks).
* ``build_world_model(cfg, image, trajectory, device, dtype, cache) -> WorldModel`` — the model of one
  session (MG2: weights from ``cfg.checkpoint`` or the built-in seeded ones, as ``engine.model.load``
  reads them; synthetic: no weights). The networks come from ``cache`` (``engine.model.model_cache``)
  when an earlier session of the same worker loaded them; everything per-session is built anew.
* ``model_header_facts(cfg) -> dict`` — the shape facts the session log's header records.
* ``model_kv_layout(cfg) -> KVLayout`` — the KV of one chunk, known before the model is built (so the
  session can size its memory, and refuse settings that cannot fit, before any output exists); the
  built model's ``layout`` must equal it (``build_world_model`` checks).

The session, the memory and the retrieval use only what these return and the ``WorldModel`` protocol.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.arena import family as arena_family
from engine.arena.weights import config_of, packaged_weights_path
from engine.config import ARENA_MODEL, SYNTHETIC_MODEL, SessionConfig, session_model_config
from engine.io.trajectory import Trajectory
from engine.layout import KVLayout, VideoGrid
from engine.model.facts import horizon_chunk, model_facts
from engine.model.interface import WorldModel
from engine.model.load import load_models
from engine.model.model_cache import ModelCache
from engine.model.pipeline import MG2Pipeline
from engine.model.synthetic import FRAME_DOWNSCALE, SyntheticPipeline

Builder = Callable[[SessionConfig, torch.Tensor, Trajectory, torch.device, torch.dtype, ModelCache], WorldModel]


@dataclass(frozen=True)
class ModelSpec:
    """What a model needs from the session and promises it, known before the model is built."""

    name: str
    image_size: tuple[int, int]       # (height, width) the start image is cropped and resized to
    action_mode: str                  # the trajectory's action space (engine.io.actions.KEYBOARD_KEYS)
    grid: VideoGrid
    frame_size: tuple[int, int]       # decoded video (height, width)
    horizon_chunk: int | None         # first chunk past the native time positions; None = unbounded
    default_trajectory: str           # packaged trajectory used without --trajectory
    uses_image: bool                  # False: the model makes its own start (the arena renders it)
    banner: str                       # the first line a command prints about the model
    encoder_preset: str = "veryfast"  # x264 preset: models that make many small frames a second want a faster one


@dataclass(frozen=True)
class Family:
    spec: Callable[[SessionConfig], ModelSpec]
    build: Builder
    header_facts: Callable[[SessionConfig], dict]
    layout: Callable[[SessionConfig], KVLayout]


# ---- MG2 (the released modes and the seeded tiny / micro models) ----------------------------------

DEFAULT_TRAJECTORIES = {"universal": "revisit_loop.yaml", "gta_drive": "revisit_loop.yaml",
                        "templerun": "templerun_run.yaml"}


def _mg2_spec(cfg: SessionConfig) -> ModelSpec:
    m = session_model_config(cfg)
    size = (m.video_height, m.video_width)
    if cfg.checkpoint is None:
        banner = (f"worldpager: using the built-in {cfg.model} model (seeded random weights, no checkpoint): "
                  "the video shows the pipeline, not a trained world model")
    else:
        banner = f"worldpager: loading {cfg.model} from {cfg.checkpoint}"
    return ModelSpec(m.name, size, m.mode, m.video_grid(), size, horizon_chunk(m),
                     DEFAULT_TRAJECTORIES[m.mode], True, banner)


def _mg2_build(cfg: SessionConfig, image, trajectory, device, dtype, cache: ModelCache) -> WorldModel:
    m = session_model_config(cfg)
    key = ("mg2", m, weights_stamp(cfg.checkpoint), str(device), dtype)
    models = cache.get(key, lambda: load_models(m, cfg.checkpoint, device, dtype))
    return MG2Pipeline(models, m, image, trajectory, cfg.seed, cfg.positions, device, dtype)


def _mg2_facts(cfg: SessionConfig) -> dict:
    return model_facts(session_model_config(cfg))


# ---- synthetic (MG2-shaped KV, no math) -----------------------------------------------------------

def _synthetic_spec(cfg: SessionConfig) -> ModelSpec:
    m = session_model_config(cfg)
    frame = (m.video_height // FRAME_DOWNSCALE, m.video_width // FRAME_DOWNSCALE)
    banner = (f"worldpager: synthetic model ({m.dit.num_layers} layers of MG2-shaped KV, "
              f"{cfg.chunk_ms:.0f} ms per chunk, no math), store {cfg.memory.store}")
    return ModelSpec(m.name, (m.video_height, m.video_width), m.mode, m.video_grid(), frame, horizon_chunk(m),
                     DEFAULT_TRAJECTORIES[m.mode], True, banner)


def _synthetic_build(cfg: SessionConfig, image, trajectory, device, dtype, cache: ModelCache) -> WorldModel:
    return SyntheticPipeline(session_model_config(cfg), trajectory.poses, cfg.chunk_ms, device, dtype,
                             cfg.seed)


def _synthetic_facts(cfg: SessionConfig) -> dict:
    return {"model": SYNTHETIC_MODEL, "fps": session_model_config(cfg).fps}


def _mg2_layout(cfg: SessionConfig) -> KVLayout:
    return session_model_config(cfg).kv_layout()   # MG2 and synthetic: the shape config says it all


def _arena_layout(cfg: SessionConfig) -> KVLayout:
    """The arena model's shape is in its weights file's metadata (read without the weights)."""
    return config_of(cfg.arena_weights if cfg.arena_weights is not None else packaged_weights_path()).kv_layout()


MG2 = Family(_mg2_spec, _mg2_build, _mg2_facts, _mg2_layout)
FAMILIES: dict[str, Family] = {
    SYNTHETIC_MODEL: Family(_synthetic_spec, _synthetic_build, _synthetic_facts, _mg2_layout),
    ARENA_MODEL: Family(arena_family.spec, arena_family.build, arena_family.header_facts, _arena_layout)}


def family(cfg: SessionConfig) -> Family:
    """The family of ``cfg.model``; every named MG2 configuration (``engine.config.MODEL_CONFIGS``) is MG2."""
    return FAMILIES.get(cfg.model, MG2)


def model_spec(cfg: SessionConfig) -> ModelSpec:
    return family(cfg).spec(cfg)


def model_header_facts(cfg: SessionConfig) -> dict:
    return family(cfg).header_facts(cfg)


def model_kv_layout(cfg: SessionConfig) -> KVLayout:
    return family(cfg).layout(cfg)


def weights_stamp(path: Path | None) -> tuple | None:
    """What identifies a weights file or checkpoint directory's version in a ``ModelCache`` key."""
    if path is None:
        return None
    path = Path(path).expanduser().resolve()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return str(path), tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.exists())


def build_world_model(cfg: SessionConfig, image: torch.Tensor, trajectory: Trajectory,
                      device: torch.device, dtype: torch.dtype, cache: ModelCache | None = None) -> WorldModel:
    """The session's model, built for ``image`` and ``trajectory``; its weights are loaded, or taken
    from ``cache`` when a session before it loaded the same ones."""
    spec = model_spec(cfg)
    model = family(cfg).build(cfg, image, trajectory, device, dtype, cache if cache is not None else ModelCache())
    assert isinstance(model, WorldModel), f"{type(model).__name__} does not implement WorldModel"
    assert (model.grid, tuple(model.frame_size)) == (spec.grid, spec.frame_size), (
        f"{spec.name}: built model's grid/frame size differ from its spec")
    assert model.layout == model_kv_layout(cfg), f"{spec.name}: built model's KV layout differs from its promise"
    return model
