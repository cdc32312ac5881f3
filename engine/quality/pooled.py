"""The revisit experiment's figures, pooled over frames, from its per-session rows (numpy only).

Owns the summary of ``bench quality``'s revisit rows (``engine.quality.revisit_scores``: per class a
frame count and score sums). For every arm and class:

* **pooled** PSNR, SSIM and (generated returns) PSNR against the first visit: the sums of every
  episode over the frames of every episode, so every frame weighs the same;
* beside them the **per-episode mean** (each episode's mean, then their mean over the episodes with a
  frame of the class: an episode with 2 revisit frames weighs as much as one with 87), labelled so;
* memory's **gain** over window-only (pooled, paired by episode, weighted by frames) with its bootstrap
  interval over episodes and the share of episodes where the arm's mean is above window-only's;
* **retention** of bf16's gain (``engine.quality.retention``, weighted by frames).

Also the share of revisit frames at the start pose (chunk 0's cameras), the pooled PSNR per kind of
episode, and the paired differences the arms were chosen for (the stale-set fallback: int4 prefetch
minus on-demand; int4 minus sync; int2 minus bf16), on every revisit frame. Intervals are given only
from ``MIN_EPISODES`` episodes on.
"""
from __future__ import annotations

import numpy as np

from engine.quality.retention import paired_difference, retention
from engine.quality.revisits import CLASSES

SCORES = ("psnr", "ssim", "psnr_first")


def class_figures(rows: list[dict], cls: str) -> dict:
    """Pooled and per-episode-mean scores of class ``cls`` over ``rows`` (one arm's sessions)."""
    entries = [r["classes"][cls] for r in rows if r["classes"][cls]["frames"] > 0]
    frames = sum(e["frames"] for e in entries)
    out: dict = {"frames": int(frames), "episodes": len(entries)}
    for key in SCORES:
        have = [e for e in entries if key in e]
        out[key] = sum(e[key] for e in have) / sum(e["frames"] for e in have) if have else None
        out[f"{key}_episode_mean"] = float(np.mean([e[key] / e["frames"] for e in have])) if have else None
    return out


def _pairs(by: dict, arm: str, refs: tuple[str, ...], cls: str, key: str = "psnr"):
    """Per-episode means of ``arm`` and each of ``refs`` over the episodes that have them all, and the
    episodes' frame counts (the same for every arm: the cameras are the path's)."""
    episodes = sorted({(s, k) for (s, k, a) in by if a == arm})
    values, weights = [[] for _ in (arm, *refs)], []
    for s, k in episodes:
        rows = [by.get((s, k, a)) for a in (arm, *refs)]
        if any(r is None for r in rows) or rows[0]["classes"][cls]["frames"] == 0:
            continue
        entries = [r["classes"][cls] for r in rows]
        n = entries[0]["frames"]
        assert all(e["frames"] == n for e in entries), (s, k, cls, [e["frames"] for e in entries])
        for v, e in zip(values, entries):
            v.append(e[key] / n)
        weights.append(n)
    return values, weights


def gain(by: dict, arm: str, cls: str, ref: str = "window") -> dict:
    (a, b), w = _pairs(by, arm, (ref,), cls)
    d = paired_difference(a, b, weights=w)
    return {"db": d["mean"] if w else None, "ci": d["ci"], "episodes": len(w),
            "better_share": float(np.mean(np.asarray(a) > np.asarray(b))) if w else None}


def kept(by: dict, arm: str, cls: str) -> dict:
    (a, b, win), w = _pairs(by, arm, ("bf16", "window"), cls)
    return retention(a, b, win, weights=w)


def start_share(rows: list[dict]) -> dict:
    """How many revisit frames return to chunk 0's cameras (one arm's rows: every arm has the same)."""
    start = sum(r["classes"]["start"]["frames"] for r in rows)
    revisit = sum(r["classes"]["revisit"]["frames"] for r in rows)
    observed = sum(r["classes"]["observed"]["frames"] for r in rows)
    return {"start_frames": int(start), "revisit_frames": int(revisit), "observed_frames": int(observed),
            "of_revisits": start / revisit if revisit else None, "of_observed": start / observed if observed else None}


def _difference(by: dict, arm: str, ref: str) -> dict:
    (a, b), w = _pairs(by, arm, (ref,), "revisit")
    return paired_difference(a, b, weights=w)


def summarise_revisit(rows: list[dict]) -> dict:
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    by = {(r["seed"], r["kind"], r["arm"]): r for r in rows}
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    episodes = sorted({(r["seed"], r["kind"]) for r in rows})
    figures = {a: {c: class_figures([r for r in rows if r["arm"] == a], c) for c in CLASSES} for a in arms}
    int4 = [r for r in rows if r["arm"] == "int4"]
    return {
        "episodes": len(episodes), "kinds": {k: sum(1 for _, kk in episodes if kk == k) for k in kinds},
        "smoke_test": any(r.get("smoke_test") for r in rows), "classes": figures,
        "gain_over_window": {a: {c: gain(by, a, c) for c in CLASSES} for a in arms if a != "window"},
        "retention": {a: {c: kept(by, a, c) for c in CLASSES} for a in arms if a not in ("window",)},
        "start_pose": start_share([r for r in rows if r["arm"] == arms[0]]) if arms else {},
        "by_kind": {k: {a: {c: class_figures([r for r in rows if r["arm"] == a and r["kind"] == k], c)["psnr"]
                            for c in CLASSES} for a in arms} for k in kinds},
        "stale_fallback_cost_db": _difference(by, "int4", "on-demand"),
        "prefetch_minus_sync_db": _difference(by, "int4", "sync"),
        "int2_minus_bf16_db": _difference(by, "int2", "bf16"),
        **{key: int(sum(r.get(key, 0) for r in int4)) for key in ("stale", "misses", "hits", "disk_bytes_read")},
    }
