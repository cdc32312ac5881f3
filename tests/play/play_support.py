"""Helpers of the play tests: a ``worldpager play`` subprocess (the arena model, a small cap, a spill
directory, a short look around: 3 chunks) and the page's URL read from its stderr, the scripted player, and the frames of an MP4."""
from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from pathlib import Path

import av
import numpy as np

from engine.play.client import Step, drive
from tests_support import PATIENCE_S, WORLDPAGER


class PlayProcess:
    """``worldpager play`` in a subprocess; ``url`` once it serves; ``stderr`` as it came."""

    def __init__(self, tmp_path: Path, name: str, *extra: str, chunks: int = 8, look_around: int = 3):
        self.out = tmp_path / f"{name}.mp4"
        self.log = tmp_path / f"{name}.log.jsonl"
        self.recording = tmp_path / f"{name}.trajectory.yaml"
        args = ["play", "--port", "0", *extra]
        if "--from" not in extra:
            args += ["--out", str(self.out), "--chunks", str(chunks), "--spill", str(tmp_path / f"{name}.spill"), "--pool-slots", "4",
                     "--save-every", "2", "--late-prefetch", "wait", "--look-around", str(look_around)]
        self.proc = subprocess.Popen(WORLDPAGER + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=tmp_path)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self._wait_url()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def _wait_url(self) -> str | None:
        deadline = time.time() + PATIENCE_S
        while time.time() < deadline:
            for line in list(self.lines):
                if "play at http://" in line:
                    return line.split("play at ", 1)[1].strip()
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                return None
            time.sleep(0.05)
        raise AssertionError("worldpager play did not print its URL")

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def finish(self, timeout: float = PATIENCE_S) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=PATIENCE_S)


def play_script(chunks: int, url: str, script: list[Step]):
    """The scripted player on ``url`` for ``chunks`` chunks, then Stop."""
    return asyncio.run(drive(url, script, chunks, timeout_s=PATIENCE_S))


def walk_and_turn() -> list[Step]:
    """Hold W, then W and L (turn right while walking), then nothing."""
    return [Step(0.0, ("w",)), Step(1.5, ("w", "l")), Step(3.0, ())]


def mp4_frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
