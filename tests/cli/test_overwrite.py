"""``--overwrite``: the new run's files replace an earlier run's only once its first chunk is in the MP4.

Before that (loading, the memory's set-up, the first chunk) they are made under hidden staging names
and the earlier run's MP4, log, config and save points are as they were; a run that fails or is stopped
there removes only its staged files. (Failures from the environment's limits before the first chunk:
``test_resource_limits.py``.)
"""
from __future__ import annotations

from pathlib import Path

from engine.io.video import count_frames
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.session.resume import with_absolute_paths
from engine.session.save import savepoint_dir
from engine.session.savepoint import savepoint_paths
from engine.runtime.telemetry import read_log
from tests_support import run_cli_inprocess


def _generate(cwd: Path, *args: str) -> None:
    """``worldpager generate`` of the micro model in this process, run from ``cwd`` (what is claimed is
    the files it leaves; the staging before the first chunk in a process of its own:
    ``test_resource_limits.py``)."""
    code, _, err = run_cli_inprocess(["generate", "--model", "micro", "--quiet", *args], cwd=cwd)
    assert code == 0, err


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_overwrite_replaces_the_earlier_run_and_its_save_points(tmp_path):
    _generate(tmp_path, "--chunks", "4", "--out", "o.mp4", "--spill", "sp", "--save-every", "1")
    assert savepoint_paths(savepoint_dir(tmp_path / "o.mp4"))
    _generate(tmp_path, "--chunks", "2", "--out", "o.mp4", "--overwrite")
    records = read_log(tmp_path / "o.log.jsonl")
    assert [r["chunk"] for r in records if r["type"] == "chunk"] == [0, 1]
    assert count_frames(tmp_path / "o.mp4") == records[-2]["frames_total"]
    assert savepoint_paths(savepoint_dir(tmp_path / "o.mp4")) == []   # never resumed into the new run
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")]


def test_a_run_stopped_before_its_first_chunk_leaves_the_earlier_run_as_it_was(tmp_path):
    _generate(tmp_path, "--chunks", "3", "--out", "o.mp4", "--spill", "sp", "--save-every", "1")
    before = _files(tmp_path)
    cfg = with_absolute_paths(resolve_session_config(None, {"model": "micro", "chunks": 2, "out": tmp_path / "o.mp4"}))
    session = Session(cfg)   # the new files are staged: the earlier ones are untouched
    assert _files(tmp_path).keys() > before.keys()
    assert {k: v for k, v in _files(tmp_path).items() if k in before} == before
    session.request_stop()   # Ctrl-C during the load: the run stops before its first chunk
    result = session.run()
    assert result.status == "interrupted" and result.chunks == 0
    assert _files(tmp_path) == before
