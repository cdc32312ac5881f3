"""Matrix-Game 2.0's causal DiT (``CausalWanModel``), inference path with an explicit context.

Owns the network: patch embedding, per-frame timestep embedding and adaLN modulation, self-attention
with the 3D RoPE over the caller's ``AttentionContext``, cross-attention to the start image's CLIP
tokens, the action module in the configured blocks, the modulated head and unpatchify. Module and
parameter names equal the official checkpoint's keys (minus its ``model.`` prefix), so loading is a
strict key-for-key copy. MG2's per-layer state besides the self-attention KV (action windows, cross
K/V) is attached to the context by ``prepare_context`` (``engine.model.mg2_context``).

One forward denoises one chunk: x [B, out_dim, F, h, w] at per-frame timesteps t [B, F] -> flow
velocity of the same shape. The forward writes the chunk's K/V into the context; the caller commits
them (after MG2's clean pass) with ``ctx.commit()``.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.config import DiTConfig
from engine.model.action import ActionModule
from engine.model.attention import attention
from engine.model.kv_context import AttentionContext, LayerState
from engine.model.mg2_context import attach_mg2_state, mg2_state
from engine.model.rope import DiTRope
from engine.model.weight_stream import blocks_in_order


def sinusoidal_embedding(dim: int, position: torch.Tensor) -> torch.Tensor:
    """[N] -> [N, dim] float64: cos half first, then sin; frequencies 10000^(-i/(dim/2))."""
    half = dim // 2
    pos = position.to(torch.float64)
    sinusoid = torch.outer(pos, torch.pow(10000, -torch.arange(half, dtype=torch.float64,
                                                               device=pos.device).div(half)))
    return torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1)


class RMSNorm(nn.Module):
    """RMS norm over the full width, normalised in float32, then times the weight."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def layer_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Affine-free LayerNorm (MG2's norm1/norm2/head norm)."""
    return F.layer_norm(x, x.shape[-1:], eps=eps).type_as(x)


