"""MG2's keyboard/mouse action module (the blocks listed in ``ActionConfig.blocks``).

Owns the action-window rule and the two residual branches, in the order MG2 applies them:

* window rule: latent frame j sees the ``window_frames`` (12) per-video-frame actions with indices
  ``4j-12 .. 4j-1``; indices below 0 repeat action frame 0.
* mouse branch: every spatial token gets [its hidden state ; its frame's flattened mouse window],
  an MLP, q/k/v over 64-wide heads, a parameter-free RMS norm on q and k, the 1D action RoPE, and
  attention along time (one sequence per spatial token) over the rolling window + current frames.
* keyboard branch: an embedding of each action frame, windows flattened to one key/value per latent
  frame, queries from the tokens, the same norm and RoPE, and attention along time.

The q/k norms carry weights in the checkpoint that MG2's forward never applies: they are parameters
here (so strict loading sees them) and are deliberately unused.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from engine.config import ActionConfig
from engine.model.attention import attention
from engine.model.mg2_context import RollingKV
from engine.model.rope import ActionRope


def rms_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Parameter-free RMS norm in the input dtype (MG2's action-module norm ignores its weight)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


class UnusedNorm(nn.Module):
    """Holds a checkpoint norm weight that the MG2 forward never multiplies in."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


def first_window_frame(start_frame: int, cfg: ActionConfig) -> int:
    """The earliest video frame whose action the windows of latent ``start_frame`` onwards read."""
    return max(0, cfg.vae_time_compression_ratio * start_frame - cfg.window_frames)


def action_windows(actions: torch.Tensor, start_frame: int, frames: int, cfg: ActionConfig,
                   offset: int = 0) -> torch.Tensor:
    """Per-latent-frame windows [B, frames, window_frames, C] of per-video-frame actions.

    ``actions`` [B, T, C] holds video frames [offset, offset + T); offset 0 or at most
    ``first_window_frame(start_frame)``.
    """
    ratio, width = cfg.vae_time_compression_ratio, cfg.window_frames
    latents = torch.arange(start_frame, start_frame + frames, device=actions.device)
    offsets = torch.arange(width, device=actions.device) - width
    index = (ratio * latents[:, None] + offsets[None, :]).clamp(min=0) - offset  # [frames, width]
    assert int(index.min()) >= 0, f"actions start at video frame {offset}, windows need {offset + int(index.min())}"
    assert int(index.max()) < actions.shape[1], (
        f"actions cover {actions.shape[1]} video frames, chunk needs index {int(index.max())}")
    return actions[:, index]


