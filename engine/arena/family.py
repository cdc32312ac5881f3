"""The arena model's entry in the model registry: its spec before loading, its construction, its facts.

Owns the arena-specific parts of a session's set-up: the world is ``cfg.arena_seed``'s arena, the start
is that world's rendered view (a start image is refused: the arena model cannot place an arbitrary
picture in its world), the default path is the packaged ``arena_tour.yaml``, the weights come from
``cfg.arena_weights`` or the package, and ``cfg.arena_reproject`` (when given) overrides the weights'
re-projection radius (``cfg.arena_reproject_depth``: re-projection with the depth head's depth, refused
for weights without one; without ``cfg.arena_weights`` it picks the packaged depth weights, where
packaged). The model's shape is read from the weights file's metadata, so a retrained model of another
size needs no code change.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.pipeline import ArenaPipeline
from engine.arena.weights import (config_of, load_model, packaged_depth_weights_path, packaged_weights_path,
                                  read_metadata)
from engine.arena.world import Arena
from engine.config import LOOK_AROUND_MIN_CHUNKS
from engine.errors import ConfigError
from engine.facts.layout import KVLayout
from engine.model.spec import Family, ModelSpec, weights_stamp

DEFAULT_TRAJECTORY = "arena_tour.yaml"


def _weights(cfg):
    """``--arena-weights``; else with ``--arena-reproject-depth`` the packaged depth weights (the packaged
    weights plus a trained depth head) where packaged; else the packaged weights."""
    if cfg.arena_weights is not None:
        return cfg.arena_weights
    if cfg.arena_reproject_depth and packaged_depth_weights_path().exists():
        return packaged_depth_weights_path()
    return packaged_weights_path()


def _facts(cfg) -> tuple[ArenaModelConfig, dict, int]:
    """(config, metadata, parameter count) of the session's weights file, read once per file version:
    the spec is asked for several times during set-up."""
    path = _weights(cfg)
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    return _facts_of(str(path), stamp)


@functools.lru_cache(maxsize=8)
def _facts_of(path: str, stamp: int | None) -> tuple[ArenaModelConfig, dict, int]:
    m = config_of(Path(path))
    return m, read_metadata(Path(path)), sum(p.numel() for p in _meta_model(m).parameters())


def spec(cfg) -> ModelSpec:
    if cfg.image is not None:
        raise ConfigError(f"--image {cfg.image}: the arena model starts from its world's own rendered view; "
                          "choose a world with --arena-seed instead")
    if cfg.checkpoint is not None:
        raise ConfigError(f"--checkpoint {cfg.checkpoint} is for MG2 models; the arena model reads "
                          "--arena-weights (give --model mg2-universal to run MG2)")
    m, meta, params = _facts(cfg)
    if cfg.arena_reproject_depth and not m.depth_head and ArenaPipeline.depth_source is None:
        raise ConfigError(f"--arena-reproject-depth needs weights with a depth head; {_weights(cfg)} has none "
                          "(train one: python -m engine.arena.depth_train)")
    banner = (f"worldpager: arena model (our own world model, {params / 1e6:.1f} M parameters, "
              f"{meta.get('train_steps', '?')} training steps) in arena {cfg.arena_seed}: "
              f"{m.height}x{m.width} frames shown at {m.video_size[0]}x{m.video_size[1]}{_plan(cfg)}")
    # ultrafast: the arena makes hundreds of frames a second, and its enlarged pixels compress easily
    return ModelSpec("arena", (m.height, m.width), "universal", m.video_grid(), m.video_size, m.horizon_chunk,
                     DEFAULT_TRAJECTORY, False, banner, encoder_preset="ultrafast",
                     observes=("render",))


def _plan(cfg) -> str:
    """What the run does, for the banner: it observes (a look around, or --observe), then generates."""
    if cfg.observe is not None:
        return f"; observes {cfg.observe} (rendered truth, marked in the corner), then generates"
    looking = min(cfg.look_around, cfg.chunks - 1)   # engine.session.look_around.look_around_chunks
    if looking >= LOOK_AROUND_MIN_CHUNKS:
        then = ("as it tours and comes back (arena_tour.yaml; --store window: the same without memory)"
                if cfg.trajectory is None else "from there")
        return (f"; observes a look around ({looking} chunks of a full turn, rendered truth, marked in the "
                f"corner; --look-around 0: none), then generates {then}")
    return ""


def _meta_model(m: ArenaModelConfig):
    from engine.arena.model import ArenaDiT

    with torch.device("meta"):
        return ArenaDiT(m)


def build(cfg, image, trajectory, device, dtype, cache):
    path = _weights(cfg)
    from engine.model.weight_place import place_weights, placement_key, staging_device, to_device

    def load():
        model = load_model(path, staging_device(cfg, device), dtype)
        placement = place_weights(model.blocks, cfg, device, dtype, (model,))
        to_device(device, model)
        return model, placement

    model, placement = cache.get(("arena", weights_stamp(path), str(device), dtype, placement_key(cfg, dtype)), load)
    pipeline = ArenaPipeline(model, Arena.generate(cfg.arena_seed), trajectory, cfg.seed, cfg.positions, device,
                             dtype, weights=str(path), reproject=cfg.arena_reproject,
                             reproject_depth=cfg.arena_reproject_depth)
    pipeline.weight_placement = placement
    return pipeline


def header_facts(cfg) -> dict:
    m, _, params = _facts(cfg)
    layout = m.kv_layout(m.reproject_depth or cfg.arena_reproject_depth)
    return {"model": "arena", "arena_seed": cfg.arena_seed, "params": params,
            "layers": m.layers, "copy_layers": 1, "heads": m.heads, "head_dim": m.head_dim, "dim": m.dim,
            "frame": [m.height, m.width], "video": list(m.video_size), "fps": m.fps,
            "frames_per_chunk": m.frames_per_chunk, "tokens_per_chunk": m.tokens_per_chunk,
            "window_frames": m.window_frames, "sampler_steps": list(m.steps),
            "reproject": float(m.reproject if cfg.arena_reproject is None else cfg.arena_reproject),
            "reproject_depth": bool(m.reproject_depth or cfg.arena_reproject_depth),
            "kv_bytes_per_chunk_fp32": layout.bytes_per_chunk(4.0), "horizon_chunk": m.horizon_chunk}


def layout(cfg) -> KVLayout:
    """The arena model's shape is in its weights file's metadata (read without the weights)."""
    m = config_of(_weights(cfg))
    return m.kv_layout(m.reproject_depth or cfg.arena_reproject_depth)


FAMILY = Family(spec, build, header_facts, layout)
