"""PSNR and SSIM on images whose values are known in closed form."""
from __future__ import annotations

import math

import pytest
import torch

from engine.metrics import PSNR_CAP_DB, paired_gain, psnr, ssim


def test_psnr_of_a_constant_offset():
    a = torch.zeros(2, 3, 16, 24)
    b = a + 0.1                                      # MSE 0.01 over a range of 2: 10 log10(4 / 0.01)
    assert torch.allclose(psnr(a, b), torch.full((2,), 10 * math.log10(400.0)))
    assert psnr(a, a).tolist() == [PSNR_CAP_DB, PSNR_CAP_DB]


def test_ssim_identity_and_known_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 3, 32, 32, generator=g) * 2 - 1
    assert torch.allclose(ssim(x, x), torch.ones(3), atol=1e-6)
    # Two constant images: SSIM = (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1) (the variance terms cancel).
    a, b = torch.full((1, 3, 20, 20), -0.5), torch.full((1, 3, 20, 20), 0.5)     # intensities 0.25, 0.75
    mx, my, c1 = 0.25, 0.75, 0.01 ** 2
    expected = (2 * mx * my + c1) / (mx ** 2 + my ** 2 + c1)
    assert ssim(a, b).item() == pytest.approx(expected, rel=1e-5)
    # An inverted image is anti-correlated: SSIM well below zero.
    assert ssim(x, -x).mean() < -0.5
    # Noise lowers SSIM monotonically.
    n = torch.randn(x.shape, generator=g)
    s1, s2 = ssim(x, x + 0.05 * n).mean(), ssim(x, x + 0.3 * n).mean()
    assert 1 > s1 > s2


def test_ssim_keeps_leading_dimensions():
    x = torch.rand(2, 4, 3, 16, 16) * 2 - 1
    assert ssim(x, x).shape == (2, 4) and psnr(x, x).shape == (2, 4)


def test_paired_gain():
    g = paired_gain([3.0, 4.0, 5.0], [1.0, 1.0, 6.0])
    assert g["gain_db"] == pytest.approx(4 / 3) and g["improved"] == 2 and g["episodes"] == 3
    assert g["se_db"] == pytest.approx(torch.tensor([2.0, 3.0, -1.0], dtype=torch.float64).std().item() / math.sqrt(3))
