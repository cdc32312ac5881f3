"""Retention as the paper defines it, with a seeded bootstrap interval over episodes.

Owns the statistics of ``worldpager bench quality``. Retention of an arm is the share of the bf16
memory's gain over window-only that the arm keeps: ``mean(arm - window) / mean(bf16 - window)`` over
the same episodes (paired). With ``weights`` (an episode's frame count) the means are weighted, so that
per-episode means ``x_e`` of ``n_e`` frames give the mean pooled over frames, ``sum n_e x_e / sum n_e``:
every frame weighs the same, whatever its episode. The interval resamples *episodes* with replacement
(``draws`` times, a seeded generator; the pooled means recomputed from the drawn episodes' frames) and
takes the 2.5 and 97.5 percentiles. A paired difference (e.g. memory's gain over window-only, or the
stale-set fallback's cost) gets the same bootstrap interval. Below ``min_episodes`` episodes (8) no
interval is given (``None``): a bootstrap over a handful of episodes describes those episodes only.
"""
from __future__ import annotations

import numpy as np

DRAWS = 2000
MIN_EPISODES = 8


def _interval(values: np.ndarray) -> list[float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return [float(lo), float(hi)]


def _weights(weights, n: int) -> np.ndarray:
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or (w < 0).any():
        raise ValueError(f"weights of shape {w.shape} for {n} episodes: want one count >= 0 each")
    return w


def _draws(n: int, draws: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(draws, n))


def _wmean(x: np.ndarray, w: np.ndarray, idx: np.ndarray | None = None):
    if idx is None:
        return float((w * x).sum() / w.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        return (w[idx] * x[idx]).sum(1) / w[idx].sum(1)


def retention(arm: list[float], bf16: list[float], window: list[float], draws: int = DRAWS, seed: int = 0, *,
              weights: list[float] | None = None, min_episodes: int = MIN_EPISODES) -> dict:
    """Retention in % of ``arm`` (per-episode scores paired with ``bf16`` and ``window``)."""
    a, b, w = (np.asarray(x, dtype=np.float64) for x in (arm, bf16, window))
    assert a.shape == b.shape == w.shape and a.ndim == 1, (a.shape, b.shape, w.shape)
    n = len(a)
    if n == 0:
        return {"retention_pct": None, "ci_pct": None, "episodes": 0}
    wt = _weights(weights, n)
    ga, gb = a - w, b - w
    ci = None
    if n >= min_episodes:
        idx = _draws(n, draws, seed)
        with np.errstate(divide="ignore", invalid="ignore"):
            boot = 100 * _wmean(ga, wt, idx) / _wmean(gb, wt, idx)
        ci = _interval(boot[np.isfinite(boot)])
    gain, ref = _wmean(ga, wt), _wmean(gb, wt)
    return {"retention_pct": 100 * gain / ref if ref else None, "ci_pct": ci,
            "gain_db": gain, "bf16_gain_db": ref, "episodes": n}


def paired_difference(a: list[float], b: list[float], draws: int = DRAWS, seed: int = 0, *,
                      weights: list[float] | None = None, min_episodes: int = MIN_EPISODES) -> dict:
    """Mean of ``a - b`` (weighted by ``weights``) with its bootstrap interval over the pairs."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if len(d) == 0:
        return {"mean": None, "ci": None, "pairs": 0}
    wt = _weights(weights, len(d))
    ci = _interval(_wmean(d, wt, _draws(len(d), draws, seed))) if len(d) >= min_episodes else None
    return {"mean": _wmean(d, wt), "ci": ci, "pairs": int(len(d))}


def shown(ci: list[float] | None, episodes: int, digits: int = 2, sign: str = "") -> str:
    """An interval as printed: ``[lo, hi]``, or ``n/a (N episodes)`` where none was given."""
    if ci is None:
        return f"n/a ({episodes} episode{'s' if episodes != 1 else ''})"
    return f"[{ci[0]:{sign}.{digits}f}, {ci[1]:{sign}.{digits}f}]"
