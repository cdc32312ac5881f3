"""A trajectory the camera cannot follow closely: one warning line on stderr (also with --quiet), and the
log header's ``warnings`` and ``tracking``."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from engine.runtime.telemetry import read_log
from worldpager_cli.main import cli


def turn(tmp_path: Path, name: str, seconds: float) -> Path:
    """180 degrees to the right in ``seconds`` (two keyframes of 90), then held."""
    path = tmp_path / name
    path.write_text(f"keyframes:\n  - {{t: 0, yaw: 0}}\n  - {{t: {seconds / 2}, yaw: 90}}\n"
                    f"  - {{t: {seconds}, yaw: 180}}\n  - {{t: {seconds + 3}, yaw: 180}}\n")
    return path


def generate(tmp_path: Path, trajectory: Path):
    out = tmp_path / f"{trajectory.stem}.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", "micro", "--chunks", "3", "--save-every", "0",
                                      "--quiet", "--trajectory", str(trajectory), "--out", str(out)],
                                catch_exceptions=False)
    return result, read_log(out.with_suffix(".log.jsonl"))[0]


def test_a_fast_turn_is_warned_of_once_on_stderr_and_in_the_header(tmp_path):
    path = turn(tmp_path, "fast.yaml", 1.0)
    result, header = generate(tmp_path, path)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""                                       # --quiet: no progress
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"worldpager: warning: {path} cannot be followed exactly: ")
    assert "deg of yaw behind (frame " in lines[0] and "it turns at most 24 deg/s" in lines[0]
    assert header["type"] == "header" and header["warnings"] == [lines[0].removeprefix("worldpager: warning: ")]
    tracking = header["tracking"]
    assert tracking["yaw_deg"] > 5 and isinstance(tracking["yaw_frame"], int)
    assert {"position", "pitch_deg", "position_frame", "pitch_frame"} <= tracking.keys()


def test_a_slow_turn_gives_no_warning(tmp_path):
    result, header = generate(tmp_path, turn(tmp_path, "slow.yaml", 10.0))
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == ""
    assert header["warnings"] == [] and header["tracking"]["yaw_deg"] < 5
