"""The released LingBot-World-Fast shape (14B, Wan2.1-14B i2v widths) built on the meta device: its
parameter count against a closed formula, and the KV bytes a latent frame and a chunk take at 480x832."""
from __future__ import annotations

import dataclasses

from engine.facts.lingbot_config import FULL_SIZE, VAE_STRIDE, LoopSettings
from engine.model.lingbot.loop import kv_layout, run_shape
from engine.model.lingbot.weights import empty_model

HEIGHT, WIDTH = 480, 832


def _linear(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def _expected_parameters(cfg) -> int:
    d, f = cfg.dim, cfg.ffn_dim
    attention = 4 * _linear(d, d) + 2 * d                          # q k v o + the two RMS norm weights
    block = (2 * attention + 2 * d                                  # self, cross, norm3 (affine)
             + _linear(d, f) + _linear(f, d) + 6 * d                # FFN, modulation
             + 4 * _linear(d, d))                                   # camera injector, scale, shift
    patch = 1 * 2 * 2
    top = (_linear(cfg.in_dim * patch, d)                           # patch embedding (Conv3d)
           + _linear(cfg.text_dim, d) + _linear(d, d)               # text embedding
           + _linear(cfg.freq_dim, d) + _linear(d, d) + _linear(d, 6 * d)   # time embedding, projection
           + _linear(cfg.control_dim * 64 * patch, d) + 2 * _linear(d, d)   # control path
           + 2 * d + _linear(d, patch * cfg.out_dim))               # head
    return cfg.num_layers * block + top


def test_full_size_parameter_count():
    cfg = FULL_SIZE
    assert (cfg.dim, cfg.num_layers, cfg.num_heads, cfg.ffn_dim, cfg.in_dim, cfg.text_dim) == (
        5120, 40, 40, 13824, 36, 4096)
    assert cfg.head_dim == 128 and cfg.rope_split == (44, 42, 42)
    model = empty_model(cfg)
    count = sum(p.numel() for p in model.parameters())
    assert count == _expected_parameters(cfg)
    assert 14e9 < count < 20e9, count          # a "14B" Wan DiT plus the camera layers (~4.2 G values)


def test_full_size_kv_bytes_per_latent_frame_and_chunk():
    cfg = dataclasses.replace(FULL_SIZE, local_attn_size=18, sink_size=3)
    lat_h, lat_w = HEIGHT // VAE_STRIDE[1], WIDTH // VAE_STRIDE[2]
    shape = run_shape(81, 81, lat_h, lat_w, cfg, LoopSettings())
    layout = kv_layout(cfg, shape)
    assert layout.tokens_per_frame == 1560 and layout.tokens_per_chunk == 3 * 1560
    per_frame_bf16 = 2 * cfg.num_layers * 1560 * cfg.dim * 2         # K and V, 2 bytes each
    assert per_frame_bf16 == 1_277_952_000                            # ~1.28 GB
    assert layout.bytes_per_chunk(2.0) == 3 * per_frame_bf16          # ~3.83 GB per 3-frame chunk
