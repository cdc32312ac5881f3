"""Runs with save points, stopped or killed, for the tests of spill drives that fail, fill up or move
(importable because tests/ is on sys.path via conftest).

``stopped_run`` makes a micro-model run of ``CHUNKS`` chunks with a spill directory and save points every
2 chunks, stopped after chunk ``stop_after`` (a last save point at the stop), with relative paths, so a
copy of its directory resumes on its own; ``killed_run`` the same run killed with SIGKILL.
``--late-prefetch wait`` keeps the frames independent of the machine's speed, so a resumed run can be
compared frame for frame with the same run never stopped (``stop_after`` -1). ``worldpager`` runs the CLI
in a subprocess, optionally through ``failing_drive`` (an injected EIO/ENOMEM under a path).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import av
import numpy as np

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, sigkill_when_ready

TESTS = Path(__file__).resolve().parent
CHUNKS = 10
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

SESSION = """
import sys
import time
from pathlib import Path
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
chunks, stop_after, out, spill = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
cfg = resolve_session_config(None, {"model": "micro", "device": "cpu", "chunks": chunks, "save_every": 2, "out": out,
                                    "memory": {"pool_slots": 4, "spill": spill, "late_prefetch": "wait"}})
"""
RUN = SESSION + """
session = Session(cfg, on_chunk=lambda r: r["chunk"] == stop_after and session.request_stop())
assert session.run().status == ("done" if stop_after < 0 else "interrupted")
"""
# Killed (SIGKILL, by ``tests_support.sigkill_when_ready``) while chunk ``stop_after``'s record is handed out,
# once the save point before chunk ``stop_after - 1`` is on the drive.
KILLED = SESSION + """
def on_chunk(record):
    if record["chunk"] == stop_after:
        saved = Path(out + ".save") / f"savepoint-{stop_after - 1:08d}.wps"
        deadline = time.monotonic() + 600   # PATIENCE_S: a save point that never comes fails the test
        while not saved.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("ready" if saved.exists() else f"no save point {saved}", flush=True)
        time.sleep(3600)
Session(cfg, on_chunk=on_chunk).run()
"""


def stopped_run(root: Path, stop_after: int, chunks: int = CHUNKS, out: str = "k.mp4", spill: str = "sp") -> Path:
    """``root`` holding a run stopped after chunk ``stop_after`` (-1: run to the end)."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", RUN, str(chunks), str(stop_after), out, spill], cwd=root, env=ENV,
                   check=True, timeout=PATIENCE_S)
    return root


def killed_run(root: Path, spill: Path, stop_after: int = 5, chunks: int = CHUNKS, out: str = "k.mp4") -> Path:
    """``root`` holding a run killed with SIGKILL during chunk ``stop_after`` (odd: a save point before it)."""
    assert stop_after % 2 == 1
    root.mkdir(parents=True, exist_ok=True)
    assert sigkill_when_ready(KILLED, str(chunks), str(stop_after), out, str(spill), cwd=root, env=ENV) == -9
    return root


def worldpager(cwd: Path, *args: str, fail_under: Path | None = None, errno_name: str = "EIO",
               names: str = "", timeout: float = PATIENCE_S) -> subprocess.CompletedProcess:
    """``worldpager ARGS`` in a subprocess; with ``fail_under``, every path under it fails with ``errno_name``
    (only the file ``names`` under it, when given: ``failing_drive``)."""
    env = dict(ENV)
    code = "from worldpager_cli.main import cli; cli()"
    if fail_under is not None:
        code = "import failing_drive; " + code
        env.update(PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]),
                   FAILING_DRIVE_UNDER=str(fail_under), FAILING_DRIVE_ERRNO=errno_name, FAILING_DRIVE_NAMES=names)
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 1, stderr exactly one ``worldpager: error:`` line holding every needle, no traceback."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith("worldpager: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` and a digest of its bytes (output locks aside: they come and go)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


def frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def decodes_to_its_log(video: Path, log: Path) -> None:
    """The MP4 decodes to exactly the frames its log's chunk records hold."""
    assert len(frames(video)) == sum(r["frames"] for r in read_log(log) if r["type"] == "chunk")


def same_frames(a: Path, b: Path) -> None:
    ours, theirs = frames(a), frames(b)
    assert len(ours) == len(theirs) and all(np.array_equal(x, y) for x, y in zip(ours, theirs)), "frames differ"
