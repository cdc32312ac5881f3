"""The output drive too full for save points: the run finishes its video, each failed save point is
said on stderr when it fails, and the exit is 1 with one line at the end (not 0 with the failures only
in the log).

The drive is a real one: a small ext4 file system on a loop device (needs root and ``mkfs.ext4``;
skipped elsewhere), filled but for about 1 MiB: room for the MP4 and the log of a short micro run, not
for a save point (about 2 MiB each).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import av
import pytest

from engine.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FREE_FOR = 1_000_000


@pytest.fixture
def small_drive(tmp_path):
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        pytest.skip("needs root and mkfs.ext4 for a loop-mounted file system")
    image, mount = tmp_path / "drive.img", tmp_path / "drive"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 * 2 ** 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image)], check=True)
    if subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot loop-mount here")
    try:
        with open(mount / "filler", "wb") as f:
            f.write(b"\0" * (shutil.disk_usage(mount).free - FREE_FOR))
            f.flush()
            os.fsync(f.fileno())
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_save_points_failing_on_a_full_output_drive_are_said_and_exit_1(tmp_path, small_drive):
    out = small_drive / "s.mp4"
    result = subprocess.run(WORLDPAGER + ["generate", "--model", "micro", "--chunks", "6", "--save-every", "2",
                                          "--pool-slots", "4", "--spill", str(tmp_path / "spill"),
                                          "--out", str(out), "--quiet"],
                            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert any(line.startswith("worldpager: warning: save point before chunk") for line in lines), lines
    assert lines[-1].startswith("worldpager: error: ") and "save point(s) could not be written" in lines[-1]
    assert read_log(out.with_suffix(".log.jsonl"))[-1]["status"] == "done"
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 9 + 12 * 5
