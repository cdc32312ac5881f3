"""A run with ``--weights int8`` resumes to the frames of the uninterrupted run; a resume or fork asking for
another weight format than its save point's is refused in one line."""
from __future__ import annotations

import json

from click.testing import CliRunner

from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.session.resume import resume_point
from tests_support import inline_decode, one_line_error


def _cfg(tmp_path, name, **extra):
    return resolve_session_config(None, {"model": "arena", "look_around": 0, "chunks": 4, "weights": "int8",
                                         "out": tmp_path / f"{name}.mp4",
                                         "memory": {"late_prefetch": "wait", **extra.pop("memory", {})}, **extra})


def test_an_int8_run_resumes_exactly_and_another_format_is_refused(tmp_path):
    from worldpager_cli.main import cli

    whole = _cfg(tmp_path, "whole", save_every=0)
    assert Session(whole).run().status == "done"
    cut = _cfg(tmp_path, "cut", save_every=1, memory={"pool_slots": 4, "spill": tmp_path / "spill"})
    session = Session(inline_decode(cut), on_chunk=lambda r: r["chunk"] == 1 and session.request_stop())
    assert session.run().status == "interrupted"

    runner = CliRunner()
    one_line_error(runner.invoke(cli, ["resume", "-q", str(cut.out), "--weights", "bf16"]),
                   "--weights int8", "--weights bf16")
    traj = tmp_path / "t.yaml"
    traj.write_text("segments:\n  - {keys: w, frames: 12}\n")
    one_line_error(runner.invoke(cli, ["fork", "-q", str(cut.out), "--trajectory", str(traj), "--weights", "bf16",
                                       "--out", str(tmp_path / "branch.mp4")]), "--weights int8", "--weights bf16")
    assert not (tmp_path / "branch.mp4").exists()

    config = cut.out.with_suffix(".config.json")          # the resolved config edited by hand
    saved = config.read_text()
    config.write_text(json.dumps({**json.loads(saved), "weights": "bf16"}))
    one_line_error(runner.invoke(cli, ["resume", "-q", str(cut.out)]), "save point", "--weights int8")
    config.write_text(saved)

    again, sp, _ = resume_point(cut.out, weights="int8")
    assert sp.facts["weights"] == "int8"
    assert Session(again, resume_from=sp).run().status == "done"
    assert cut.out.read_bytes() == whole.out.read_bytes()
