"""The screenshot of docs/play.md, made again: a played arena session, steered by headless Chromium
(W held, then W and L), shot mid-session into docs/screenshots/play_page.png.

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


def main() -> None:
    work = Path(tempfile.mkdtemp())
    proc = subprocess.Popen([sys.executable, "-c", "from worldpager_cli.main import cli; cli()", "play", "--port", "0",
                             "--out", "walk.mp4", "--spill", "walk.spill", "--pool-slots", "4", "--chunks", "200"],
                            cwd=work, stderr=subprocess.PIPE, text=True)
    url = None
    for line in proc.stderr:
        if "play at " in line:
            url = line.split("play at ", 1)[1].strip()
            break
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={work / 'profile'}",
                "--window-size=1280,720", "--hide-scrollbars"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(url)
        time.sleep(2)
        ActionChains(driver).key_down("l").perform()
        time.sleep(6)
        ActionChains(driver).key_down("w").perform()
        time.sleep(3)
        driver.save_screenshot(str(work / "play_page.png"))
        ActionChains(driver).key_up("l").key_up("w").perform()
        driver.find_element("id", "stop").click()
        time.sleep(2)
    finally:
        driver.quit()
        proc.wait(timeout=120)
    out = ROOT / "docs" / "screenshots" / "play_page.png"
    with Image.open(work / "play_page.png") as image:
        image.convert("RGB").quantize(colors=96, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    print(out)


if __name__ == "__main__":
    main()
