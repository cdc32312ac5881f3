"""The parameters of a model's networks, counted from its configuration by shape arithmetic (no torch).

Owns ``ModelWeights``: per DiT block, the large linears a weight format quantises (self- and
cross-attention q, k, v, o and the two feed-forward linears, as ``engine.planner.weight_plan`` says) and
the block's other parameters (biases of nothing else, norms, modulation, the camera injectors of
LingBot, the action module of MG2's first blocks), which keep the compute dtype; the DiT's parameters
outside its blocks (embeddings, head: always resident, compute dtype); what else the device holds
beside the DiT (the VAE, and MG2's CLIP vision tower: ``ModelShape.device_params`` minus the DiT); and
the text encoder a LingBot release runs once per prompt (Wan's UMT5-XXL encoder; none for a seeded
model, which has a stand-in text context). ``block_bytes(fmt)`` gives each block's device bytes in a
weight format. A unit test counts the same from the networks built on the meta device.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.config import LINGBOT_MODELS, MODEL_CONFIGS, ActionConfig, DiTConfig
from engine.facts.lingbot_config import FastDiTConfig
from engine.facts.lingbot_models import lingbot_config
from engine.planner.weight_plan import linear_bytes

COMPUTE_BYTES = 2               # bf16 on a GPU
# Wan's UMT5-XXL encoder (models_t5_umt5-xxl-enc-bf16.pth): vocabulary, width, attention width,
# feed-forward width, heads, layers, position-bias buckets.
UMT5_XXL = (256_384, 4096, 4096, 10_240, 64, 24, 32)


def _linear(out_features: int, in_features: int, bias: bool = True) -> int:
    return out_features * in_features + (out_features if bias else 0)


@dataclass(frozen=True)
class BlockShape:
    """One DiT block: its quantisable linears ``(out, in)`` (with bias) and its other parameters."""

    linears: tuple[tuple[int, int], ...]
    other_params: int

    @property
    def params(self) -> int:
        return sum(_linear(o, i) for o, i in self.linears) + self.other_params

    def nbytes(self, fmt: str, compute_bytes: int = COMPUTE_BYTES) -> int:
        """Device bytes in weight format ``fmt`` (the other parameters keep the compute dtype)."""
        return (sum(linear_bytes(o, i, fmt, True, compute_bytes) for o, i in self.linears)
                + self.other_params * compute_bytes)


@dataclass(frozen=True)
class ModelWeights:
    """What a model's weights are made of, in parameters (see the module docstring)."""

    blocks: tuple[BlockShape, ...]
    dit_other_params: int           # the DiT outside its blocks
    aux_params: int                 # beside the DiT on the device: the VAE (MG2: and CLIP)
    aux_label: str
    text_encoder_params: int        # LingBot's UMT5 encoder (0: none, a seeded stand-in)
    dim: int = 0                    # the DiT's width, feed-forward width, passes per chunk (the
    ffn_dim: int = 0                # denoising steps + the clean pass), video frame (height, width)
    passes: int = 0                 # and the VAE's base width: what the activation estimate reads
    frame: tuple[int, int] = (0, 0)
    vae_dim: int = 0

    @property
    def dit_params(self) -> int:
        return sum(b.params for b in self.blocks) + self.dit_other_params

    def block_bytes(self, fmt: str) -> list[int]:
        return [b.nbytes(fmt) for b in self.blocks]


def _attention_and_ffn(dim: int, ffn_dim: int) -> tuple[tuple[int, int], ...]:
    return ((dim, dim),) * 8 + ((ffn_dim, dim), (dim, ffn_dim))


def _block_norms(dim: int, cross_attn_norm: bool) -> int:
    """Modulation (6 x dim), q/k RMS norms of both attentions (4 x dim), the affine norm3 (2 x dim)."""
    return 6 * dim + 4 * dim + (2 * dim if cross_attn_norm else 0)


