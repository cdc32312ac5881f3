"""The figures of ``bench quality --walk``, pooled over frames, from its per-session rows (numpy only).

Owns the summary of the walk rows (``engine.quality.walk_score``: per bin of video and per class of
frame, sums and counts). An **episode** is one seed's walk of one kind. Rows with and without the
observed look-around are summarised apart (``settings``). Per setting, arm and class: PSNR, SSIM,
sharpness (sum of the frames' detail over the truth's), self-consistency (PSNR against the session's
own frame at the matched earlier view) beside the truth's own PSNR between the same two views; each
**pooled over frames** (the sums of every episode over their counts) with its 95 % interval resampling
whole episodes (``long_summary.pooled``: from ``MIN_EPISODES`` episodes on). Memory's gain over
window-only per class is the per-episode difference weighted by frames (``retention.paired_difference``).
Retrieval misses per minute: the misses of every chunk over the minutes of video, pooled the same way.
Per bin of video and per kind of walk, the same figures without intervals for the figure and the table.
"""
from __future__ import annotations

import numpy as np

from engine.quality.long_summary import pooled
from engine.quality.retention import paired_difference
from engine.quality.walk_classes import CLASSES

REFERENCE = "window"
# (name, numerator, denominator) of a class's sums
FIGURES = (("psnr", "psnr", "frames"), ("ssim", "ssim", "frames"), ("sharpness", "detail", "detail_truth"),
           ("self_consistency", "psnr_first", "first_frames"), ("truth_consistency", "psnr_first_truth",
                                                                  "first_frames"))


def _sum(row: dict, cls: str, key: str, bins=None) -> float:
    chosen = row["bins"] if bins is None else [row["bins"][b] for b in bins if b < len(row["bins"])]
    return float(sum(b["classes"][cls][key] for b in chosen))


def _pair(rows: list[dict], cls: str, name: str, bins=None) -> tuple[np.ndarray, np.ndarray]:
    _, num, den = next(f for f in FIGURES if f[0] == name)
    return (np.array([_sum(r, cls, num, bins) for r in rows]), np.array([_sum(r, cls, den, bins) for r in rows]))


def figure(rows: list[dict], cls: str, name: str, bins=None) -> dict:
    return pooled(*_pair(rows, cls, name, bins))


def misses_per_minute(rows: list[dict], bins=None) -> dict:
    chosen = [list(range(len(r["bins"]))) if bins is None else [b for b in bins if b < len(r["bins"])] for r in rows]
    misses = np.array([sum(r["bins"][b]["misses"] for b in c) for r, c in zip(rows, chosen)], dtype=np.float64)
    minutes = np.array([len(c) * r["bin_s"] / 60.0 for r, c in zip(rows, chosen)])
    last = [c and c[-1] == len(r["bins"]) - 1 for r, c in zip(rows, chosen)]       # the last bin holds the rest
    minutes += np.array([(r["frames"] / r["fps"] - len(r["bins"]) * r["bin_s"]) / 60.0 if t else 0.0
                         for r, t in zip(rows, last)])
    return pooled(misses, minutes)


def gain(mine: list[dict], ref: list[dict], cls: str, name: str = "psnr") -> dict:
    a, da = _pair(mine, cls, name)
    b, db = _pair(ref, cls, name)
    ok = (da > 0) & (db > 0)
    if not ok.any():
        return {"mean": None, "ci": None, "pairs": 0}
    return paired_difference(a[ok] / da[ok], b[ok] / db[ok], weights=da[ok])


def _episode(row: dict) -> tuple:
    return (row["seed"], row["kind"])


def _setting(rows: list[dict]) -> dict:
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    common = set.intersection(*({_episode(r) for r in rows if r["arm"] == a} for a in arms))
    rows = [r for r in rows if _episode(r) in common]
    by_arm = {a: sorted((r for r in rows if r["arm"] == a), key=_episode) for a in arms}
    n_bins = min(len(r["bins"]) for r in rows)
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    per_arm = {}
    for arm, mine in by_arm.items():
        per_arm[arm] = {
            "classes": {c: {n: figure(mine, c, n) for n, _, _ in FIGURES} | {"frames": int(_pair(mine, c, "psnr")[1].sum())}
                        for c in CLASSES},
            "bins": [{c: {n: figure(mine, c, n, [b]) for n in ("psnr", "sharpness", "self_consistency")}
                      for c in CLASSES} | {"misses_per_minute": misses_per_minute(mine, [b])} for b in range(n_bins)],
            "kinds": {k: {c: figure([r for r in mine if r["kind"] == k], c, "psnr") for c in CLASSES} for k in kinds},
            "misses_per_minute": misses_per_minute(mine),
            **{k: int(sum(r.get(k, 0) for r in mine)) for k in ("hits", "misses", "stale")},
        }
    gains = {}
    if REFERENCE in by_arm:
        for arm, mine in by_arm.items():
            if arm != REFERENCE:
                gains[arm] = {c: {n: gain(mine, by_arm[REFERENCE], c, n) for n in ("psnr", "self_consistency")}
                              for c in CLASSES}
    first = rows[0]
    return {"episodes": len(common), "arms": arms, "kinds": kinds, "bins": n_bins, "bin_s": first["bin_s"],
            "minutes": first["frames"] / first["fps"] / 60.0, "chunks": first["chunks"],
            "observed_chunks": first["observed_chunks"], "per_arm": per_arm, "gain_over_window": gains}


def summarise_walk(rows: list[dict]) -> dict:
    """Per setting (``look_around`` / ``no_look_around``), the figures of the module docstring."""
    settings = {}
    for name, look in (("look_around", True), ("no_look_around", False)):
        mine = [r for r in rows if bool(r["look_around"]) == look]
        if mine:
            settings[name] = _setting(mine)
    return {"settings": settings, "classes": list(CLASSES),
            "arena_seeds": sorted({r["arena_seed"] for r in rows}),
            "smoke_test": any(r.get("smoke_test") for r in rows)}
