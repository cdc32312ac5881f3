"""``worldpager bench quota``: a short run prints its table and a JSON line whose quota rows kept to their
quota (shares of the unbounded run's disk) and whose rates and PSNRs are real numbers."""
from __future__ import annotations

import json
import subprocess

from tests_support import PATIENCE_S, WORLDPAGER


def test_bench_quota_keeps_each_row_under_its_quota(tmp_path):
    done = subprocess.run(WORLDPAGER + ["bench", "quota", "--seeds", "1", "--kinds", "glance", "--chunks", "30",
                                        "--shares", "0.5", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=PATIENCE_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.splitlines()[-1])
    unbounded, half = doc["summary"]
    assert unbounded["arm"] == "unbounded" and half["arm"] == "quota50%"
    assert 0 < half["disk_alloc_max"] <= unbounded["disk_bytes_written"] * 0.5
    assert 0 <= half["first_choice_rate"] <= 1 and half["psnr_observed"] > 0 and half["psnr_generated"] > 0
    assert "quota50%" in done.stdout and "1st choice" in done.stdout
    assert not list(tmp_path.iterdir())   # the sessions' folders are removed
