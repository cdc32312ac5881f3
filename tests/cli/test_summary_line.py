"""The line a run ends with counts what this run did: a resumed run's seconds per chunk are over the
chunks it made, not over those it inherited from the run it continues (nor does a fork's)."""
from __future__ import annotations

import re

from click.testing import CliRunner

from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from tests_support import inline_decode
from worldpager_cli.main import cli


def test_a_resumed_run_reports_the_chunks_it_made(tmp_path):
    cfg = resolve_session_config(None, {"model": "micro", "chunks": 5, "out": tmp_path / "r.mp4", "save_every": 1,
                                        "memory": {"spill": tmp_path / "sp", "pool_slots": 4}})
    session = Session(inline_decode(cfg), on_chunk=lambda r: r["chunk"] == 2 and session.request_stop())
    assert session.run().status == "interrupted"
    result = CliRunner().invoke(cli, ["resume", str(tmp_path / "r.mp4")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("wrote "))
    made = int(re.search(r"\((\d+) chunks made here, ", line).group(1))
    assert made == 5 - 3          # chunks 0-2 were made before the stop, and a save point holds them
    seconds, per_chunk = float(re.search(r" in ([\d.]+) s \(", line).group(1)), float(re.search(r"([\d.]+) s per chunk", line).group(1))
    assert abs(per_chunk - seconds / made) <= 0.05 / made + 0.006     # the printed values are rounded