def modulate(x: torch.Tensor, frames: int, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [B, F*S, C] * (1 + scale) + shift with per-frame shift/scale [B, F, 1, C]."""
    return (x.unflatten(1, (frames, -1)) * (1 + scale) + shift).flatten(1, 2)


def gate(y: torch.Tensor, frames: int, g: torch.Tensor) -> torch.Tensor:
    return (y.unflatten(1, (frames, -1)) * g).flatten(1, 2)


class QKVProjection(nn.Module):
    """q/k/v/o linears with full-width RMS norms on q and k (shared by self- and cross-attention)."""

    def __init__(self, dim: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q = RMSNorm(dim, eps)
        self.norm_k = RMSNorm(dim, eps)

    def queries(self, x):
        return self.norm_q(self.q(x)).unflatten(-1, (self.heads, -1))

    def keys_values(self, x):
        return (self.norm_k(self.k(x)).unflatten(-1, (self.heads, -1)),
                self.v(x).unflatten(-1, (self.heads, -1)))


class SelfAttention(QKVProjection):
    def forward(self, x, grid, start_frame, rope: DiTRope, state: LayerState):
        frames, height, width = grid
        q = self.queries(x)
        k, v = self.keys_values(x)
        q = rope.apply(q, start_frame, frames, height, width).type_as(v)
        k_unrotated = k   # what a pre-rope memory stores; rotated again when staged (place_keys)
        k = rope.apply(k, start_frame, frames, height, width).type_as(v)
        state.self_kv.write_current(k, v, k_unrotated.type_as(v))
        k_ctx, v_ctx = state.self_kv.context()
        return self.o(attention(q, k_ctx, v_ctx).flatten(2))


class CrossAttention(QKVProjection):
    def forward(self, x, state: LayerState):
        q = self.queries(x)
        image = mg2_state(state)
        return self.o(attention(q, image.cross_k, image.cross_v).flatten(2))


class Block(nn.Module):
    def __init__(self, cfg: DiTConfig, index: int):
        super().__init__()
        self.eps = cfg.eps
        self.modulation = nn.Parameter(torch.zeros(1, 6, cfg.dim))
        self.self_attn = SelfAttention(cfg.dim, cfg.num_heads, cfg.eps)
        self.norm3 = nn.LayerNorm(cfg.dim, eps=cfg.eps) if cfg.cross_attn_norm else nn.Identity()
        self.cross_attn = CrossAttention(cfg.dim, cfg.num_heads, cfg.eps)
        self.ffn = nn.Sequential(nn.Linear(cfg.dim, cfg.ffn_dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(cfg.ffn_dim, cfg.dim))
        has_action = cfg.action is not None and index in cfg.action.blocks
        self.action_model = ActionModule(cfg.action, cfg.dim) if has_action else None

    def forward(self, x, e0, grid, start_frame, rope, state: LayerState, keyboard, mouse, action_offset):
        frames = grid[0]
        e = (self.modulation.unsqueeze(1) + e0).chunk(6, dim=2)   # 6 x [B, F, 1, C]
        y = self.self_attn(modulate(layer_norm(x, self.eps), frames, e[0], e[1]), grid, start_frame,
                           rope, state)
        x = x + gate(y, frames, e[2])
        x = x + self.cross_attn(self.norm3(x), state)
        if self.action_model is not None:
            windows = mg2_state(state)
            x = self.action_model(x, frames, start_frame, keyboard, mouse, windows.keyboard, windows.mouse,
                                  action_offset)
        y = self.ffn(modulate(layer_norm(x, self.eps), frames, e[3], e[4]))
        return x + gate(y, frames, e[5])


class Head(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.eps = cfg.eps
        self.modulation = nn.Parameter(torch.zeros(1, 2, cfg.dim))
        self.head = nn.Linear(cfg.dim, math.prod(cfg.patch_size) * cfg.out_dim)

    def forward(self, x, e, frames):
        shift, scale = (self.modulation.unsqueeze(1) + e).chunk(2, dim=2)   # [B, F, 1, C]
        return self.head(modulate(layer_norm(x, self.eps), frames, shift, scale))


class ImageProjection(nn.Module):
    """CLIP tokens -> DiT width: LayerNorm, Linear, exact GELU, Linear, LayerNorm."""

    def __init__(self, clip_dim: int, dim: int):
        super().__init__()
        self.proj = nn.Sequential(nn.LayerNorm(clip_dim), nn.Linear(clip_dim, clip_dim), nn.GELU(),
                                  nn.Linear(clip_dim, dim), nn.LayerNorm(dim))

    def forward(self, tokens):
        return self.proj(tokens)


class CausalDiT(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.cfg = cfg
        self.patch_embedding = nn.Conv3d(cfg.in_dim, cfg.dim, kernel_size=cfg.patch_size,
                                         stride=cfg.patch_size)
        self.time_embedding = nn.Sequential(nn.Linear(cfg.freq_dim, cfg.dim), nn.SiLU(),
                                            nn.Linear(cfg.dim, cfg.dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(cfg.dim, 6 * cfg.dim))
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_layers))
        self.head = Head(cfg)
        self.img_emb = ImageProjection(cfg.clip_dim, cfg.dim)
        self.rope = DiTRope(cfg.head_dim, cfg.rope_split, cfg.rope_theta)

    @torch.no_grad()
    def prepare_context(self, ctx: AttentionContext, clip_tokens: torch.Tensor) -> None:
        """Attach MG2's per-layer state to ``ctx`` (fresh action windows), then project the start
        image's CLIP tokens [B, N, clip_dim] and cache every layer's cross K/V."""
        attach_mg2_state(ctx, self.cfg)
        context = self.img_emb(clip_tokens.to(self.patch_embedding.weight.dtype))
        for block, state in zip(blocks_in_order(self.blocks), ctx.layers, strict=True):
            image = mg2_state(state)
            image.cross_k, image.cross_v = block.cross_attn.keys_values(context)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, t: torch.Tensor, cond_concat: torch.Tensor,
                ctx: AttentionContext, start_frame: int, keyboard: torch.Tensor | None = None,
                mouse: torch.Tensor | None = None, action_offset: int = 0) -> torch.Tensor:
        """x [B, out_dim, F, h, w], t [B, F], cond_concat [B, in_dim - out_dim, F, h, w] -> velocity.

        ``start_frame`` is the absolute latent index of the chunk's first frame; keyboard/mouse hold
        per-video-frame actions [B, T, dim] of video frames [action_offset, action_offset + T),
        covering at least the chunk's action windows.
        """
        assert mg2_state(ctx.layers[0]).cross_k is not None, "call prepare_context first"
        dtype = self.patch_embedding.weight.dtype
        h = self.patch_embedding(torch.cat([x, cond_concat], dim=1).to(dtype))   # [B, C, F, h', w']
        grid = tuple(h.shape[2:])
        h = h.flatten(2).transpose(1, 2)                                           # [B, F*h'*w', C]
        b, frames = t.shape
        e = self.time_embedding(sinusoidal_embedding(self.cfg.freq_dim, t.flatten()).to(dtype))
        e0 = self.time_projection(e).unflatten(1, (6, self.cfg.dim)).unflatten(0, (b, frames))
        for block, state in zip(blocks_in_order(self.blocks), ctx.layers):
            h = block(h, e0, grid, start_frame, self.rope, state, keyboard, mouse, action_offset)
        out = self.head(h, e.unflatten(0, (b, frames)).unsqueeze(2), frames)         # [B, L, p*c]
        return self.unpatchify(out, grid)

    def unpatchify(self, x: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """[B, F*h'*w', pt*ph*pw*c] (c fastest) -> [B, c, F*pt, h'*ph, w'*pw]."""
        c, (pt, ph, pw) = self.cfg.out_dim, self.cfg.patch_size
        f, hh, ww = grid
        x = x.view(x.shape[0], f, hh, ww, pt, ph, pw, c)
        x = torch.einsum("bfhwpqrc->bcfphqwr", x)
        return x.reshape(x.shape[0], c, f * pt, hh * ph, ww * pw)
