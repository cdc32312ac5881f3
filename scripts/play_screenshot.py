"""The screenshot of docs/play.md, made again: a played arena session with the renderer's truth beside
each frame (``play --truth``), steered by headless Chromium — the session's look around (observed),
then W held (walking forward), then W and L (walking while turning right) — and shot mid-walk into
docs/screenshots/play_page.png.

Run from the repository's root: PYTHONPATH=$PWD python3 scripts/play_screenshot.py
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains

ROOT = Path.cwd()
WALK_S, TURN_S = 2.5, 1.5        # seconds of W, then of W and L, after the look around


def shown(driver, expression: str):
    return driver.execute_script(f"return window.wp && window.wp.{expression};")


def wait_for(driver, expression: str, limit_s: float = 300.0) -> None:
    deadline = time.monotonic() + limit_s
    while not shown(driver, expression):
        if time.monotonic() > deadline:
            raise SystemExit(f"play_screenshot: the page never showed {expression}")
        time.sleep(0.1)


def main() -> None:
    work = Path(tempfile.mkdtemp())
    proc = subprocess.Popen([sys.executable, "-c", "from worldpager_cli.main import cli; cli()", "play", "--truth",
                             "--port", "0", "--out", "walk.mp4", "--spill", "walk.spill", "--pool-slots", "4",
                             "--chunks", "200"], cwd=work, stderr=subprocess.PIPE, text=True)
    url = None
    for line in proc.stderr:
        if "play at " in line:
            url = line.split("play at ", 1)[1].strip()
            break
    if url is None:
        raise SystemExit(f"play_screenshot: worldpager play did not start (exit {proc.wait()})")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={work / 'profile'}",
                "--window-size=1700,780", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        wait_for(driver, "info && wp.chunks.length >= 7")      # the look around (7 observed chunks) is made
        wait_for(driver, "framesShown >= 9 + 6 * 12")         # ... and shown
        ActionChains(driver).key_down("w").perform()
        time.sleep(WALK_S)
        ActionChains(driver).key_down("l").perform()
        time.sleep(TURN_S)
        driver.save_screenshot(str(work / "play_page.png"))
        ActionChains(driver).key_up("l").key_up("w").perform()
        driver.find_element("id", "stop").click()
        time.sleep(2)
    finally:
        driver.quit()
        proc.wait(timeout=120)
    out = ROOT / "docs" / "screenshots" / "play_page.png"
    with Image.open(work / "play_page.png") as image:
        image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    print(out)


if __name__ == "__main__":
    main()
