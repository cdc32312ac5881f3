"""Retention as the paper defines it, with a seeded bootstrap interval over episodes.

Owns the statistics of ``worldpager bench quality``. Retention of an arm is the share of the bf16
memory's gain over window-only that the arm keeps: ``mean(arm - window) / mean(bf16 - window)`` over
the same episodes (paired). Its interval resamples episodes with replacement (``draws`` times, a
seeded generator) and takes the 2.5 and 97.5 percentiles of the ratio. A paired difference (e.g. the
stale-set fallback's cost: prefetch minus sync) gets the same bootstrap interval.
"""
from __future__ import annotations

import numpy as np

DRAWS = 2000


def _interval(values: np.ndarray) -> tuple[float, float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def retention(arm: list[float], bf16: list[float], window: list[float], draws: int = DRAWS,
              seed: int = 0) -> dict:
    """Retention in % of ``arm`` (per-episode scores paired with ``bf16`` and ``window``)."""
    a, b, w = (np.asarray(x, dtype=np.float64) for x in (arm, bf16, window))
    assert a.shape == b.shape == w.shape and a.ndim == 1, (a.shape, b.shape, w.shape)
    n = len(a)
    if n == 0:
        return {"retention_pct": float("nan"), "ci_pct": [float("nan")] * 2, "episodes": 0}
    ga, gb = a - w, b - w
    idx = np.random.default_rng(seed).integers(0, n, size=(draws, n))
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = 100 * ga[idx].mean(1) / gb[idx].mean(1)
    boot = boot[np.isfinite(boot)]
    return {"retention_pct": float(100 * ga.mean() / gb.mean()), "ci_pct": list(_interval(boot)),
            "gain_db": float(ga.mean()), "bf16_gain_db": float(gb.mean()), "episodes": n}


def paired_difference(a: list[float], b: list[float], draws: int = DRAWS, seed: int = 0) -> dict:
    """Mean of ``a - b`` with its bootstrap interval over the pairs."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) == 0:
        return {"mean": float("nan"), "ci": [float("nan")] * 2, "pairs": 0}
    idx = np.random.default_rng(seed).integers(0, len(d), size=(draws, len(d)))
    return {"mean": float(d.mean()), "ci": list(_interval(d[idx].mean(1))), "pairs": int(len(d))}
