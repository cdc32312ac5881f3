"""The figures of ``bench quality --long``, pooled over frames, from its per-session rows (numpy only).

Owns the summary of the long rows (``engine.quality.long_score``: per bin of video, sums and frame
counts). Per arm and bin: PSNR and SSIM of every generated frame, the sharpness ratio (sum of the
frames' detail over the truth's), returns to observed views, returns to generated views against the
truth, against the first visit (self-consistency) and against a different earlier view (the control).
Every figure is **pooled over frames** (the sums of every episode over their frame counts); its 95 %
interval resamples whole *episodes* (``DRAWS`` seeded draws, the pooled figure recomputed from the
drawn episodes' sums), from ``MIN_EPISODES`` episodes on. Paired figures (memory's gain over
window-only; the last bin against the first; another position mode against the default memory, bin
by bin: what changes past the horizon) are per-episode differences weighted by frames, with the same
bootstrap (``engine.quality.retention.paired_difference``).
"""
from __future__ import annotations

import numpy as np

from engine.quality.retention import DRAWS, MIN_EPISODES, paired_difference

MEMORY = "int4"
REFERENCE = "window"
# (name, group, numerator, denominator): a pooled figure = sum numerator / sum denominator
FIGURES = (("psnr", None, "psnr", "frames"), ("ssim", None, "ssim", "frames"),
           ("sharpness", None, "detail", "detail_truth"),
           ("observed_psnr", "observed", "psnr", "frames"), ("observed_ssim", "observed", "ssim", "frames"),
           ("generated_psnr", "generated", "psnr", "frames"),
           ("self_consistency", "generated", "psnr_first", "frames"),
           ("control", "generated", "psnr_control", "control_frames"))


def _get(entry: dict, group: str | None, key: str) -> float:
    return float((entry[group] if group else entry)[key])


def pooled(num: np.ndarray, den: np.ndarray, draws: int = DRAWS, seed: int = 0,
           min_episodes: int = MIN_EPISODES) -> dict:
    """``sum num / sum den`` over episodes with its bootstrap interval over episodes."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    have = den > 0
    if not have.any():
        return {"value": None, "ci": None, "episodes": 0}
    num, den = num[have], den[have]
    ci = None
    if len(num) >= min_episodes:
        idx = np.random.default_rng(seed).integers(0, len(num), size=(draws, len(num)))
        boot = num[idx].sum(1) / den[idx].sum(1)
        ci = [float(x) for x in np.percentile(boot, [2.5, 97.5])]
    return {"value": float(num.sum() / den.sum()), "ci": ci, "episodes": int(len(num))}


def _entries(rows: list[dict], name: str, bins: list[int] | None, phase: str | None = None) -> dict:
    """Per-episode (numerator, denominator) of figure ``name`` over ``bins`` (None: all) or a phase."""
    _, group, key, den_key = next(f for f in FIGURES if f[0] == name)
    num, den = [], []
    for r in rows:
        if phase is not None:
            entries = [r[phase]]
        else:
            entries = [r["bins"][b] for b in (bins if bins is not None else range(len(r["bins"])))
                       if b < len(r["bins"])]
        num.append(sum(_get(e, group, key) for e in entries))
        den.append(sum(_get(e, group, den_key) for e in entries))
    return {"num": np.array(num), "den": np.array(den)}


def figure(rows: list[dict], name: str, bins: list[int] | None = None, phase: str | None = None) -> dict:
    e = _entries(rows, name, bins, phase)
    return pooled(e["num"], e["den"])


def _phase(rows: list[dict], phase: str) -> dict:
    """PSNR and sharpness of a phase of the sessions, and its frames."""
    return {n: figure(rows, n, phase=phase) for n in ("psnr", "sharpness")} | {
        "frames": int(sum(r[phase]["frames"] for r in rows))}


def _paired(a_rows: list[dict], b_rows: list[dict], name: str, a_bins=None, b_bins=None, ratio=False,
            b_name: str | None = None) -> dict:
    """Per episode: figure of ``a`` minus figure ``b_name`` (default the same) of ``b`` (or their ratio),
    weighted by ``a``'s denominator."""
    a, b = _entries(a_rows, name, a_bins), _entries(b_rows, b_name or name, b_bins)
    ok = (a["den"] > 0) & (b["den"] > 0)
    if not ok.any():
        return {"mean": None, "ci": None, "pairs": 0}
    va, vb = a["num"][ok] / a["den"][ok], b["num"][ok] / b["den"][ok]
    if ratio:      # a ratio of pooled figures, its interval over episodes
        idx = np.random.default_rng(0).integers(0, len(va), size=(DRAWS, len(va)))
        sa, da, sb, db = (x[ok] for x in (a["num"], a["den"], b["num"], b["den"]))
        value = (sa.sum() / da.sum()) / (sb.sum() / db.sum())
        boot = (sa[idx].sum(1) / da[idx].sum(1)) / (sb[idx].sum(1) / db[idx].sum(1))
        ci = [float(x) for x in np.percentile(boot, [2.5, 97.5])] if len(va) >= MIN_EPISODES else None
        return {"mean": float(value), "ci": ci, "pairs": int(len(va))}
    return paired_difference(va, vb, weights=a["den"][ok])


