"""Image-quality metrics of generated frames against the truth: PSNR and SSIM, in torch, and paired
statistics of per-episode gains.

Contract: frames are float tensors ``[..., 3, H, W]`` in [-1, 1] (the models' pixel range); both
metrics are computed per frame (leading dimensions kept). PSNR uses the peak-to-peak range 2, i.e.
``10 log10(4 / MSE)``. SSIM is Wang et al. (2004) on [0, 1] intensities with an 11-tap Gaussian window
(sigma 1.5), K1 = 0.01, K2 = 0.03, valid-region filtering, float64 arithmetic, averaged over channels and pixels — the usual
definition, with no extra weights to download.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

PSNR_CAP_DB = 100.0          # identical frames (and any closer than this): reported as this, not infinity
                             # or a float rounding's 150 dB, so that exact copies weigh alike in a mean


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-frame PSNR in dB of frames in [-1, 1]."""
    mse = (a.float() - b.float()).pow(2).flatten(-3).mean(-1)
    return (10 * torch.log10(4.0 / mse.clamp_min(1e-20))).clamp_max(PSNR_CAP_DB)


def _gaussian(size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-x ** 2 / (2 * sigma ** 2))
    return g / g.sum()


def ssim(a: torch.Tensor, b: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Per-frame SSIM of frames in [-1, 1] (computed on [0, 1] intensities)."""
    lead = a.shape[:-3]
    # float64: the variance terms are differences of near-equal sums
    x = ((a.double() + 1) / 2).reshape(-1, *a.shape[-3:])
    y = ((b.double() + 1) / 2).reshape(-1, *b.shape[-3:])
    c = x.shape[1]
    g = _gaussian(window, sigma).to(x.device)
    kernel_h = g.view(1, 1, 1, -1).repeat(c, 1, 1, 1)
    kernel_v = g.view(1, 1, -1, 1).repeat(c, 1, 1, 1)

    def blur(t):
        return F.conv2d(F.conv2d(t, kernel_h, groups=c), kernel_v, groups=c)

    mu_x, mu_y = blur(x), blur(y)
    sxx = blur(x * x) - mu_x ** 2
    syy = blur(y * y) - mu_y ** 2
    sxy = blur(x * y) - mu_x * mu_y
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    s = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x ** 2 + mu_y ** 2 + c1) * (sxx + syy + c2))
    return s.flatten(1).mean(1).reshape(lead).float()


def paired_gain(with_: list[float], without: list[float]) -> dict:
    """Mean paired difference, its standard error, and how many pairs improved."""
    d = torch.tensor(with_, dtype=torch.float64) - torch.tensor(without, dtype=torch.float64)
    n = len(d)
    se = float(d.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    return {"gain_db": float(d.mean()) if n else float("nan"), "se_db": se,
            "improved": int((d > 0).sum()), "episodes": n}
