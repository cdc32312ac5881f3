"""LingBot-World-Fast's causal DiT (the official ``WanModelFast``), inference path.

Owns the network; module and parameter names equal the official state dict's keys, so loading is a
strict key-for-key copy (``engine.model.lingbot.weights``). One forward denoises one chunk:

* tokens: [noisy latent | y (mask + start-image latent)] -> Conv3d patches (1x2x2), (frame, row, col);
* time: the chunk's one timestep on every token -> sinusoidal (float64) -> MLP ``e`` -> six
  modulation vectors ``e0``; text: context zero-padded to ``text_len`` rows -> MLP;
* control: the control tensor cut into the same patches -> ``patch_embedding_wancamctrl`` P, condition
  P + MLP(P), injected in every block after self-attention as x (1 + scale) + shift;
* blocks: self-attention over the rolling cache (RoPE at absolute latent frames), camera injection,
  cross-attention to all ``text_len`` rows (zero rows included), FFN; modulated head; unpatchify.

The Wan2.1 pieces (RMS norm, sinusoidal embedding, q/k/v projections, RoPE, attention) are MG2's.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.model.attention import attention
from engine.model.lingbot.cache import CrossKV, FastCaches, SelfKV
from engine.facts.lingbot_config import FastDiTConfig
from engine.model.mg2 import QKVProjection, layer_norm, sinusoidal_embedding
from engine.model.rope import DiTRope
from engine.model.weight_stream import blocks_in_order


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class FastSelfAttention(QKVProjection):
    def forward(self, x, grid, start_frame, rope: DiTRope, cache: SelfKV, current_start: int):
        frames, height, width = grid
        q = self.queries(x)
        k, v = self.keys_values(x)
        q = rope.apply(q, start_frame, frames, height, width).type_as(v)
        k_unrotated = k   # what a pre-rope memory stores; rotated again when staged (place_keys)
        k = rope.apply(k, start_frame, frames, height, width).type_as(v)
        k_ctx, v_ctx = cache.update(k, v, current_start, k_unrotated.type_as(v))
        return self.o(attention(q, k_ctx, v_ctx).flatten(2))


class FastCrossAttention(QKVProjection):
    def forward(self, x, text: torch.Tensor | None, cache: CrossKV):
        if not cache.is_init:
            assert text is not None, "the first forward of a run needs the text embedding"
            cache.k, cache.v = self.keys_values(text)
        return self.o(attention(self.queries(x), cache.k, cache.v).flatten(2))


class FastBlock(nn.Module):
    def __init__(self, cfg: FastDiTConfig):
        super().__init__()
        dim, eps = cfg.dim, cfg.eps
        self.eps = eps
        self.self_attn = FastSelfAttention(dim, cfg.num_heads, eps)
        self.cross_attn = FastCrossAttention(dim, cfg.num_heads, eps)
        self.norm3 = nn.LayerNorm(dim, eps=eps) if cfg.cross_attn_norm else nn.Identity()
        self.ffn = nn.Sequential(nn.Linear(dim, cfg.ffn_dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(cfg.ffn_dim, dim))
        self.modulation = nn.Parameter(torch.zeros(1, 6, dim))
        self.cam_injector_layer1 = nn.Linear(dim, dim)
        self.cam_injector_layer2 = nn.Linear(dim, dim)
        self.cam_scale_layer = nn.Linear(dim, dim)
        self.cam_shift_layer = nn.Linear(dim, dim)

    def inject_control(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        hidden = self.cam_injector_layer2(F.silu(self.cam_injector_layer1(cond))) + cond
        return _modulate(x, self.cam_shift_layer(hidden), self.cam_scale_layer(hidden))

    def forward(self, x, e0, cond, text, grid, start_frame, rope, cache: SelfKV, cross: CrossKV,
                current_start: int):
        e = (self.modulation.unsqueeze(0) + e0).chunk(6, dim=2)      # 6 x [B, L, 1, C]
        e = [m.squeeze(2) for m in e]
        y = self.self_attn(_modulate(layer_norm(x, self.eps), e[0], e[1]), grid, start_frame, rope,
                           cache, current_start)
        x = x + y * e[2]
        x = self.inject_control(x, cond)
        x = x + self.cross_attn(self.norm3(x), text, cross)
        y = self.ffn(_modulate(layer_norm(x, self.eps), e[3], e[4]))
        return x + y * e[5]


class FastHead(nn.Module):
    def __init__(self, cfg: FastDiTConfig):
        super().__init__()
        self.eps = cfg.eps
        self.modulation = nn.Parameter(torch.zeros(1, 2, cfg.dim))
        self.head = nn.Linear(cfg.dim, math.prod(cfg.patch_size) * cfg.out_dim)

    def forward(self, x, e):
        shift, scale = (self.modulation.unsqueeze(0) + e.unsqueeze(2)).chunk(2, dim=2)   # [B, L, 1, C]
        return self.head(_modulate(layer_norm(x, self.eps), shift.squeeze(2), scale.squeeze(2)))


class WanModelFast(nn.Module):
    def __init__(self, cfg: FastDiTConfig):
        super().__init__()
        self.cfg = cfg
        dim = cfg.dim
        self.patch_embedding = nn.Conv3d(cfg.in_dim, dim, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.text_embedding = nn.Sequential(nn.Linear(cfg.text_dim, dim), nn.GELU(approximate="tanh"),
                                            nn.Linear(dim, dim))
        self.time_embedding = nn.Sequential(nn.Linear(cfg.freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        self.patch_embedding_wancamctrl = nn.Linear(cfg.control_in_features, dim)
        self.c2ws_hidden_states_layer1 = nn.Linear(dim, dim)
        self.c2ws_hidden_states_layer2 = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(FastBlock(cfg) for _ in range(cfg.num_layers))
        self.head = FastHead(cfg)
        self.rope = DiTRope(cfg.head_dim, cfg.rope_split, cfg.rope_theta)    # not in the state dict

    def embed_text(self, context: torch.Tensor) -> torch.Tensor:
        """Text encoder output [B, n <= text_len, text_dim] -> [B, text_len, dim] (zero rows appended)."""
        assert context.shape[1] <= self.cfg.text_len, (context.shape, self.cfg.text_len)
        padded = F.pad(context, (0, 0, 0, self.cfg.text_len - context.shape[1]))
        return self.text_embedding(padded.to(self.patch_embedding.weight.dtype))

    def control_tokens(self, control: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """Control [B, C*64, F, h, w] -> [B, L, C*64*prod(patch)] (index: channel, then patch offsets)."""
        b, ch = control.shape[:2]
        (f, hh, ww), (pt, ph, pw) = grid, self.cfg.patch_size
        x = control.reshape(b, ch, f, pt, hh, ph, ww, pw)
        x = torch.einsum("bcfthpwq->bfhwctpq", x)
        return x.reshape(b, f * hh * ww, ch * pt * ph * pw)

    def control_condition(self, control: torch.Tensor, grid) -> torch.Tensor:
        """The camera / action condition every block injects: P + MLP(P), P the projected patches."""
        p = self.patch_embedding_wancamctrl(self.control_tokens(control, grid))
        return p + self.c2ws_hidden_states_layer2(F.silu(self.c2ws_hidden_states_layer1(p)))

    def time_embeddings(self, t: torch.Tensor, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """t [B] -> (e [B, L, C], e0 [B, L, 6, C]) with the timestep broadcast to every token."""
        b = t.shape[0]
        sinus = sinusoidal_embedding(self.cfg.freq_dim, t.reshape(b, 1).expand(b, tokens).flatten())
        e = self.time_embedding(sinus.unflatten(0, (b, tokens)).to(self.patch_embedding.weight.dtype))
        e0 = self.time_projection(e).unflatten(2, (6, self.cfg.dim))
        return e, e0

    @torch.no_grad()
    def forward(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor, y: torch.Tensor,
                control: torch.Tensor, caches: FastCaches, current_start: int,
                frame_seqlen: int) -> torch.Tensor:
        """x [B, out_dim, F, h, w], t [B], context [B, n, text_dim], y [B, in_dim - out_dim, F, h, w],
        control [B, control_dim*64, F, h, w] -> flow velocity [B, out_dim, F, h, w].

        ``current_start`` is the token offset of the chunk (absolute latent frame
        ``current_start // frame_seqlen``); the forward writes the chunk's K/V into ``caches``.
        """
        dtype = self.patch_embedding.weight.dtype
        h = self.patch_embedding(torch.cat([x, y], dim=1).to(dtype))     # [B, C, F, h', w']
        grid = tuple(h.shape[2:])
        assert frame_seqlen == grid[1] * grid[2], (frame_seqlen, grid)
        h = h.flatten(2).transpose(1, 2)                                  # [B, L, C]
        e, e0 = self.time_embeddings(t.to(h.device), h.shape[1])
        cond = self.control_condition(control.to(dtype), grid)
        text = None if caches.cross[0].is_init else self.embed_text(context)
        start_frame = current_start // frame_seqlen
        for block, kv, cross in zip(blocks_in_order(self.blocks), caches.self_kv, caches.cross, strict=True):
            h = block(h, e0, cond, text, grid, start_frame, self.rope, kv, cross, current_start)
        return self.unpatchify(self.head(h, e), grid)

    def unpatchify(self, x: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """[B, L, pt*ph*pw*c] (channel fastest) -> [B, c, F*pt, h'*ph, w'*pw]."""
        c, (pt, ph, pw) = self.cfg.out_dim, self.cfg.patch_size
        f, hh, ww = grid
        x = x.reshape(x.shape[0], f, hh, ww, pt, ph, pw, c)
        x = torch.einsum("bfhwtpqc->bcfthpwq", x)
        return x.reshape(x.shape[0], c, f * pt, hh * ph, ww * pw)

