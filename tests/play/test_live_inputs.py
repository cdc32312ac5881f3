"""The pieces of live play without a server: the live trajectory against its recording (bit for bit),
the per-frame sampling of held keys and the pointer, the --host warning (the server's message checks:
``test_socket_guard``)."""
from __future__ import annotations

import numpy as np
import pytest

from engine.io.actions import KEYBOARD_KEYS
from engine.io.trajectory import load_trajectory
from engine.io.trajectory.live import LiveTrack, recorded_frames, recording_yaml
from engine.play.controls import PIXELS_PER_STEP, Controls


def _random_actions(rng, mode: str, n: int):
    k = len(KEYBOARD_KEYS[mode])
    if mode == "templerun":
        keyboard = np.zeros((n, k))
        keyboard[np.arange(n), rng.integers(0, k, n)] = 1
        return keyboard, None
    keyboard = (rng.random((n, k)) < 0.4).astype(np.float32)
    mouse = rng.choice([-0.1, 0.0, 0.1], size=(n, 2)).astype(np.float32)
    if mode == "gta_drive":
        mouse[:, 0] = 0
    return keyboard, mouse


@pytest.mark.parametrize("mode", sorted(KEYBOARD_KEYS))
def test_a_track_given_in_chunks_is_its_recording_loaded_back(tmp_path, mode):
    rng = np.random.default_rng(3)
    track = LiveTrack(mode, 9 + 12 * 40)
    for n in [9] + [12] * 30:                       # a turn of 45 s: the quaternion signs flip on the way
        track.extend(*_random_actions(rng, mode, n))
    path = tmp_path / "walk.trajectory.yaml"
    path.write_text(recording_yaml(track, "a comment"), encoding="utf-8")
    loaded = load_trajectory(path, mode, frames=track.known)
    live = track.trajectory
    assert np.array_equal(loaded.actions.keyboard.numpy(), live.actions.keyboard.numpy()[:track.known])
    if mode != "templerun":
        assert np.array_equal(loaded.actions.mouse.numpy(), live.actions.mouse.numpy()[:track.known])
    assert np.array_equal(loaded.poses, live.poses[:track.known])       # bit for bit, not close
    assert recorded_frames(path, loaded) == track.known


def test_a_file_that_is_not_a_recording_loops_as_before(tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text("segments:\n- keys: [w]\n  frames: 12\n", encoding="utf-8")
    assert recorded_frames(path, load_trajectory(path, "universal", frames=40)) is None


def test_held_keys_are_sampled_per_frame_and_taps_are_not_lost():
    c = Controls("universal", fps=16, start=0.0)
    c.apply(["w"], (0, 0), 1, at=0.01)
    c.apply(["w", "l"], (0, 0), 2, at=0.30)
    c.apply([], (0, 0), 3, at=0.50)
    c.apply(["a"], (0, 0), 4, at=0.60)
    c.apply([], (0, 0), 5, at=0.61)                 # a tap shorter than a frame
    keyboard, mouse, seq = c.take(12, now=0.75)
    assert seq == 5
    assert keyboard[:4, 0].all() and not keyboard[9:, 0].any()    # W for the first 0.5 s
    assert (mouse[5:8, 1] == np.float32(0.1)).all()               # L: one camera step a frame
    assert keyboard[:, 2].sum() == 1                              # the tap: one frame of A


def test_pointer_movement_turns_a_step_per_frame_and_carries_the_rest():
    c = Controls("universal", fps=16, start=0.0)
    c.apply([], (3 * PIXELS_PER_STEP + 1, -PIXELS_PER_STEP), 1, at=0.0)
    keyboard, mouse, _ = c.take(6, now=0.0)
    assert list(mouse[:, 1]) == [np.float32(0.1)] * 3 + [0.0] * 3   # right: three steps, 1 px carried
    assert list(mouse[:, 0]) == [np.float32(0.1)] + [0.0] * 5       # up: one step


def test_templerun_takes_one_action_and_gta_has_no_pitch():
    t = Controls("templerun", fps=16, start=0.0)
    t.apply(["d", "w"], (0, 0), 1, at=0.0)
    keyboard, mouse, _ = t.take(2, now=0.0)
    assert mouse is None and (keyboard.sum(1) == 1).all()
    assert keyboard[0, KEYBOARD_KEYS["templerun"].index("jump")] == 1    # W before D
    g = Controls("gta_drive", fps=16, start=0.0)
    g.apply(["w", "d", "i"], (0, -100), 1, at=0.0)
    keyboard, mouse, _ = g.take(2, now=0.0)
    assert (mouse[:, 0] == 0).all() and (mouse[:, 1] > 0).all() and (keyboard[:, 0] == 1).all()


def test_a_host_beyond_loopback_is_warned_about(capsys):
    from worldpager_cli.play import _check_host

    _check_host("127.0.0.1")
    _check_host("::1")
    assert capsys.readouterr().err == ""
    _check_host("0.0.0.0")
    assert "warning: --host 0.0.0.0 serves the page beyond this machine" in capsys.readouterr().err
