"""``worldpager bench keys``: a table of int4 key errors both ways and a last line of JSON.

Runs the micro model's session (seeded weights) for 3 chunks and checks the command's shape, not its
figures' size (benchmarks are never timed or thresholded here): four rows, one per placement and
convention, each error a positive number, and the two conventions' errors different (int4 sees
different keys).
"""
from __future__ import annotations

import json

from click.testing import CliRunner

from worldpager_cli.main import cli


def test_bench_keys_prints_a_table_and_json():
    result = CliRunner().invoke(cli, ["bench", "keys", "--chunks", "3"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    doc = json.loads(lines[-1])
    assert doc["bench"] == "keys" and doc["frames"] is None
    rows = {(r["place"], r["keys"]): r for r in doc["rows"]}
    assert set(rows) == {(p, k) for p in ("native", "re-placed") for k in ("post-rope", "pre-rope")}
    for r in rows.values():
        assert r["memory_chunks"] == 2 and all(r[m] > 0 for m in ("key_rel", "logit_rel", "logit_max", "out_rel"))
    assert rows["native", "pre-rope"]["key_rel"] != rows["native", "post-rope"]["key_rel"]
    assert sum(line.startswith("run micro") for line in lines) == 4
