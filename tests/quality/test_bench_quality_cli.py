"""``worldpager bench quality --quick`` end to end: every arm a real session through the store and
tiers, the tables, the JSON line, the figure's data, the side-by-side videos and the still."""
from __future__ import annotations

import json

from click.testing import CliRunner

from engine.io.video import count_frames
from engine.plots import read_png_data
from engine.quality.arms import POSITION_ARMS, REVISIT_ARMS
from engine.quality.quick import QUICK_HORIZON
from worldpager_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, ["bench", "quality", *args], catch_exceptions=False)


def test_quick_runs_every_arm_end_to_end(tmp_path):
    out = tmp_path / "out"
    result = run("--quick", "--out-dir", str(out), "--workdir", str(tmp_path))
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["bench"] == "quality" and summary["params"]["quick"] is True

    revisit = summary["revisit"]
    assert set(revisit["table"]) == {a.name for a in REVISIT_ARMS}
    for arm in ("int8", "int4", "int2", "k1", "k6", "sink", "sync", "on-demand"):
        r = revisit["retention"][arm]["psnr_truth"]
        assert r["episodes"] == 1 and r["ci_pct"][0] <= r["retention_pct"] <= r["ci_pct"][1]
    assert revisit["retention"]["bf16"]["psnr_truth"]["retention_pct"] == 100.0
    assert revisit["hits"] > 0 and revisit["stale_fallback_cost_db"]["pairs"] == 1
    memory, window = revisit["table"]["bf16"]["3"], revisit["table"]["window"]["3"]
    assert memory["psnr_truth"] > window["psnr_truth"] and memory["psnr_first"] > window["psnr_first"]

    rows = [json.loads(line) for line in (out / "quality-rows.jsonl").read_text().splitlines()]
    positions = [r for r in rows if r["experiment"] == "positions"]
    assert [r["arm"] for r in positions] == ["below"] + [a.name for a in POSITION_ARMS]
    assert all(r["return_chunk"] >= QUICK_HORIZON for r in positions[1:])
    assert {a.name for a in POSITION_ARMS} <= set(summary["positions"])
    assert set(summary["drift"]) == {"bf16", "int4"} and len(summary["drift"]["int4"]["psnr"]) == 2

    figure = read_png_data(out / "quality.png")
    assert len(figure["panels"]) == 4
    assert figure["panels"][0]["series"][0]["x"] == [a.name for a in REVISIT_ARMS]
    video = out / "sidebyside-int4.mp4"
    assert count_frames(video) == 3 * 10 and (out / "sidebyside-int4.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("worldpager-quality")]   # temp dirs removed


def test_bad_options_are_one_line_errors(tmp_path):
    for args, named in ((["--only", "speed"], "speed"), (["--gaps", "0,10"], "0,10"), (["--arms", "int3"], "int3")):
        result = run(*args, "--out-dir", str(tmp_path))
        assert result.exit_code == 1 and named in result.output and len(result.output.strip().splitlines()) == 1
