"""LingBot-World-Fast's entry in the model registry: its spec before loading, its construction, its facts.

Owns how a session config becomes a LingBot spec (start image and video at the model's pixel grid, the
``universal`` trajectory format whose poses drive the camera, the packaged ``revisit_loop.yaml``), the
built-in tiny model (seeded DiT and VAE weights and the seeded text stand-in, from the worker's
``ModelCache``), the log header's facts and the KV layout (both from the config alone, so
``lingbot-fast``'s are known without its 14B weights).

With ``--checkpoint DIR`` (a release folder, ``engine.model.lingbot.checkpoint``) the named model's
geometry runs the folder's DiT, VAE and the ``--prompt``'s UMT5 context; ``lingbot-fast`` has no built-in
weights, so it needs one.
"""
from __future__ import annotations

import functools

import torch

from engine.errors import ConfigError
from engine.facts.kv_format import ChunkFormat, byte_figures
from engine.facts.layout import KVLayout
from engine.facts.lingbot_config import VAE_STRIDE
from engine.facts.lingbot_models import LingbotModelConfig, lingbot_config
from engine.model.lingbot.release_session import build_from_release, release_spec
from engine.model.lingbot.pipeline import LingbotPipeline
from engine.model.lingbot.weights import empty_model, seeded_model
from engine.model.model_cache import ModelCache
from engine.model.seeded_weights import fill_module_
from engine.model.weight_place import place_weights, placement_key, staging_device, to_device
from engine.model.spec import Family, ModelSpec
from engine.model.vae import WanVAE

DEFAULT_TRAJECTORY = "revisit_loop.yaml"
BUILTIN_SEED = 20260410          # the parity fixture's weight seed: lingbot-tiny's DiT is the fixture's
VAE_SEED = BUILTIN_SEED + 1
TEXT_SEED = BUILTIN_SEED + 2


def spec(cfg) -> ModelSpec:
    m = lingbot_config(cfg.model)
    if cfg.checkpoint is not None:
        return release_spec(cfg, m, DEFAULT_TRAJECTORY)
    if cfg.prompt is not None:
        raise ConfigError(f"--prompt {cfg.prompt!r}: the built-in {m.name} has no text encoder; give the release "
                          "folder with --checkpoint DIR")
    if not m.seeded:
        raise ConfigError(f"--model {m.name} has no built-in weights: give the release folder with --checkpoint "
                          "DIR (worldpager download --model lingbot-fast), or run --model lingbot-tiny")
    height, width = m.frame_size
    banner = (f"worldpager: using the built-in {m.name} model (LingBot-World-Fast's architecture with seeded "
              f"random weights and a random text context): the video shows the pipeline, not a trained "
              f"world model; {height}x{width}")
    return ModelSpec(m.name, m.frame_size, "universal", m.video_grid(), m.frame_size, m.horizon_chunk,
                     DEFAULT_TRAJECTORY, True, banner)


def text_stand_in(m: LingbotModelConfig) -> torch.Tensor:
    """The tiny model's text context: seeded N(0, 1) rows of the T5 output's shape [1, n, text_dim]
    (what the official text encoder returns for a prompt of n tokens)."""
    generator = torch.Generator().manual_seed(TEXT_SEED)
    return torch.randn((1, m.text_tokens, m.dit.text_dim), generator=generator, dtype=torch.float32)


def _seeded(m: LingbotModelConfig, device, dtype):
    dit = seeded_model(m.dit, BUILTIN_SEED, dtype, device)
    vae = fill_module_(WanVAE(m.vae), VAE_SEED).to(device=device, dtype=dtype).eval()
    return dit, vae


def build(cfg, image, trajectory, device, dtype, cache: ModelCache):
    m = lingbot_config(cfg.model)
    if cfg.checkpoint is not None:
        return build_from_release(cfg, m, image, trajectory, device, dtype, cache)

    def load():
        dit, vae = _seeded(m, staging_device(cfg, device), dtype)
        placement = place_weights(dit.blocks, cfg, device, dtype, (dit, vae))
        to_device(device, dit, vae)
        return dit, vae, placement

    dit, vae, placement = cache.get(("lingbot", m, str(device), dtype, placement_key(cfg, dtype)), load)
    model = LingbotPipeline(dit, vae, m, image, trajectory, text_stand_in(m), cfg.seed, cfg.positions,
                            device, dtype, weights="built-in seeded weights",
                            official_sink=cfg.memory.official_sink,
                            live_step=VAE_STRIDE[0] * cfg.calibration.distance_per_frame)
    model.weight_placement = placement
    return model


@functools.lru_cache(maxsize=4)
def _parameters(m: LingbotModelConfig) -> int:
    return sum(p.numel() for p in empty_model(m.dit).parameters())


def facts(m: LingbotModelConfig) -> dict:
    """Shape facts of a configuration (no weights): geometry, KV bytes per chunk in every format."""
    layout = m.kv_layout()
    figures = byte_figures(layout)
    return {"model": m.name, "params": _parameters(m), "layers": m.dit.num_layers, "heads": m.dit.num_heads,
            "head_dim": m.dit.head_dim, "dim": m.dit.dim, "control": m.dit.control_type,
            "latent": [m.dit.out_dim, m.latent_height, m.latent_width], "video": list(m.frame_size),
            "fps": m.fps, "frames_per_chunk": m.frames_per_chunk, "tokens_per_frame": m.tokens_per_frame,
            "tokens_per_chunk": m.tokens_per_chunk, "window_frames": m.window_frames,
            "official_sink_frames": m.dit.sink_size, "denoising_steps": len(m.settings.timesteps_index),
            "kv_bytes_per_chunk_bf16": figures["bf16"], "kv_bytes_per_chunk_fp32": layout.bytes_per_chunk(4.0),
            **{f"kv_bytes_per_chunk_int{b}": figures[f"int{b}"] for b in (8, 4, 2)},
            "kv_slot_bytes_int4": ChunkFormat.from_layout(layout, bits=4).slot_bytes,
            "horizon_chunk": m.horizon_chunk}


def header_facts(cfg) -> dict:
    return facts(lingbot_config(cfg.model))


def layout(cfg) -> KVLayout:
    return lingbot_config(cfg.model).kv_layout()


FAMILY = Family(spec, build, header_facts, layout)
