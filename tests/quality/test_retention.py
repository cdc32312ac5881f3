"""Retention and its bootstrap interval on numbers whose answer is known; weighted by frames; no interval
below 8 episodes."""
from __future__ import annotations

import numpy as np
import pytest

from engine.quality.retention import paired_difference, retention


def test_an_arm_equal_to_bf16_keeps_all_of_its_gain():
    r = retention([20.0, 22.0, 25.0], [20.0, 22.0, 25.0], [17.0, 18.0, 19.0], min_episodes=3)
    assert r["retention_pct"] == pytest.approx(100.0) and r["ci_pct"] == pytest.approx([100.0, 100.0])
    assert retention([20.0, 22.0, 25.0], [20.0, 22.0, 25.0], [17.0, 18.0, 19.0])["ci_pct"] is None   # 3 < 8


def test_retention_is_the_share_of_the_mean_gain():
    # gains 1, 2, 3 against bf16 gains 2, 2, 2: mean 2 / mean 2 = 100 %; then half of it
    r = retention([18.0, 20.0, 22.0], [19.0, 20.0, 21.0], [17.0, 18.0, 19.0])
    assert r["retention_pct"] == pytest.approx(100.0) and r["gain_db"] == pytest.approx(2.0)
    half = retention([18.0, 19.0, 20.0], [19.0, 20.0, 21.0], [17.0, 18.0, 19.0])
    assert half["retention_pct"] == pytest.approx(50.0)


def test_the_interval_is_seeded_and_holds_the_estimate():
    rng = np.random.default_rng(5)
    window = rng.normal(17, 1, 40)
    bf16 = window + rng.normal(4, 0.5, 40)
    arm = window + rng.normal(3, 0.5, 40)
    a, b = retention(arm, bf16, window, seed=3), retention(arm, bf16, window, seed=3)
    assert a == b
    lo, hi = a["ci_pct"]
    assert lo < a["retention_pct"] < hi and hi - lo < 20
    assert retention(arm, bf16, window, seed=4)["ci_pct"] != a["ci_pct"]


def test_weights_pool_over_frames():
    # gains 4 (1 frame) and 1 (3 frames) against bf16 gains 2 and 2: pooled 7/4 over 2 = 87.5 %
    r = retention([21.0, 18.0], [19.0, 19.0], [17.0, 17.0], weights=[1, 3])
    assert r["retention_pct"] == pytest.approx(87.5) and r["gain_db"] == pytest.approx(1.75)
    assert retention([21.0, 18.0], [19.0, 19.0], [17.0, 17.0])["retention_pct"] == pytest.approx(125.0)


def test_paired_difference():
    d = paired_difference([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], min_episodes=3)
    assert d["mean"] == pytest.approx(1.0) and d["pairs"] == 3 and 0.0 <= d["ci"][0] <= 1.0 <= d["ci"][1] <= 2.0
    assert paired_difference([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])["ci"] is None
    assert paired_difference([3.0, 1.0], [1.0, 1.0], weights=[1, 3])["mean"] == pytest.approx(0.5)
    assert paired_difference([], [])["pairs"] == 0
