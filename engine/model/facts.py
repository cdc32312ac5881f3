"""Shape facts of a model configuration, computed without weights (networks built on the meta device).

Owns what ``worldpager inspect`` reports: parameter counts per network, layer/head geometry, tokens
per frame and chunk, KV bytes per chunk (raw, and in each storage format of :mod:`engine.facts.kv_format`),
video geometry and the positional horizon.
"""
from __future__ import annotations

import torch

from engine.config import ModelConfig
from engine.facts.kv_format import ChunkFormat, byte_figures
from engine.model.clip import CLIPVisionTower
from engine.model.mg2 import CausalDiT
from engine.model.vae import WanVAE


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def horizon_chunk(cfg: ModelConfig) -> int:
    """First chunk whose latent frames do not all fit MG2's native rotary table."""
    f = cfg.sampler.frames_per_chunk
    return (cfg.dit.rope_table_frames - f) // f + 1


def storage_facts(cfg: ModelConfig) -> dict[str, int]:
    """Bytes of one stored chunk block per quantised format, and the int4 pool-slot / disk-block size."""
    figures = byte_figures(cfg.kv_layout())
    out = {f"kv_bytes_per_chunk_int{b}": figures[f"int{b}"] for b in (8, 4, 2)}
    # The block rounded up to O_DIRECT granularity: what one pool slot / disk block really occupies.
    out["kv_slot_bytes_int4"] = ChunkFormat.from_layout(cfg.kv_layout(), bits=4).slot_bytes
    return out


def model_facts(cfg: ModelConfig) -> dict:
    with torch.device("meta"):
        dit, vae, clip = CausalDiT(cfg.dit), WanVAE(cfg.vae), CLIPVisionTower(cfg.clip)
    action_params = sum(count_parameters(b.action_model) for b in dit.blocks
                        if b.action_model is not None)
    return {
        "model": cfg.name,
        "mode": cfg.mode,
        "params": count_parameters(dit),
        "action_params": action_params,
        "dit_tensors": len(dit.state_dict()),
        "vae_params": count_parameters(vae),
        "clip_params": count_parameters(clip),
        "layers": cfg.dit.num_layers,
        "heads": cfg.dit.num_heads,
        "head_dim": cfg.dit.head_dim,
        "dim": cfg.dit.dim,
        "latent": [cfg.dit.out_dim, cfg.latent_height, cfg.latent_width],
        "video": [cfg.video_height, cfg.video_width],
        "fps": cfg.fps,
        "frames_per_chunk": cfg.sampler.frames_per_chunk,
        "tokens_per_frame": cfg.tokens_per_frame,
        "tokens_per_chunk": cfg.tokens_per_chunk,
        "window_frames": cfg.window_frames,
        "denoising_steps": len(cfg.sampler.denoising_step_list),
        "kv_bytes_per_chunk_bf16": cfg.kv_bytes_per_chunk(2.0),
        "kv_bytes_per_chunk_fp32": cfg.kv_bytes_per_chunk(4.0),
        **storage_facts(cfg),
        "horizon_chunk": horizon_chunk(cfg),
    }
