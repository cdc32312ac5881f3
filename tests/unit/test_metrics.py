"""PSNR and SSIM on images whose values are known in closed form."""
from __future__ import annotations

import math

import pytest
import torch

from engine.quality.metrics import PSNR_CAP_DB, paired_gain, psnr, ssim


def test_psnr_of_a_constant_offset():
    a = torch.zeros(2, 3, 16, 24)
    b = a + 0.1                                      # MSE 0.01 over a range of 2: 10 log10(4 / 0.01)
    assert torch.allclose(psnr(a, b), torch.full((2,), 10 * math.log10(400.0)))
    assert psnr(a, a).tolist() == [PSNR_CAP_DB, PSNR_CAP_DB]
    assert psnr(a, a + 1e-7).tolist() == [PSNR_CAP_DB, PSNR_CAP_DB]     # a float rounding apart: capped alike


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


def test_psnr_of_known_images():
    checker = (torch.arange(16).view(4, 4) % 2 * 2 - 1).float().expand(1, 3, 4, 4)   # -1 / +1 squares
    assert psnr(checker, -checker).item() == pytest.approx(0.0, abs=1e-6)          # MSE 4 over a range of 2
    half = checker.clone()
    half[..., :2, :] = -half[..., :2, :]                                            # half the pixels off by 2
    assert psnr(checker, half).item() == pytest.approx(10 * math.log10(4 / 2.0), rel=1e-6)
    frames = torch.stack([checker[0], -checker[0]])
    assert psnr(frames, checker.expand(2, 3, 4, 4)).tolist() == [PSNR_CAP_DB, pytest.approx(0.0, abs=1e-6)]


def _ssim_by_windows(x, y, size=11, sigma=1.5):
    """SSIM written out window by window (Wang et al. 2004), for [0, 1] images [C, H, W], float64."""
    ax = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-ax ** 2 / (2 * sigma ** 2))
    w = torch.outer(g, g) / torch.outer(g, g).sum()
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    values = []
    for c in range(x.shape[0]):
        for i in range(x.shape[1] - size + 1):
            for j in range(x.shape[2] - size + 1):
                px, py = x[c, i:i + size, j:j + size], y[c, i:i + size, j:j + size]
                mx, my = (w * px).sum(), (w * py).sum()
                vx, vy = (w * (px - mx) ** 2).sum(), (w * (py - my) ** 2).sum()
                cxy = (w * (px - mx) * (py - my)).sum()
                values.append((2 * mx * my + c1) * (2 * cxy + c2) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2)))
    return torch.stack(values).mean().item()


def test_ssim_matches_the_definition_window_by_window_on_a_structured_image():
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(18.0), indexing="ij")
    gradient = xx / 17
    stripes = (torch.sin(yy * 1.3) + 1) / 2
    x = torch.stack([gradient, stripes, gradient * stripes]).double()                  # [3, 16, 18] in [0, 1]
    y = (0.8 * x + 0.1 + 0.05 * torch.cos(xx + 2 * yy)).clamp(0, 1)                     # contrast, shift, ripple
    expected = _ssim_by_windows(x, y)
    got = ssim((x * 2 - 1)[None].float(), (y * 2 - 1)[None].float()).item()
    assert got == pytest.approx(expected, abs=1e-5) and 0.3 < expected < 0.99


def test_ssim_of_a_brightness_shift_is_its_luminance_term():
    # 11 x 11: one window. A uniform shift leaves the variances and the covariance equal, so SSIM is the
    # luminance term (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1) with mu_y = mu_x + the shift.
    x = torch.full((1, 3, 11, 11), -0.5)
    x[..., ::2, :] = 0.0                                               # rows of intensity 0.5 and 0.25
    g = torch.exp(-(torch.arange(11.0) - 5) ** 2 / (2 * 1.5 ** 2))
    g = g / g.sum()
    mx = float((g[::2].sum() * 0.5 + g[1::2].sum() * 0.25))           # the window's weighted mean
    my, c1 = mx + 0.2, 0.01 ** 2                                       # +0.4 in [-1, 1] is +0.2 in [0, 1]
    expected = (2 * mx * my + c1) / (mx ** 2 + my ** 2 + c1)
    assert ssim(x, x + 0.4).item() == pytest.approx(expected, rel=1e-5)
    assert expected < 0.95
