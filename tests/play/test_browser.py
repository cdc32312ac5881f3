"""The page in a real browser: Debian's Chromium, headless, driven through chromedriver (selenium).

A ``worldpager play`` of the arena model (a small cap) is opened with its token and refused without it;
held W moves the camera forward and held L turns it right (the poses the log's recording gives); frames
arrive on the canvas; its stall count is the log's (chunks over 0.5 ms); the MP4 and the log are written and the recording replays to the same frames; a
closed tab pauses the session (no chunk made while nobody steers); a second tab watches and cannot
steer. No timing is asserted: every wait is bounded generously (``PATIENCE_S``).
"""
from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from engine.io.trajectory import load_trajectory
from engine.runtime.telemetry import read_log
from play_support import PlayProcess, mp4_frames
from tests_support import PATIENCE_S, WORLDPAGER

pytestmark = pytest.mark.browser
CHROMIUM, DRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    if not (Path(CHROMIUM).is_file() and Path(DRIVER).is_file()):
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(PATIENCE_S)
    yield driver
    driver.quit()


def until(predicate, what: str):
    deadline = time.time() + PATIENCE_S
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def wp(driver, expression: str):
    return driver.execute_script(f"return window.wp && window.wp.{expression};")


def chunks(log: Path) -> list[dict]:
    return [r for r in read_log(log) if r["type"] == "chunk"] if log.exists() else []


def hold(driver, key: str, until_chunk: int, log: Path):
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).key_down(key).perform()
    until(lambda: len(chunks(log)) >= until_chunk, f"chunk {until_chunk} with {key} held")
    ActionChains(driver).key_up(key).perform()


def test_the_page_steers_records_and_replays(tmp_path, browser):
    play = PlayProcess(tmp_path, "page", chunks=20)
    try:
        base = play.url.split("?")[0]
        browser.get(base)
        assert "token" in browser.find_element("tag name", "body").text      # refused: no page, one line
        assert wp(browser, "role") is None
        browser.get(play.url)
        until(lambda: wp(browser, "role") == "driver", "the page to steer")
        browser.find_element("id", "screen").click()
        hold(browser, "w", 4, play.log)                 # walk forward
        hold(browser, "l", 8, play.log)                 # turn right
        until(lambda: wp(browser, "framesShown") > 24, "frames on the canvas")
        browser.find_element("id", "stop").click()
        until(lambda: wp(browser, "ended"), "the end message")
        shown = set(wp(browser, "chunks.map((c) => c.chunk)"))
        page_stalls = wp(browser, "stalls")
        stalls_text = browser.find_element("id", "stalls").text
        assert play.finish() == 0, play.stderr
    finally:
        play.kill()
    records = chunks(play.log)
    assert read_log(play.log)[-1]["status"] == "done"
    # the page counts a chunk as stalled by the log's threshold (0.5 ms), not for any wait at all
    assert page_stalls == sum(1 for r in records if r["chunk"] in shown and r["stall_ms"] > 0.5)
    assert "over 0.5 ms" in stalls_text
    frames = mp4_frames(play.out)
    assert len(frames) == records[-1]["frames_total"]
    recorded = load_trajectory(play.recording, "universal", frames=len(frames) - 33)   # after the look around
    keys, mouse, poses = recorded.actions.keyboard.numpy(), recorded.actions.mouse.numpy(), recorded.poses
    walked, turned = np.flatnonzero(keys[:, 0] > 0), np.flatnonzero(mouse[:, 1] > 0)
    assert len(walked) and len(turned) and walked[0] < turned[0]
    assert poses[turned[0], 2] < poses[walked[0], 2] - 0.2        # W walked forward: -z
    yaw_before, yaw_after = poses[turned[0], 3:], poses[-1, 3:]
    assert abs(float(np.dot(yaw_before, yaw_after))) < 0.999       # L turned the camera
    replay = subprocess.run(WORLDPAGER + ["generate", "--trajectory", str(play.recording), "--chunks", "20",
                                          "--out", "replay.mp4",
                                          "--spill", "replay.spill", "--pool-slots", "4", "--save-every", "2",
                                          "--late-prefetch", "wait", "--look-around", "3"],   # play's settings
                            capture_output=True, text=True, cwd=tmp_path, timeout=PATIENCE_S)
    assert replay.returncode == 0, replay.stderr
    assert all(np.array_equal(a, b) for a, b in zip(mp4_frames(tmp_path / "replay.mp4"), frames, strict=True))


def test_a_closed_tab_pauses_and_a_second_tab_cannot_steer(tmp_path, browser):
    play = PlayProcess(tmp_path, "tabs", chunks=60)
    try:
        browser.get(play.url)
        until(lambda: wp(browser, "role") == "driver", "the first tab to steer")
        until(lambda: len(chunks(play.log)) >= 2, "the first chunks")
        first = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(play.url)
        until(lambda: wp(browser, "role") == "watcher", "the second tab to watch")
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(browser).key_down("w").perform()          # the watcher holds W ...
        seen = len(chunks(play.log))
        until(lambda: len(chunks(play.log)) >= seen + 3, "chunks while the watcher holds W")
        ActionChains(browser).key_up("w").perform()
        browser.switch_to.window(first)
        browser.close()                                        # the driver's tab is closed
        browser.switch_to.window(browser.window_handles[0])
        until(lambda: wp(browser, "paused") is True, "the watcher to see the pause")
        paused_at = len(chunks(play.log))
        time.sleep(3)                                          # ... and nothing is made meanwhile
        assert len(chunks(play.log)) <= paused_at + 1          # (the chunk in hand may finish)
        still = len(chunks(play.log))
        browser.find_element("id", "drive").click()            # the watcher takes the controls
        until(lambda: wp(browser, "role") == "driver", "the second tab to steer")
        until(lambda: len(chunks(play.log)) >= still + 2, "chunks after the pause")
        browser.find_element("id", "stop").click()
        assert play.finish() == 0, play.stderr
    finally:
        play.kill()
    records = chunks(play.log)
    waited = [r.get("input_wait_ms", 0) for r in records]
    assert max(waited) > 2000                                  # the pause is logged as a wait for input ...
    assert all(r["stall_ms"] < 1000 for r in records)          # ... not as a stall
    recorded = load_trajectory(play.recording, "universal", frames=records[-1]["frames_total"])
    assert recorded.actions.keyboard.numpy().sum() == 0        # nobody who steered held W
    assert len(mp4_frames(play.out)) == records[-1]["frames_total"]
