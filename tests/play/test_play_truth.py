"""``worldpager play --truth``: the page gets the renderer's truth of every frame beside it.

The scripted player (the page's protocol through the real socket) receives, with ``--truth``, one
truth message for each video frame, and each is the arena's render at the camera the session's model
used for that frame (``worldpager arena truth``'s poses, from the log); the truth is not a frame shown,
the recording still replays to the same MP4 bytes. A model other than the arena's is refused in one
line (exit 2) before anything is written; a chunk whose messages cannot be made is one warning line.
In a real browser (marked ``browser``) the truth panel shows.
"""
from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest
from PIL import Image

from engine.arena.session_camera import session_camera
from engine.arena.truth import render_frames
from engine.arena.world import Arena
from engine.play.frames import TRUTH_FLAG, frame_messages, is_truth, parse_header, truth_messages
from engine.play.run import _said_if_failed
from engine.runtime.telemetry import read_log
from play_support import PlayProcess, mp4_frames, play_script, walk_and_turn
from test_browser import browser, until, wp  # noqa: F401  (browser: the headless Chromium fixture)
from tests_support import PATIENCE_S, WORLDPAGER


def test_truth_messages_carry_the_flag_and_the_same_header():
    video = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    frames, truths = frame_messages(video, 7, 40, 3), truth_messages(video, 7, 40, 3)
    assert [is_truth(m) for m in frames + truths] == [False, False, True, True]
    assert [parse_header(m) for m in truths] == [parse_header(m) for m in frames] == [(7, 40, 3, 2), (7, 41, 3, 2)]
    assert truths[0][:4] == (7 | TRUTH_FLAG).to_bytes(4, "big")


def test_a_chunk_that_cannot_be_sent_is_said_not_swallowed(caplog):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as encoder:
        task = encoder.submit(lambda: np.zeros(3)[7])
        task.add_done_callback(_said_if_failed(5))
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == ["worldpager: warning: play could not send chunk 5's frames to the page: IndexError: "
                    "index 7 is out of bounds for axis 0 with size 3"]


def _mean_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


def test_a_played_session_with_truth_sends_each_frames_true_render(tmp_path):
    play = PlayProcess(tmp_path, "truth", "--truth", chunks=8)
    try:
        played = play_script(6, play.url, walk_and_turn())
        assert play.finish() == 0, play.stderr
    finally:
        play.kill()
    assert played.end["status"] == "done"
    frames = mp4_frames(play.out)
    assert len(frames) == played.frames                          # truth messages are not frames shown
    assert sorted(played.truths) == list(range(len(frames)))     # one truth for every frame
    camera = session_camera(play.log)
    arena = Arena.generate(camera.arena_seed)
    moved = [i for i in range(12, len(frames)) if np.abs(camera.poses[i] - camera.poses[i - 12]).max() > 0.05]
    assert len(moved) > 24                                       # it turned (the look around) and walked
    for i in (0, moved[0], moved[len(moved) // 2], moved[-1]):
        got = np.asarray(Image.open(io.BytesIO(played.truths[i])).convert("RGB"))
        own = render_frames(arena, camera.poses[i:i + 1], camera)[0]
        assert got.shape == own.shape == frames[i].shape
        assert _mean_abs(got, own) < 4.0                          # the render at that frame's camera, as a JPEG
        if i:
            before = render_frames(arena, camera.poses[i - 12:i - 11], camera)[0]
            assert _mean_abs(got, own) < _mean_abs(got, before) / 2   # not another frame's camera
    # the truth is only shown: the recording replays to the same video
    replay = subprocess.run(WORLDPAGER + ["generate", "--trajectory", str(play.recording), "--out", "replay.mp4",
                                          "--spill", "replay.spill", "--pool-slots", "4", "--late-prefetch", "wait",
                                          "--save-every", "2", "--look-around", "3"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=PATIENCE_S)
    assert replay.returncode == 0, replay.stderr
    assert (tmp_path / "replay.mp4").read_bytes() == play.out.read_bytes()


def _truth_matches(played, log, frames: range) -> None:
    """Each of ``frames`` came with its truth, the render at the camera the session's log gives it."""
    camera = session_camera(log)
    arena = Arena.generate(camera.arena_seed)
    assert sorted(played.truths) == list(frames)
    for i in (frames[0], frames[len(frames) // 2], frames[-1]):
        got = np.asarray(Image.open(io.BytesIO(played.truths[i])).convert("RGB"))
        assert _mean_abs(got, render_frames(arena, camera.poses[i:i + 1], camera)[0]) < 4.0


def test_play_from_with_truth_sends_the_truth_of_the_frames_after_the_save_point(tmp_path):
    play = PlayProcess(tmp_path, "on", chunks=12)
    play_script(5, play.url, walk_and_turn())
    assert play.finish() == 0, play.stderr
    before = [r for r in read_log(play.log) if r["type"] == "chunk"][-1]["frames_total"]
    again = PlayProcess(tmp_path, "on", "--from", str(play.out), "--truth")
    assert again.url is not None, again.stderr
    played = play_script(2, again.url, walk_and_turn())
    assert again.finish() == 0, again.stderr
    after = [r for r in read_log(play.log) if r["type"] == "chunk"][-1]["frames_total"]
    assert after > before
    _truth_matches(played, play.log, range(before, after))


def test_truth_is_refused_for_a_model_without_a_renderer(tmp_path):
    result = subprocess.run(WORLDPAGER + ["play", "--truth", "--model", "synthetic", "--port", "0", "--out", "s.mp4"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=PATIENCE_S)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: --truth") and "--model arena" in lines[0]
    assert list(tmp_path.iterdir()) == []                         # nothing written


@pytest.mark.browser
def test_the_page_shows_the_truth_beside_the_frame(tmp_path, browser):
    play = PlayProcess(tmp_path, "page", "--truth", chunks=8)
    try:
        browser.get(play.url)
        until(lambda: wp(browser, "role") == "driver", "the page to steer")
        assert browser.find_element("id", "truth-panel").is_displayed()
        until(lambda: wp(browser, "truthShown") >= 24, "truth frames on the truth canvas")
        assert wp(browser, "truthShown") <= wp(browser, "framesShown")
        assert browser.find_element("css selector", "#truth-panel figcaption").text == "truth"
        browser.find_element("id", "stop").click()
        assert play.finish() == 0, play.stderr
    finally:
        play.kill()
    assert [r["status"] for r in read_log(play.log) if r["type"] == "summary"] == ["done"]
