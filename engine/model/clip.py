"""CLIP ViT image tower as MG2 uses it: start image -> tokens for the DiT's image cross-attention.

Owns the preprocessing of the [-1, 1] start image (bicubic squash to a square, CLIP normalisation), the
vision transformer truncated after ``CLIPConfig.used_layers`` blocks (MG2 reads the residual stream one
block before the end: no last block, no ``post_norm``, no pooling, no ``head``), and the mapping between
the official CLIP checkpoint (``models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth``) and this
module's parameter names.

Parameter names equal the checkpoint's ``visual.*`` keys with ``visual.`` stripped, so a filtered state
dict loads strictly. Unused checkpoint keys (text tower, ``log_scale``, the last block(s), ``post_norm``,
``head``) are never allocated here; :func:`clip_visual_state_dict` and :func:`is_unused_checkpoint_key`
let the checkpoint loader account for them explicitly.
"""
from __future__ import annotations

import re
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import CLIPConfig

VISUAL_PREFIX = "visual."

# Keys of the visual tower that hold transformer blocks: "transformer.<index>.<rest>".
_BLOCK_KEY = re.compile(r"^transformer\.(\d+)(\.|$)")


def clip_visual_state_dict(full_state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The ``visual.*`` entries of the official CLIP state dict, with ``visual.`` stripped.

    The text tower (``textual.*``) and ``log_scale`` are dropped. Unused visual keys (see
    :func:`is_unused_checkpoint_key`) are kept, so the caller can check them before discarding them.
    """
    n = len(VISUAL_PREFIX)
    return {k[n:]: v for k, v in full_state_dict.items() if k.startswith(VISUAL_PREFIX)}


def is_unused_checkpoint_key(key: str, cfg: CLIPConfig) -> bool:
    """True for a visual-tower checkpoint key that this tower deliberately ignores.

    ``key`` may carry the ``visual.`` prefix or not (a stripped key never starts with ``visual.``, so
    both forms are unambiguous). Ignored: blocks ``>= cfg.used_layers`` (the official file has
    ``cfg.layers`` blocks), ``post_norm.*`` and ``head`` (plus ``head.*`` for pooling variants with a
    module head). Everything else -- including keys that belong to no CLIP tower at all, such as
    ``textual.*`` or ``log_scale`` -- returns False, so a strict loader reports them as unexpected
    unless it filtered them with :func:`clip_visual_state_dict` first.
    """
    if key.startswith(VISUAL_PREFIX):
        key = key[len(VISUAL_PREFIX):]
    block = _BLOCK_KEY.match(key)
    if block is not None:
        return int(block.group(1)) >= cfg.used_layers
    return key.startswith("post_norm.") or key == "head" or key.startswith("head.")


class _LayerNorm(nn.LayerNorm):
    """LayerNorm evaluated in float32 whatever the weight/activation dtype.

    The official tower upcasts every LayerNorm; with bf16 weights the statistics would otherwise be
    computed from bf16 values. A no-op for float32.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(),
                         self.eps)
        return y.to(x.dtype)