def action_params(cfg: ActionConfig, dim: int) -> int:
    """MG2's ``ActionModule`` (engine.model.action)."""
    window, total = cfg.window_frames, 0
    if cfg.enable_keyboard:
        h, khd = cfg.hidden_size, cfg.keyboard_hidden_dim
        total += _linear(h, cfg.keyboard_dim_in) + _linear(h, h) + 2 * (khd // cfg.heads_num)
        total += (_linear(khd, dim, cfg.qkv_bias) + _linear(2 * khd, h * window, cfg.qkv_bias)
                  + _linear(dim, khd, cfg.qkv_bias))
    if cfg.enable_mouse:
        c = cfg.mouse_hidden_dim
        total += _linear(c, cfg.mouse_dim_in * window + dim) + _linear(c, c) + 2 * c
        total += _linear(3 * c, c, cfg.qkv_bias) + 2 * (c // cfg.heads_num) + _linear(dim, c, cfg.qkv_bias)
    return total


def mg2_blocks(dit: DiTConfig) -> tuple[BlockShape, ...]:
    out = []
    for index in range(dit.num_layers):
        other = _block_norms(dit.dim, dit.cross_attn_norm)
        if dit.action is not None and index in dit.action.blocks:
            other += action_params(dit.action, dit.dim)
        out.append(BlockShape(_attention_and_ffn(dit.dim, dit.ffn_dim), other))
    return tuple(out)


def mg2_dit_other(dit: DiTConfig) -> int:
    """Patch embedding, time embedding and projection, head, CLIP image projection."""
    d, patch = dit.dim, dit.patch_size[0] * dit.patch_size[1] * dit.patch_size[2]
    head = 2 * d + _linear(patch * dit.out_dim, d)
    image = 2 * dit.clip_dim + _linear(dit.clip_dim, dit.clip_dim) + _linear(d, dit.clip_dim) + 2 * d
    return (dit.in_dim * d * patch + d + _linear(d, dit.freq_dim) + _linear(d, d) + _linear(6 * d, d)
            + head + image)


def lingbot_blocks(dit: FastDiTConfig) -> tuple[BlockShape, ...]:
    cam = 4 * _linear(dit.dim, dit.dim)                  # cam_injector_layer1/2, cam_scale/shift_layer
    block = BlockShape(_attention_and_ffn(dit.dim, dit.ffn_dim), _block_norms(dit.dim, dit.cross_attn_norm) + cam)
    return (block,) * dit.num_layers


def lingbot_dit_other(dit: FastDiTConfig) -> int:
    """Patch, text, time and control embeddings, the camera's hidden-state layers, the head."""
    d, patch = dit.dim, dit.patch_size[0] * dit.patch_size[1] * dit.patch_size[2]
    return (dit.in_dim * d * patch + d + _linear(d, dit.text_dim) + _linear(d, d) + _linear(d, dit.freq_dim)
            + _linear(d, d) + _linear(6 * d, d) + _linear(d, dit.control_in_features) + 2 * _linear(d, d)
            + 2 * d + _linear(patch * dit.out_dim, d))


def umt5_params(shape: tuple[int, ...] = UMT5_XXL) -> int:
    """Wan's UMT5 encoder: embedding, per layer q/k/v/o, gated feed-forward, two norms, position bias."""
    vocab, dim, attn, ffn, heads, layers, buckets = shape
    per_layer = 3 * attn * dim + dim * attn + 3 * ffn * dim + 2 * dim + buckets * heads
    return vocab * dim + layers * per_layer + dim


def model_weights(name: str) -> ModelWeights:
    """The weights of the named model (``ModelShape.name``); the synthetic model has none."""
    if name in LINGBOT_MODELS:
        m = lingbot_config(name)
        blocks, other = lingbot_blocks(m.dit), lingbot_dit_other(m.dit)
        dit = sum(b.params for b in blocks) + other
        return ModelWeights(blocks, other, m.device_params - dit, "VAE", 0 if m.seeded else umt5_params(),
                            m.dit.dim, m.dit.ffn_dim, len(m.settings.timesteps_index) + 1, m.frame_size, m.vae.dim)
    if name not in MODEL_CONFIGS:             # the synthetic model: KV bytes, no weights
        return ModelWeights((), 0, 0, "none", 0)
    mc = MODEL_CONFIGS[name]
    blocks, other = mg2_blocks(mc.dit), mg2_dit_other(mc.dit)
    dit = sum(b.params for b in blocks) + other
    return ModelWeights(blocks, other, mc.shape().device_params - dit, "VAE + CLIP", 0, mc.dit.dim, mc.dit.ffn_dim,
                        len(mc.sampler.denoising_step_list) + 1, (mc.video_height, mc.video_width), mc.vae.dim)
