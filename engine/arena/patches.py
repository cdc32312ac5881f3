"""Frames <-> patch tokens of the arena model: ``patchify`` and its inverse ``unpatchify`` (row-major
patches, channels then rows then columns inside a patch)."""
from __future__ import annotations

import torch


def patchify(frames: torch.Tensor, p: int) -> torch.Tensor:
    """``[..., 3, H, W]`` -> tokens ``[..., (H/p)(W/p), 3 p p]`` (row-major patches)."""
    *lead, c, h, w = frames.shape
    x = frames.reshape(*lead, c, h // p, p, w // p, p)
    n = len(lead)
    x = x.permute(*range(n), n + 1, n + 3, n, n + 2, n + 4)             # [..., rows, cols, c, p, p]
    return x.reshape(*lead, (h // p) * (w // p), c * p * p)


def unpatchify(tokens: torch.Tensor, p: int, h: int, w: int) -> torch.Tensor:
    """Tokens ``[..., (H/p)(W/p), 3 p p]`` -> frames ``[..., 3, H, W]``."""
    *lead, n_tok, d = tokens.shape
    n = len(lead)
    x = tokens.reshape(*lead, h // p, w // p, 3, p, p)
    x = x.permute(*range(n), n + 2, n, n + 3, n + 1, n + 4)             # [..., c, rows, p, cols, p]
    return x.reshape(*lead, 3, h, w)
