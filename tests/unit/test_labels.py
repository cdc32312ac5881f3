"""Labelled figures: every column and row label of a strip or side-by-side video is drawn where it belongs
(dark text on a white band), the video frames stay even-sized for H.264, and the training run's first
steps give its expected time."""
from __future__ import annotations

import numpy as np
import torch

from engine.arena.train import TIMED_STEPS, expected_time_line
from engine.io.labels import BAND, header, row_labels
from engine.quality.sidebyside import side_by_side


def _inked(pixels: np.ndarray) -> bool:
    return bool((pixels.min(axis=-1) < 100).any())


def test_each_column_of_a_header_carries_its_label():
    band = header([100, 100, 100], ["truth", "", "window-only"])
    assert band.shape == (BAND, 300, 3) and band.dtype == np.uint8
    assert _inked(band[:, :100]) and not _inked(band[:, 100:200]) and _inked(band[:, 200:])


def test_each_row_carries_its_label():
    band = row_labels([20, 40, 40], ["time", "", "memory"], 90)
    assert band.shape == (100, 90, 3)
    assert _inked(band[:20]) and not _inked(band[20:60]) and _inked(band[60:])


def test_a_labelled_side_by_side_is_the_frames_under_their_band():
    rows = [torch.full((2, 3, 6, 10), v) for v in (-1.0, 0.0, 1.0)]
    plain = side_by_side(*rows)
    labelled = side_by_side(*rows, labels=["truth", "memory (int4)", "window-only"])
    assert labelled.shape == (2, BAND + 12, 60, 3) and labelled.shape[1] % 2 == 0
    assert torch.equal(labelled[:, BAND:], plain) and torch.equal(labelled[0, :BAND], labelled[1, :BAND])
    assert _inked(labelled[0, :BAND].numpy())


def test_the_first_steps_say_how_long_the_rest_takes():
    assert expected_time_line(3.0, 20000, None) == \
        f"arena: 3.00 s a step over the first {TIMED_STEPS}; 20000 steps to go: about 16.7 h"
    line = expected_time_line(3.0, 20000, 600.0)
    assert line.endswith("(--minutes stops it after 10 min, near step 200 of them)")
    assert "--minutes" not in expected_time_line(3.0, 100, 600.0)