class ActionModule(nn.Module):
    def __init__(self, cfg: ActionConfig, dim: int):
        super().__init__()
        self.cfg = cfg
        self.rope = ActionRope(cfg.rope_dim_list, cfg.rope_theta)
        window = cfg.window_frames
        if cfg.enable_keyboard:
            self.keyboard_embed = nn.Sequential(
                nn.Linear(cfg.keyboard_dim_in, cfg.hidden_size), nn.SiLU(),
                nn.Linear(cfg.hidden_size, cfg.hidden_size))
            head_dim_key = cfg.keyboard_hidden_dim // cfg.heads_num
            self.key_attn_q_norm = UnusedNorm(head_dim_key)
            self.key_attn_k_norm = UnusedNorm(head_dim_key)
            self.mouse_attn_q = nn.Linear(dim, cfg.keyboard_hidden_dim, bias=cfg.qkv_bias)
            self.keyboard_attn_kv = nn.Linear(cfg.hidden_size * window, 2 * cfg.keyboard_hidden_dim,
                                              bias=cfg.qkv_bias)
            self.proj_keyboard = nn.Linear(cfg.keyboard_hidden_dim, dim, bias=cfg.qkv_bias)
        if cfg.enable_mouse:
            c = cfg.mouse_hidden_dim
            self.mouse_mlp = nn.Sequential(
                nn.Linear(cfg.mouse_dim_in * window + dim, c), nn.GELU(approximate="tanh"),
                nn.Linear(c, c), nn.LayerNorm(c))
            self.t_qkv = nn.Linear(c, 3 * c, bias=cfg.qkv_bias)
            self.img_attn_q_norm = UnusedNorm(c // cfg.heads_num)
            self.img_attn_k_norm = UnusedNorm(c // cfg.heads_num)
            self.proj_mouse = nn.Linear(c, dim, bias=cfg.qkv_bias)

    def forward(self, x: torch.Tensor, frames: int, start_frame: int,
                keyboard: torch.Tensor | None, mouse: torch.Tensor | None,
                keyboard_kv: RollingKV | None, mouse_kv: RollingKV | None,
                action_offset: int = 0) -> torch.Tensor:
        """x [B, frames*S, C] -> same; keyboard [B, T, kdim], mouse [B, T, mdim] per video frame,
        holding video frames [action_offset, action_offset + T)."""
        if self.cfg.enable_mouse:
            x = x + self._mouse_branch(x, frames, start_frame, mouse, mouse_kv, action_offset)
        if self.cfg.enable_keyboard:
            x = x + self._keyboard_branch(x, frames, start_frame, keyboard, keyboard_kv, action_offset)
        return x

    def _mouse_branch(self, x, frames, start_frame, mouse, rolling, offset):
        b, length, c = x.shape
        s = length // frames
        heads = self.cfg.heads_num
        tokens = x.view(b, frames, s, c).transpose(1, 2).reshape(b * s, frames, c)   # [(B S), F, C]
        win = action_windows(mouse, start_frame, frames, self.cfg, offset).flatten(2)  # [B, F, 12*m]
        win = win[:, None].expand(b, s, frames, win.shape[-1]).reshape(b * s, frames, -1)
        h = self.mouse_mlp(torch.cat([tokens, win.to(tokens.dtype)], dim=-1))
        q, k, v = self.t_qkv(h).unflatten(-1, (3, heads, -1)).unbind(2)           # [(B S), F, H, D]
        q = self.rope.apply(rms_normalise(q).to(v.dtype), start_frame)
        k = self.rope.apply(rms_normalise(k).to(v.dtype), start_frame)
        k_all, v_all = rolling.context(k, v)
        out = attention(q, k_all, v_all)                                          # [(B S), F, H, D]
        out = out.reshape(b, s, frames, -1).transpose(1, 2).reshape(b, frames * s, -1)
        return self.proj_mouse(out)

    def _keyboard_branch(self, x, frames, start_frame, keyboard, rolling, offset):
        b, length, _ = x.shape
        s = length // frames
        heads = self.cfg.heads_num
        emb = self.keyboard_embed(keyboard.to(x.dtype))                            # [B, T, hidden]
        win = action_windows(emb, start_frame, frames, self.cfg, offset).flatten(2)  # [B, F, 12*hidden]
        k, v = self.keyboard_attn_kv(win).unflatten(-1, (2, heads, -1)).unbind(2)  # [B, F, H, D]
        q = self.mouse_attn_q(x).unflatten(-1, (heads, -1))                        # [B, F*S, H, D]
        q = rms_normalise(q).to(v.dtype)
        k = rms_normalise(k).to(v.dtype)
        # Every token of a frame shares the frame's keyboard keys, so queries of one token form one
        # sequence [(B S), F] for the RoPE positions, then attend over the shared keys.
        q = q.view(b, frames, s, heads, -1).transpose(1, 2).reshape(b * s, frames, heads, -1)
        q = self.rope.apply(q, start_frame)
        k = self.rope.apply(k, start_frame)
        k_all, v_all = rolling.context(k, v)
        # No mask, identical keys for all tokens: one attention over [B, S*F] queries suffices.
        out = attention(q.reshape(b, s * frames, heads, -1), k_all, v_all)          # [B, S*F, H, D]
        out = out.view(b, s, frames, -1).transpose(1, 2).reshape(b, frames * s, -1)
        return self.proj_keyboard(out)
