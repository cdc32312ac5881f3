"""MG2's action-window rule and the constant-size action tail the session sends per chunk."""
from __future__ import annotations

import torch

from engine.config import ActionConfig
from engine.model.action import action_windows, first_window_frame

CFG = ActionConfig()


def test_window_rule_repeats_frame_zero_before_the_start():
    actions = torch.arange(40, dtype=torch.float32).view(1, 40, 1)     # value = video frame index
    w = action_windows(actions, start_frame=0, frames=3, cfg=CFG)[0, :, :, 0]
    assert w.shape == (3, 12)
    assert torch.equal(w[0], torch.zeros(12))                            # frames -12..-1 -> frame 0
    assert torch.equal(w[1], torch.tensor([0.] * 9 + [1., 2., 3.]))      # frames -8..3
    assert torch.equal(w[2], torch.tensor([0., 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7]))  # frames -4..7


def test_a_tail_with_offset_gives_the_same_windows_as_the_full_history():
    actions = torch.randn(1, 1 + 4 * 62, 3)
    for chunk in range(0, 20):
        start = 3 * chunk
        last = 1 + 4 * (start + 2)
        full = action_windows(actions[:, :last], start, 3, CFG)
        first = first_window_frame(start, CFG)
        tail = action_windows(actions[:, first:last], start, 3, CFG, offset=first)
        assert torch.equal(full, tail)
        assert last - first <= 1 + 4 * 2 + CFG.window_frames              # constant per chunk