def _by_seed(rows: list[dict], arm: str) -> list[dict]:
    return sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["seed"])


def _common(rows: list[dict], arms: list[str]) -> list[dict]:
    """Rows of the seeds every arm ran (paired figures need the same episodes)."""
    seeds = set.intersection(*({r["seed"] for r in rows if r["arm"] == a} for a in arms))
    return [r for r in rows if r["seed"] in seeds]


def summarise_long(rows: list[dict]) -> dict:
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    rows = _common(rows, arms)
    n_bins = min(len(r["bins"]) for r in rows)
    names = [f[0] for f in FIGURES]
    per_arm = {}
    for arm in arms:
        mine = _by_seed(rows, arm)
        per_arm[arm] = {
            "bins": [{n: figure(mine, n, [b]) for n in names} | {"frames": int(sum(r["bins"][b]["frames"] for r in mine))}
                     for b in range(n_bins)],
            "session": {n: figure(mine, n) for n in names},
            "early": {n: figure(mine, n, phase="early") for n in ("psnr", "sharpness")},
            "late": {n: figure(mine, n, phase="late") for n in ("psnr", "sharpness")},
            # split by where the camera stands (rows from before the split have no such phases)
            **{phase: _phase(mine, phase) for phase in ("late_stood", "late_new") if all(phase in r for r in mine)},
            "last_minus_first_db": _paired(mine, mine, "psnr", [n_bins - 1], [0]),
            # how much of the self-consistency is the view's own, not the world's shared colours
            "specific_db": _paired(mine, mine, "self_consistency", b_name="control"),
            "specific_db_bins": [_paired(mine, mine, "self_consistency", [b], [b], b_name="control")
                                 for b in range(n_bins)],
            "last_over_first_sharpness": _paired(mine, mine, "sharpness", [n_bins - 1], [0], ratio=True),
            **{k: int(sum(r.get(k, 0) for r in mine)) for k in ("hits", "misses", "stale", "disk_bytes_read")},
        }
    ref = _by_seed(rows, REFERENCE) if REFERENCE in arms else []
    gains = {}
    for arm in arms:
        if arm == REFERENCE or not ref:
            continue
        mine = _by_seed(rows, arm)
        gains[arm] = {
            "bins": [{n: _paired(mine, ref, n, [b], [b]) for n in ("psnr", "observed_psnr", "self_consistency")}
                     for b in range(n_bins)],
            "session": {n: _paired(mine, ref, n) for n in ("psnr", "observed_psnr", "generated_psnr",
                                                          "self_consistency")},
        }
    against_memory = {}
    if MEMORY in arms:          # the position modes against the default (rerotate), per bin: the horizon
        mem = _by_seed(rows, MEMORY)
        for arm in arms:
            if arm in (MEMORY, REFERENCE):
                continue
            mine = _by_seed(rows, arm)
            against_memory[arm] = {n: [_paired(mine, mem, n, [b], [b]) for b in range(n_bins)]
                                   for n in ("psnr", "observed_psnr", "generated_psnr", "self_consistency")}
    first = rows[0]
    return {"episodes": len({r["seed"] for r in rows}), "arms": arms, "bins": n_bins, "bin_s": first["bin_s"],
            "minutes": first["frames"] / first["fps"] / 60.0, "chunks": first["chunks"],
            "observed_chunks": first["observed_chunks"], "arena_seeds": sorted({r["arena_seed"] for r in rows}),
            "smoke_test": any(r.get("smoke_test") for r in rows), "memory_arm": MEMORY,
            "per_arm": per_arm, "gain_over_window": gains, "against_memory": against_memory}
