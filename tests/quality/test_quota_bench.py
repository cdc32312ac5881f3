"""``worldpager bench quota``: a short run prints its table and a JSON line whose quota rows kept to their
quota (shares of the unbounded run's disk) and whose rates and PSNRs are real numbers."""
from __future__ import annotations

import json
from tests_support import run_cli_inprocess


def test_bench_quota_keeps_each_row_under_its_quota(tmp_path):
    code, stdout, err = run_cli_inprocess(["bench", "quota", "--seeds", "1", "--kinds", "glance", "--chunks", "30",
                                           "--shares", "0.5", "--workdir", tmp_path], cwd=tmp_path)   # in this process
    assert code == 0, err
    doc = json.loads(stdout.splitlines()[-1])
    unbounded, half = doc["summary"]
    assert unbounded["arm"] == "unbounded" and half["arm"] == "quota50%"
    assert 0 < half["disk_alloc_max"] <= unbounded["disk_bytes_written"] * 0.5
    assert 0 <= half["first_choice_rate"] <= 1 and half["psnr_observed"] > 0 and half["psnr_generated"] > 0
    assert "quota50%" in stdout and "1st choice" in stdout
    assert not list(tmp_path.iterdir())   # the sessions' folders are removed
