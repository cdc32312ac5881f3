"""Where world models are made: the one place that names them (a new model is one entry in ``FAMILY_TABLE``).

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

import importlib

import torch

from engine.config import ARENA_MODEL, LINGBOT_MODELS, SYNTHETIC_MODEL, SessionConfig
from engine.io.trajectory import Trajectory
from engine.facts.layout import KVLayout
from engine.model.interface import WorldModel
from engine.model.model_cache import ModelCache
from engine.model.spec import Family, ModelSpec, weights_stamp  # noqa: F401  (ModelSpec: the session's type)

# model name -> "module:attribute" of its Family; every other name (engine.config.MODEL_CONFIGS) is MG2.
# A table, not imports: each family imports engine.model.spec, and the registry imports no family, so
# neither imports the other and a family's code is loaded only when a session uses it.
FAMILY_TABLE = {SYNTHETIC_MODEL: "engine.model.mg2_family:SYNTHETIC",
                ARENA_MODEL: "engine.arena.family:FAMILY",
                **{name: "engine.model.lingbot.family:FAMILY" for name in LINGBOT_MODELS}}
MG2_FAMILY = "engine.model.mg2_family:MG2"


def family(cfg: SessionConfig) -> Family:
    """The family of ``cfg.model``, loaded from ``FAMILY_TABLE`` (MG2 for every named MG2 configuration)."""
    module, attribute = FAMILY_TABLE.get(cfg.model, MG2_FAMILY).split(":")
    found = getattr(importlib.import_module(module), attribute)
    assert isinstance(found, Family), f"{module}:{attribute} is not a Family"
    return found


def model_spec(cfg: SessionConfig) -> ModelSpec:
    return family(cfg).spec(cfg)


def model_header_facts(cfg: SessionConfig) -> dict:
    return family(cfg).header_facts(cfg)


def model_kv_layout(cfg: SessionConfig) -> KVLayout:
    return family(cfg).layout(cfg)


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
