"""Damaged spill state is data, never a traceback: ``worldpager resume`` of a stopped run whose spill
directory was damaged afterwards.

One stopped run (micro model, spill directory, save points) is made once; each case copies it, damages
one file the way a crash, a full drive or a bad disk leaves it, and resumes:
* a block entry of the index without a field, a zeroed or truncated ``blocks.dat``: the blocks that do
  not read back are counted misses (a ``note`` record, the chunk records' ``corrupt_blocks``), the run
  finishes (exit 0, summary ``done``);
* an index that is not JSON, not an index, or missing: one line naming the file and the save point,
  exit 1, and nothing changed (the MP4 is not cut).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, run_cli_inprocess

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CHUNKS, STOP_AFTER = 14, 8


STOP = """
import sys
from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
cfg = resolve_session_config(None, {"model": "micro", "device": "cpu", "chunks": int(sys.argv[1]), "save_every": 4,
                                    "out": "k.mp4", "memory": {"pool_slots": 4, "spill": "sp"}})
session = Session(cfg, on_chunk=lambda r: r["chunk"] == int(sys.argv[2]) and session.request_stop())
assert session.run().status == "interrupted"
"""


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """A run of CHUNKS chunks stopped after chunk STOP_AFTER (its last save point made at the stop),
    with relative paths so that a copy of the directory resumes on its own."""
    root = tmp_path_factory.mktemp("stopped")
    subprocess.run([sys.executable, "-c", STOP, str(CHUNKS), str(STOP_AFTER)], cwd=root, env=ENV, check=True,
                   timeout=PATIENCE_S)
    return root


def _damaged(stopped: Path, tmp_path: Path, damage) -> Path:
    work = tmp_path / "run"
    shutil.copytree(stopped, work)
    damage(work / "sp")
    return work


def _resume(work: Path, here: bool = True) -> subprocess.CompletedProcess:
    """``worldpager resume k.mp4`` from ``work``: in this process (the same command, its exit code, its
    stderr and its files), or with ``here=False`` as a process of its own (one case of each kind, so that
    the entry point's own stderr and exit status are seen too)."""
    if here:
        code, out, err = run_cli_inprocess(["resume", "k.mp4", "--quiet"], cwd=work)
        return subprocess.CompletedProcess([], code, out, err)
    return subprocess.run(WORLDPAGER + ["resume", "k.mp4", "--quiet"], cwd=work, env=ENV,
                          capture_output=True, text=True, timeout=PATIENCE_S)


def _edit_index(edit):
    def damage(sp: Path) -> None:
        doc = json.loads((sp / "index.json").read_text())
        edit(doc["blocks"])
        (sp / "index.json").write_text(json.dumps(doc))
    return damage


def _zero_blocks(sp: Path) -> None:
    size = (sp / "blocks.dat").stat().st_size
    with open(sp / "blocks.dat", "r+b") as f:
        f.write(bytes(min(size, 2 ** 20)))


def _truncate_blocks(sp: Path) -> None:
    os.truncate(sp / "blocks.dat", 8192)


def _first_entry_without(field):
    return _edit_index(lambda blocks: blocks[sorted(blocks, key=int)[1]].pop(field))


@pytest.mark.parametrize("damage", [_zero_blocks, _truncate_blocks], ids=["zeroed", "truncated"])
def test_blocks_that_do_not_read_back_are_counted_misses(stopped, tmp_path, damage):
    work = _damaged(stopped, tmp_path, damage)
    result = _resume(work, here=damage is not _zero_blocks)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    records = read_log(work / "k.log.jsonl")
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "done"
    assert records[-1]["corrupt_blocks"] > 0
    notes = [r for r in records if r["type"] == "note"]
    assert notes and notes[0]["misses"], records
    chunks = sorted(r["chunk"] for r in records if r["type"] == "chunk")
    assert chunks == list(range(CHUNKS))


@pytest.mark.parametrize("field", ["length"])   # other fields and values: tests/unit/test_fuzz_readers.py
def test_a_block_entry_without_a_field_is_a_miss(stopped, tmp_path, field):
    work = _damaged(stopped, tmp_path, _first_entry_without(field))
    result = _resume(work, here=False)   # the line is a logging warning: under pytest, its log capture takes it
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert f"is damaged (no '{field}')" in result.stderr
    records = read_log(work / "k.log.jsonl")
    assert records[-1]["status"] == "done"


def _write(text: bytes):
    return lambda sp: (sp / "index.json").write_bytes(text)


def _cut_in_half(sp: Path) -> None:
    text = (sp / "index.json").read_bytes()
    (sp / "index.json").write_bytes(text[:len(text) // 2])


@pytest.mark.parametrize("damage, needle", [
    (_write(b"[]"), "not an index (a JSON list"),
    (_cut_in_half, "not valid JSON"),
    (lambda sp: (sp / "index.json").unlink(), "missing"),
], ids=["list", "half", "missing"])
def test_an_index_that_is_not_one_is_one_line_and_nothing_changes(stopped, tmp_path, damage, needle):
    work = _damaged(stopped, tmp_path, damage)
    before = (work / "k.mp4").read_bytes(), (work / "k.log.jsonl").read_bytes()
    result = _resume(work, here=needle != "missing")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: cannot resume k.mp4"), result.stderr
    assert "sp/index.json" in lines[0] and needle in lines[0] and "savepoint-" in lines[0], lines[0]
    assert ((work / "k.mp4").read_bytes(), (work / "k.log.jsonl").read_bytes()) == before


INTERRUPT_LOAD = """
import signal
import engine.session.loop as loop
from worldpager_cli.main import cli

real = loop.build_world_model


def build_then_ctrl_c(*args, **kwargs):   # a Ctrl-C that lands while the model loads
    model = real(*args, **kwargs)
    signal.raise_signal(signal.SIGINT)
    return model


loop.build_world_model = build_then_ctrl_c
cli()
"""


def test_ctrl_c_while_a_resume_loads_is_interrupted_not_failed(stopped, tmp_path):
    work = _damaged(stopped, tmp_path, lambda sp: None)
    result = subprocess.run([sys.executable, "-c", INTERRUPT_LOAD, "resume", "k.mp4", "--quiet"], cwd=work,
                            env=ENV, capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 130, result.stderr
    assert read_log(work / "k.log.jsonl")[-1]["status"] == "interrupted"
    again = _resume(work)   # and it still resumes
    assert again.returncode == 0, again.stderr
    assert read_log(work / "k.log.jsonl")[-1]["status"] == "done"
