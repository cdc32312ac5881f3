"""Error-bound helpers shared by the kernel tests (the bound is stated in engine.kernels.reference)."""
from __future__ import annotations

import torch

EPS32 = 2.0 ** -23


def group_bound(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-element bound for groups along the last axis of ``x [..., N]``; scale/zero ``[..., 1]``.

    scale/2 (rounding) + |mn - zero| and qmax·|scale - exact scale| (fp16 metadata rounding, which the
    clamp turns into error at the ends of the range) + 4 fp32 ulps of the largest magnitude involved.
    """
    qmax = 2 ** bits - 1
    xd = x.double()
    mn = xd.amin(-1, keepdim=True)
    mx = xd.amax(-1, keepdim=True)
    s, z = scale.double(), zero.double()
    big = torch.maximum(xd.abs().amax(-1, keepdim=True), z.abs() + qmax * s)
    return s / 2 + (mn - z).abs() + qmax * (s - (mx - mn) / qmax).abs() + 4 * EPS32 * big


def key_error_ok(x: torch.Tensor, dq: torch.Tensor, scale, zero, bits: int) -> bool:
    """Keys: groups are channels, so transpose ``[T, C]`` to ``[C, T]``."""
    err = (dq.double() - x.double()).abs().T
    return bool((err <= group_bound(x.T, scale[:, None], zero[:, None], bits)).all())


def value_error_ok(x: torch.Tensor, dq: torch.Tensor, scale, zero, bits: int, group: int) -> bool:
    t, c = x.shape
    xg = x.reshape(t, c // group, group)
    err = (dq.double() - x.double()).abs().reshape(t, c // group, group)
    return bool((err <= group_bound(xg, scale[..., None], zero[..., None], bits)).all())


def rel_rms(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((y.double() - x.double()).pow(2).mean() / x.double().pow(2).mean()).sqrt().item()


ORDER_BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in units in the last place (same-dtype floats, finite)."""
    def ordered(t):
        i = t.view(ORDER_BITS[t.dtype]).long()
        top = 1 << (8 * t.element_size() - 1)
        return torch.where(i < 0, -(i + top), i)     # sign-magnitude → monotonic integers
    return int((ordered(a) - ordered(b)).abs().max()) if a.numel() else 0


def hard_input(t: int, c: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, c, generator=g) * 2 + 0.3                  # [T, C]
    x[:, 1] = 0.7                                                 # constant channel: scale 0 → 1
    x[:, 2] = 1e-3 + torch.arange(t) * 1e-9                       # scale underflows fp16 → 1
    x[:, 3] = torch.arange(t) % 16                                # integer grid: exact ties at int4
    x[0, 4], x[-1, 4] = -70000.0, 70000.0                         # beyond fp16: saturated metadata
    x[:, 5] = torch.randn(t, generator=g) * 1e-6                  # fp16-subnormal scale and zero
    x[:, 6] = torch.rand(t, generator=g)                          # minimum of both signed zeros
    x[::2, 6] = -0.0
    x[1::4, 6] = 0.0
    if c >= 128:                                                  # a value group whose minimum is ±0
        x[0, 64:128] = torch.rand(64, generator=g)
        x[0, 64:128:3] = 0.0
        x[0, 65:128:5] = -0.0
    return x.to(dtype)
