"""A run that will make no save points says so before its first chunk, not after a crash: without
``--spill`` its memory lives only in RAM, and a save point needs it on a drive. Its resume names that
reason instead of "the run stopped before its first one". ``--save-every 0`` (the user's own choice)
and a run with a spill directory get no note.
"""
from __future__ import annotations

from click.testing import CliRunner

from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import one_line_error
from worldpager_cli.main import cli

NOTE = "this run makes no save points, so it cannot be resumed or forked"


def _generate(tmp_path, name, *extra):
    out = tmp_path / f"{name}.mp4"
    result = CliRunner().invoke(cli, ["generate", "--model", "micro", "--chunks", "2", "--out", str(out), *extra],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result, read_log(out.with_suffix(".log.jsonl"))[0]


def test_the_note_comes_before_the_first_chunk_and_is_in_the_header(tmp_path):
    result, header = _generate(tmp_path, "a")
    lines = result.stderr.splitlines()
    note = next(line for line in lines if NOTE in line)
    assert note.startswith("worldpager: warning: ") and "--spill" in note
    assert sum(NOTE in line for line in lines) == 1
    everything = result.output.splitlines()
    first_chunk = next(i for i, line in enumerate(everything) if line.startswith("chunk "))
    assert everything.index(note) < first_chunk
    assert any(NOTE in w for w in header["warnings"])


def test_no_note_with_a_spill_directory_or_without_save_points(tmp_path):
    for name, extra in (("b", ["--spill", str(tmp_path / "sp"), "--pool-slots", "4"]), ("c", ["--save-every", "0"])):
        result, header = _generate(tmp_path, name, *extra)
        assert NOTE not in result.stderr and not any(NOTE in w for w in header["warnings"])


def test_resuming_such_a_run_names_the_reason(tmp_path):
    cfg = resolve_session_config(None, {"model": "micro", "chunks": 4, "out": tmp_path / "r.mp4", "save_every": 1})
    session = Session(cfg, on_chunk=lambda r: r["chunk"] == 1 and session.request_stop())
    assert session.run().status == "interrupted"
    line = one_line_error(CliRunner().invoke(cli, ["resume", str(tmp_path / "r.mp4")]), "no save point")
    assert "without --spill" in line and "only in RAM" in line
