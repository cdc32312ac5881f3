"""Does `worldpager play` serve its page on this install? (`.ci/run` runs it right after the README's Run command.)

Starts `worldpager play --port 0` (the console script on PATH, as a user types it) in a temporary directory,
waits for the URL it prints and fetches the page (HTTP 200, the play page's HTML: the web server is
up and the session started). Then stops the session
with SIGINT, as Ctrl-C does, and checks it ended cleanly (exit 0 or 130). Prints one line; exits 1 with
the reason (and the command's stderr) when the page is not served. Bounded: 300 s for the start, 120 s
for the stop; a play that does not stop is sent SIGABRT, and Python's fault handler (on in its
environment) prints every thread's stack, so the failure says where it hung.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path

START_S, STOP_S = 300.0, 120.0


def _fail(why: str, stderr: list[str], tail: int = 20) -> None:
    print(f"play_smoke: {why}", file=sys.stderr)
    sys.stderr.writelines(stderr[-tail:])
    sys.exit(1)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="worldpager-play-") as tmp:
        proc = subprocess.Popen(["worldpager", "play", "--port", "0", "--out", str(Path(tmp) / "play.mp4")],
                                cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
        lines: list[str] = []
        url: list[str] = []
        found = threading.Event()

        def read() -> None:
            for line in proc.stderr:
                lines.append(line)
                match = re.search(r"play at (http://\S+)", line)
                if match and not url:
                    url.append(match.group(1))
                    found.set()
            found.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if not found.wait(START_S) or not url:
            proc.kill()
            _fail("worldpager play printed no URL", lines)
        with urllib.request.urlopen(url[0], timeout=60) as response:
            page = response.read().decode("utf-8", "replace")
            status = response.status
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)          # the fault handler prints every thread's stack
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            reader.join(10)
            _fail("worldpager play did not stop after SIGINT (its threads' stacks follow)", lines, tail=200)
        reader.join(10)
        if status != 200 or "<html" not in page.lower():
            _fail(f"the page at {url[0]} answered {status} without the page", lines)
        if code not in (0, 130):
            _fail(f"worldpager play ended with exit {code} after SIGINT", lines)
        print(f"play_smoke: worldpager play served its page ({len(page)} characters) and stopped with exit {code}")


if __name__ == "__main__":
    main()
