"""A full output drive. Too full for save points: the run finishes its video, each failed save point is
said on stderr when it fails, and the exit is 1 with one line at the end (not 0 with the failures only
in the log). A batch whose out-dir fills: one line, exit 1, every MP4 written plays (no torn last
fragment), and once space is freed the batch goes on.

The drive is a real one: a small ext4 file system on a loop device (needs root and ``mkfs.ext4``;
skipped elsewhere), filled but for about 1 MiB: room for the MP4 and the log of a short micro run, not
for a save point (about 2 MiB each).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import av
import pytest

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, nearly_full_drive

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FREE_FOR = 1_000_000


@pytest.fixture
def small_drive(tmp_path):
    # The run writes as root, which may use the blocks reserved for root: count them.
    with nearly_full_drive(tmp_path, FREE_FOR, root_reserve_too=True) as (mount, _filler):
        yield mount


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


def _leave(mount: Path, free: int) -> None:
    """Grow the filler until ``free`` bytes are left."""
    with open(mount / "filler", "ab") as f:
        st = os.statvfs(mount)
        f.write(b"\0" * max(0, st.f_bfree * st.f_frsize - free))
        f.flush()
        os.fsync(f.fileno())


def _decoded(path: Path) -> int:
    """Every frame of ``path`` decodes, and no bytes follow its last whole fragment."""
    with av.open(str(path)) as c:
        frames = sum(1 for _ in c.decode(video=0))
    return frames


def test_a_batch_whose_out_dir_fills_stops_with_one_line_then_goes_on(tmp_path, small_drive):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"name": "a", "model": "micro", "chunks": 30}\n{"name": "b", "model": "micro", "chunks": 3}\n')
    out_dir = small_drive / "out"
    _leave(small_drive, 200_000)   # room for a few chunks of job a, not for all of it
    result = subprocess.run(WORLDPAGER + ["batch", str(jobs), "--out-dir", str(out_dir)], cwd=tmp_path, env=ENV,
                            capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    # A job that fails says so in its line; a manifest that cannot be written ends the batch with one line.
    said = [line for line in result.stderr.splitlines() if "No space left on device" in line]
    assert said and all(line.startswith("worldpager: ") for line in said), result.stderr
    for video in out_dir.glob("*.mp4"):   # what was written plays, and holds what its log says
        chunks = [r for r in read_log(video.with_suffix(".log.jsonl")) if r["type"] == "chunk"]
        assert _decoded(video) == (chunks[-1]["frames_total"] if chunks else 0)
    (small_drive / "filler").unlink()
    again = subprocess.run(WORLDPAGER + ["batch", str(jobs), "--out-dir", str(out_dir)], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=PATIENCE_S)
    assert again.returncode == 0, again.stderr
    assert _decoded(out_dir / "a.mp4") == 9 + 12 * 29 and _decoded(out_dir / "b.mp4") == 9 + 12 * 2
