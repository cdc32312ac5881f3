"""Figures pooled over frames, not averaged over episodes; intervals only from 8 episodes on."""
from __future__ import annotations

import pytest

from engine.quality.pooled import class_figures, summarise_revisit
from engine.quality.retention import MIN_EPISODES, shown
from engine.quality.revisits import CLASSES


def row(arm: str, seed: int, frames: int, psnr: float, generated: int = 0, kind: str = "spin") -> dict:
    """A session row whose observed returns are ``frames`` frames of ``psnr`` dB each."""
    empty = {"frames": 0, "psnr": 0.0, "ssim": 0.0}
    classes = {c: dict(empty) for c in CLASSES}
    classes["observed"] = classes["revisit"] = {"frames": frames, "psnr": frames * psnr, "ssim": frames * 0.5}
    classes["generated"] = {"frames": generated, "psnr": generated * psnr, "ssim": 0.0, "psnr_first": generated * 30.0}
    classes["all"] = {"frames": frames, "psnr": frames * psnr}
    return {"experiment": "revisit", "arm": arm, "seed": seed, "kind": kind, "classes": classes,
            "hits": 1, "misses": 0, "stale": 0, "disk_bytes_read": 0}


def test_pooled_over_frames_differs_from_the_per_episode_mean():
    # an episode of 2 frames at 30 dB and one of 8 frames at 20 dB
    rows = [row("bf16", 0, 2, 30.0), row("bf16", 1, 8, 20.0)]
    f = class_figures(rows, "observed")
    assert f["psnr"] == pytest.approx((2 * 30 + 8 * 20) / 10) == pytest.approx(22.0)   # every frame the same
    assert f["psnr_episode_mean"] == pytest.approx(25.0)                              # every episode the same
    assert f["frames"] == 10 and f["episodes"] == 2 and f["ssim"] == pytest.approx(0.5)
    assert class_figures(rows, "generated") == {"frames": 0, "episodes": 0, **{k: None for k in (
        "psnr", "psnr_episode_mean", "ssim", "ssim_episode_mean", "psnr_first", "psnr_first_episode_mean")}}


def test_gain_and_retention_are_weighted_by_frames():
    # memory wins by 10 dB on the 2-frame episode and loses by 1 dB on the 8-frame one
    rows = [row("window", 0, 2, 20.0), row("window", 1, 8, 20.0), row("bf16", 0, 2, 30.0), row("bf16", 1, 8, 19.0),
            row("int4", 0, 2, 25.0), row("int4", 1, 8, 19.5)]
    s = summarise_revisit(rows)
    g = s["gain_over_window"]["bf16"]["observed"]
    assert g["db"] == pytest.approx((2 * 10 - 8 * 1) / 10) and g["better_share"] == 0.5 and g["episodes"] == 2
    r = s["retention"]["int4"]["observed"]
    assert r["retention_pct"] == pytest.approx(100 * (2 * 5 - 8 * 0.5) / (2 * 10 - 8 * 1))
    assert s["classes"]["bf16"]["observed"]["psnr_episode_mean"] == pytest.approx(24.5)   # the flattering one
    assert s["start_pose"]["revisit_frames"] == 10 and s["episodes"] == 2


@pytest.mark.parametrize("episodes", [MIN_EPISODES - 1, MIN_EPISODES])
def test_intervals_only_from_8_episodes(episodes):
    rows = [row(arm, seed, 3 + seed, base + seed * 0.1, generated=2)
            for seed in range(episodes) for arm, base in (("window", 17.0), ("bf16", 23.0), ("int4", 22.5))]
    s = summarise_revisit(rows)
    g, r = s["gain_over_window"]["int4"]["generated"], s["retention"]["int4"]["generated"]
    if episodes < MIN_EPISODES:
        assert g["ci"] is None and r["ci_pct"] is None
        assert shown(g["ci"], g["episodes"]) == f"n/a ({episodes} episodes)"
    else:
        lo, hi = g["ci"]
        assert lo <= g["db"] <= hi and r["ci_pct"][0] <= r["retention_pct"] <= r["ci_pct"][1]
        assert shown(g["ci"], g["episodes"]).startswith("[")
    assert s["classes"]["int4"]["generated"]["psnr_first"] == pytest.approx(30.0)
