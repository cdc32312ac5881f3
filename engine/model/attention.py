"""The one attention entry point of the model code.

Owns the tensor layout convention [B, L, H, D] at the model boundary and the call into PyTorch's
scaled-dot-product attention (flash / memory-efficient kernels on CUDA, math on CPU). No masks: MG2's
cached inference attends each chunk to its whole context.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [B, Lq, H, D], k/v [B, Lk, H, D] -> [B, Lq, H, D]; softmax scale 1/sqrt(D)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)
