"""The arena model's entry in the model registry: its spec before loading, its construction, its facts.

Owns the arena-specific parts of a session's set-up: the world is ``cfg.arena_seed``'s arena, the start
is that world's rendered view (a start image is refused: the arena model cannot place an arbitrary
picture in its world), the default path is the packaged ``arena_tour.yaml``, the weights come from
``cfg.arena_weights`` or the package. The model's shape is read from the weights file's metadata, so a
retrained model of another size needs no code change.
"""
from __future__ import annotations

import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.pipeline import ArenaPipeline
from engine.arena.weights import config_of, load_model, packaged_weights_path, read_metadata
from engine.arena.world import Arena
from engine.errors import ConfigError

DEFAULT_TRAJECTORY = "arena_tour.yaml"


def _weights(cfg):
    return cfg.arena_weights if cfg.arena_weights is not None else packaged_weights_path()


def _config(cfg) -> ArenaModelConfig:
    return config_of(_weights(cfg))


def spec(cfg):
    from engine.model.registry import ModelSpec

    if cfg.image is not None:
        raise ConfigError(f"--image {cfg.image}: the arena model starts from its world's own rendered view; "
                          "choose a world with --arena-seed instead")
    if cfg.checkpoint is not None:
        raise ConfigError(f"--checkpoint {cfg.checkpoint} is for MG2 models; the arena model reads "
                          "--arena-weights (give --model mg2-universal to run MG2)")
    m = _config(cfg)
    meta = read_metadata(_weights(cfg))
    params = sum(p.numel() for p in _meta_model(m).parameters())
    banner = (f"worldpager: arena model (our own world model, {params / 1e6:.1f} M parameters, "
              f"{meta.get('train_steps', '?')} training steps) in arena {cfg.arena_seed}: "
              f"{m.height}x{m.width} frames shown at {m.video_size[0]}x{m.video_size[1]}")
    # ultrafast: the arena makes hundreds of frames a second, and its enlarged pixels compress easily
    return ModelSpec("arena", (m.height, m.width), "universal", m.video_grid(), m.video_size, m.horizon_chunk,
                     DEFAULT_TRAJECTORY, False, banner, encoder_preset="ultrafast")


def _meta_model(m: ArenaModelConfig):
    from engine.arena.model import ArenaDiT

    with torch.device("meta"):
        return ArenaDiT(m)


def build(cfg, image, trajectory, device, dtype):
    path = _weights(cfg)
    model = load_model(path, device, dtype)
    return ArenaPipeline(model, Arena.generate(cfg.arena_seed), trajectory, cfg.seed, cfg.positions, device, dtype,
                         weights=str(path))


def header_facts(cfg) -> dict:
    m = _config(cfg)
    layout = m.kv_layout()
    return {"model": "arena", "arena_seed": cfg.arena_seed, "params": sum(p.numel() for p in _meta_model(m).parameters()),
            "layers": m.layers, "copy_layers": 1, "heads": m.heads, "head_dim": m.head_dim, "dim": m.dim,
            "frame": [m.height, m.width], "video": list(m.video_size), "fps": m.fps,
            "frames_per_chunk": m.frames_per_chunk, "tokens_per_chunk": m.tokens_per_chunk,
            "window_frames": m.window_frames, "sampler_steps": list(m.steps),
            "kv_bytes_per_chunk_fp32": layout.bytes_per_chunk(4.0), "horizon_chunk": m.horizon_chunk}
