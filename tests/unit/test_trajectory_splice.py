"""A fork's trajectory: the parent's actions up to a frame, then another file's, written as YAML that
loads back to exactly those actions, with the parent's poses before the frame."""
from __future__ import annotations

import numpy as np
import pytest

from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.io.trajectory.splice import splice_yaml


@pytest.mark.parametrize("mode, first, second", [
    ("universal", "arena_tour.yaml", "yaw.yaml"),
    ("universal", "orbit.csv", "revisit_loop.yaml"),    # a pose file: tracked actions, any start
    ("gta_drive", "b1_ws.yaml", "revisit_loop.yaml"),
    ("templerun", "templerun_run.yaml", "templerun_run.yaml"),
])
def test_splice_loads_back_exactly(tmp_path, mode, first, second):
    parent = load_trajectory(packaged_trajectory(first), mode, frames=141)
    other = load_trajectory(packaged_trajectory(second), mode, frames=100, repeat="pingpong")
    path = tmp_path / "branch.yaml"
    path.write_text(splice_yaml(parent, 57, other, comment="a fork\nat frame 57"), encoding="utf-8")
    branch = load_trajectory(path, mode, frames=157)
    for got, a, b in ((branch.actions.keyboard, parent.actions.keyboard, other.actions.keyboard),
                      (branch.actions.mouse, parent.actions.mouse, other.actions.mouse)):
        if got is not None:
            assert np.array_equal(got[:57], a[:57]) and np.array_equal(got[57:], b)
    # pose t is where actions [0, t) took the camera: up to frame 57 the parent's, then on from there
    assert np.allclose(branch.poses[:58], parent.poses[:58], atol=1e-9)
