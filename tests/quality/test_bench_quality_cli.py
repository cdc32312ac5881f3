"""``worldpager bench quality --quick`` end to end: a smoke test that says so, every kind of episode a
real observed-then-generated session through the store and tiers, the observed and generated rows, the
JSON line with the per-class figures, the figure's data, the side-by-side videos and the still."""
from __future__ import annotations

import json

from click.testing import CliRunner

from engine.io.video import count_frames
from engine.report.plots import read_png_data
from engine.quality.arms import POSITION_ARMS
from engine.quality.quick import QUICK_HORIZON
from engine.quality.revisit_paths import KINDS, QUICK
from worldpager_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, ["bench", "quality", *args], catch_exceptions=False)


def test_quick_is_a_smoke_test_of_everything_end_to_end(tmp_path):
    out = tmp_path / "out"
    result = run("--quick", "--out-dir", str(out), "--workdir", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("smoke test")
    assert any(line.startswith("observed returns") for line in lines)
    assert any(line.startswith("generated returns") for line in lines)
    assert "n/a (" in result.output and "Not covered" in result.output      # 1 arena: no intervals

    summary = json.loads(lines[-1])
    assert summary["bench"] == "quality" and summary["smoke_test"] is True and summary["params"]["quick"] is True
    revisit = summary["revisit"]
    assert revisit["episodes"] == len(KINDS) and set(revisit["kinds"]) == set(KINDS)
    assert set(revisit["classes"]) == {"window", "bf16", "int4"}
    for cls in ("observed", "generated", "all"):
        figures = revisit["classes"]["int4"][cls]
        assert figures["frames"] > 0 and figures["psnr"] > 0 and figures["psnr_episode_mean"] > 0
        assert revisit["gain_over_window"]["int4"][cls]["ci"] is None
        assert revisit["retention"]["int4"][cls]["ci_pct"] is None
    assert revisit["classes"]["bf16"]["generated"]["psnr_first"] > 0
    assert revisit["start_pose"]["start_frames"] < revisit["start_pose"]["revisit_frames"]
    assert revisit["retention"]["bf16"]["observed"]["retention_pct"] == 100.0 and revisit["hits"] > 0

    rows = [json.loads(line) for line in (out / "quality-rows.jsonl").read_text().splitlines()]
    sessions = [r for r in rows if r["experiment"] == "revisit"]
    assert all(r["observed_chunks"] == QUICK.observed_chunks and r["smoke_test"] for r in sessions)
    positions = [r for r in rows if r["experiment"] == "positions"]
    assert [r["arm"] for r in positions] == ["below"] + [a.name for a in POSITION_ARMS]
    assert all(r["return_chunk"] >= QUICK_HORIZON for r in positions[1:])
    assert set(summary["drift"]) == {"bf16", "int4"} and len(summary["drift"]["int4"]["psnr"]) == 2

    figure = read_png_data(out / "quality.png")
    assert len(figure["panels"]) == 4 and "SMOKE TEST" in figure["title"]
    assert figure["panels"][0]["series"][0]["x"] == ["window", "bf16", "int4"]
    video = out / "sidebyside-int4.mp4"
    assert count_frames(video) == 3 * QUICK.chunks and (out / "sidebyside-int4.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("worldpager-quality")]   # temp dirs removed

    again = run("--from-rows", str(out / "quality-rows.jsonl"), "--out-dir", str(tmp_path / "again"))
    assert again.output.startswith("smoke test") and json.loads(again.output.strip().splitlines()[-1])["smoke_test"]
    assert "named the same arm and episode" not in again.output

    # Two runs merged: the baselines each run holds count once, and the figures are the single run's.
    twice = run("--from-rows", str(out / "quality-rows.jsonl"), "--from-rows", str(out / "quality-rows.jsonl"),
                "--out-dir", str(tmp_path / "twice"))
    assert f"{len(rows)} row(s) named the same arm and episode" in twice.output
    merged = json.loads(twice.output.strip().splitlines()[-1])["revisit"]
    assert merged["classes"] == json.loads(again.output.strip().splitlines()[-1])["revisit"]["classes"]


def test_bad_options_are_one_line_errors(tmp_path):
    for args, named in ((["--only", "speed"], "speed"), (["--kinds", "spin,spiral"], "spiral"),
                        (["--chunks", "8"], "'--chunks': 8"), (["--observed", "40"], "'--observed': 40"),
                        (["--arms", "int3"], "int3")):
        result = CliRunner().invoke(cli, ["bench", "quality", *args, "--out-dir", str(tmp_path)])
        assert result.exit_code == 2 and named in result.output and len(result.output.strip().splitlines()) == 1