class _SelfAttention(nn.Module):
    """Bidirectional multi-head self-attention with a fused qkv projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        assert width % heads == 0, f"width {width} not divisible by heads {heads}"
        self.heads = heads
        self.to_qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, width = x.shape
        # to_qkv output channels are ordered (q/k/v, head, head_dim) in the checkpoint.
        qkv = self.to_qkv(x).view(b, length, 3, self.heads, width // self.heads)
        # q, k, v: [B, heads, L, head_dim] as SDPA wants; default scale 1/sqrt(head_dim), no mask.
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        # [B, heads, L, head_dim] -> [B, L, width] with channels (head, head_dim), as proj expects.
        return self.proj(out.transpose(1, 2).reshape(b, length, width))


class _Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1 x), then x + mlp(norm2 x)."""

    def __init__(self, cfg: CLIPConfig) -> None:
        super().__init__()
        hidden = cfg.width * cfg.mlp_ratio
        self.norm1 = _LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.attn = _SelfAttention(cfg.width, cfg.heads)
        self.norm2 = _LayerNorm(cfg.width, eps=cfg.norm_eps)
        # Indices 0 and 2 carry the weights (checkpoint keys mlp.0.*, mlp.2.*). ViT-H/14 uses the
        # exact erf GELU, not QuickGELU and not the tanh approximation.
        self.mlp = nn.Sequential(nn.Linear(cfg.width, hidden), nn.GELU(approximate="none"),
                                 nn.Linear(hidden, cfg.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CLIPVisionTower(nn.Module):
    """ViT image tower truncated after ``cfg.used_layers`` blocks.

    Parameters (names = checkpoint ``visual.*`` keys without the prefix):
      patch_embedding.weight  [width, 3, patch, patch]   conv, stride = patch, no bias
      cls_embedding           [1, 1, width]
      pos_embedding           [1, num_tokens, width]     row 0 belongs to the CLS token
      pre_norm.{weight,bias}  [width]
      transformer.{i}.*       i < used_layers only

    To skip the random init of a large tower before loading a checkpoint, construct it under
    ``torch.device("meta")`` and call ``to_empty(device=...)``: the module has no buffers.
    """

    def __init__(self, cfg: CLIPConfig) -> None:
        super().__init__()
        assert cfg.image_size % cfg.patch_size == 0, "image_size must be a multiple of patch_size"
        assert 0 < cfg.used_layers <= cfg.layers, f"used_layers {cfg.used_layers} vs layers {cfg.layers}"
        self.cfg = cfg
        w = cfg.width
        # Bias-free because the tower is pre-normed (pre_norm follows the embedding sum).
        self.patch_embedding = nn.Conv2d(3, w, kernel_size=cfg.patch_size, stride=cfg.patch_size,
                                         bias=False)
        self.cls_embedding = nn.Parameter(torch.zeros(1, 1, w))                 # [1, 1, W]
        self.pos_embedding = nn.Parameter(torch.zeros(1, cfg.num_tokens, w))    # [1, N, W]
        self.pre_norm = _LayerNorm(w, eps=cfg.norm_eps)
        # ModuleList indices give the checkpoint names transformer.{i}.*; only the blocks MG2 runs.
        self.transformer = nn.ModuleList(_Block(cfg) for _ in range(cfg.used_layers))

    def preprocess(self, image: torch.Tensor) -> torch.Tensor:
        """[-1, 1] image(s) -> CLIP pixel values [B*T, 3, S, S] float32 (S = image_size).

        ``image`` is [B, 3, H, W] or video-shaped [B, 3, T, H, W] (frames fold into the batch,
        batch-major, as the official ``encode_video`` does; MG2 passes T = 1). The resize squashes
        to a square (no crop), bicubic with a = -0.75, align_corners False, no antialias and no
        clamp of the overshoot: that is what the official code does, and the parity bound resolves
        each of these choices. Always computed in float32 so results do not depend on the input dtype.
        """
        if image.dim() == 5:
            b, c, t, h, w = image.shape
            image = image.transpose(1, 2).reshape(b * t, c, h, w)
        assert image.dim() == 4 and image.shape[1] == 3, f"expected [B,3,H,W], got {tuple(image.shape)}"
        s = self.cfg.image_size
        x = F.interpolate(image.float(), size=(s, s), mode="bicubic", align_corners=False,
                          antialias=False)                                      # [B, 3, S, S]
        x = x * 0.5 + 0.5
        # Same float32 constants and op order (subtract, then divide) as torchvision's Normalize.
        mean = torch.tensor(self.cfg.pixel_mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.cfg.pixel_std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixel values [B, 3, S, S] -> tokens [B, num_tokens, width] (CLS first, then patches
        row-major): the residual stream after block ``used_layers - 1``, no final norm."""
        s = self.cfg.image_size
        assert pixel_values.shape[1:] == (3, s, s), \
            f"expected [B,3,{s},{s}], got {tuple(pixel_values.shape)}"
        x = pixel_values.to(self.patch_embedding.weight.dtype)
        # Conv output [B, W, g, g] -> [B, g*g, W] with patches in row-major order.
        x = self.patch_embedding(x).flatten(2).transpose(1, 2)
        cls = self.cls_embedding.expand(x.shape[0], -1, -1)                     # [B, 1, W]
        x = torch.cat([cls, x], dim=1) + self.pos_embedding                     # [B, N, W]
        x = self.pre_norm(x)
        for block in self.transformer:
            x = block(x)
        return x

    @torch.no_grad()
    def encode(self, image: torch.Tensor) -> torch.Tensor:
        """[-1, 1] start image [B, 3, (T,) H, W] -> tokens [B*T, num_tokens, width]."""
        return self(self.preprocess(image))
