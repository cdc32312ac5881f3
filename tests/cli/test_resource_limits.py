"""Out of memory, threads or file descriptors: one line naming the limit, exit 1, no traceback, no hang;
a run that fails before its first chunk leaves nothing it created (and nothing the user had is lost);
a run that fails later leaves an MP4 that decodes to exactly the frames its log records, and the log's
summary.

Real limits: ``resource.setrlimit`` in the child, either before it starts (``preexec_fn``: an address
space too small to load torch, too few file descriptors for the session's set-up; both measured with
wide margins: the command-line interface imports in 30 MiB of address space, torch needs 650 MiB; a
micro session needs 9 descriptors without and 12 with a spill directory, 8 is short of both) or at a
chosen point of the run (the child lowers its own limit there, then allocates or opens as the session
would: a controlled fault, so the test does not depend on how much memory the session happens to use).
"""
from __future__ import annotations

import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.io.video import count_frames
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S

MiB = 2 ** 20
IMPORT_AS_BYTES = 200 * MiB   # above the CLI's 30 MiB, below the 650 MiB that importing torch maps
SETUP_NOFILE = 8              # a micro session needs 9 (12 with --spill)

# ``python -c`` code: worldpager with a fault at a chosen point. argv[1]: what fails — ``nofile`` (the
# open-file limit is lowered to the descriptors open now: the session's next open fails), ``torch``,
# ``numpy``, ``python`` (an allocation of 1 GiB with 64 MiB of address space left), ``thread`` (a thread
# whose stack does not fit); argv[2]: where — ``setup`` (the memory, its pool and spill directory exist,
# the log's header is next: nothing generated yet) or ``run`` (the memory step of chunk 2).
FAULT = r"""
import os, resource, sys, threading
import numpy, torch
import engine.session.loop as loop
from engine.session.memory import SessionMemory

kind, where = sys.argv[1], sys.argv[2]

def vm_bytes():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))

def fault():
    if kind == "nofile":
        open_now = len(os.listdir("/proc/self/fd")) - 1   # less the listing's own descriptor
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_now, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        return
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + 64 * 2 ** 20, resource.getrlimit(resource.RLIMIT_AS)[1]))
    if kind == "torch":
        torch.empty(2 ** 30, dtype=torch.uint8)
    elif kind == "numpy":
        numpy.ones(2 ** 30, dtype=numpy.uint8)
    elif kind == "python":
        bytearray(2 ** 30)
    else:
        threading.stack_size(256 * 2 ** 20)
        try:
            threading.Thread(target=lambda: None).start()
        finally:
            threading.stack_size(0)

if where == "setup":
    header = loop.Session._header
    def header_after_fault(self, *args, **kwargs):
        fault()
        return header(self, *args, **kwargs)
    loop.Session._header = header_after_fault
else:
    prepare = SessionMemory.prepare
    def prepare_with_fault(self, chunk):
        if chunk == 2:
            fault()
        return prepare(self, chunk)
    SessionMemory.prepare = prepare_with_fault
sys.argv = ["worldpager"] + sys.argv[3:]
from worldpager_cli.main import cli
cli()
"""

WORLDPAGER = [sys.executable, "-c", "from worldpager_cli.main import cli; cli()"]
LIMIT_NAMED = {"nofile": "ulimit -n", "torch": "ulimit -v", "numpy": "ulimit -v", "python": "ulimit -v",
               "thread": "ulimit -v"}


def limited(which: int, soft: int):
    def set_limit() -> None:
        resource.setrlimit(which, (soft, resource.getrlimit(which)[1]))
    return set_limit


def run(cwd: Path, command: list[str], *args: str, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run(command + list(args), cwd=cwd, capture_output=True, text=True, timeout=PATIENCE_S,
                          preexec_fn=preexec_fn)


def one_error_line(result: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 1, nothing on stdout, and stderr exactly one ``worldpager: error:`` line (no traceback)."""
    assert result.returncode == 1, result.stderr
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def generate(out: str, *extra: str) -> list[str]:
    return ["generate", "--model", "micro", "--chunks", "4", "--out", out, "--quiet", *extra]


def contents(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (relative name -> bytes): what a failed run must leave as it was."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory) -> Path:
    """An earlier finished run at ``o.mp4`` with its save points (made once for the module)."""
    where = tmp_path_factory.mktemp("earlier")
    result = run(where, WORLDPAGER, *generate("o.mp4", "--spill", "old.spill", "--save-every", "1"))
    assert result.returncode == 0, result.stderr
    return where


@pytest.fixture()
def earlier(tmp_path, earlier_run) -> dict[str, bytes]:
    """A copy of the earlier run in ``tmp_path`` and a directory holding a file of the user's
    (``mine``); returns everything under tmp_path."""
    shutil.copytree(earlier_run, tmp_path, dirs_exist_ok=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("the user's")
    return contents(tmp_path)


def test_an_address_space_too_small_to_load_torch_is_one_line(tmp_path):
    result = run(tmp_path, WORLDPAGER, *generate("o.mp4", "--spill", "sp"),
                 preexec_fn=limited(resource.RLIMIT_AS, IMPORT_AS_BYTES))
    one_error_line(result, "out of memory", f"ulimit -v {IMPORT_AS_BYTES // 1024}", "RLIMIT_AS")
    assert list(tmp_path.iterdir()) == []


def test_too_few_file_descriptors_at_set_up_leave_nothing_behind(tmp_path, earlier):
    """``ulimit -n 8``: the MP4, the log and the config exist when the memory's set-up runs out; they
    go, the spill directory made for the run goes, and the earlier run at the same path (replaced with
    --overwrite) is as it was, save points included."""
    result = run(tmp_path, WORLDPAGER, *generate("o.mp4", "--overwrite", "--spill", "sp/deep"),
                 preexec_fn=limited(resource.RLIMIT_NOFILE, SETUP_NOFILE))
    one_error_line(result, "out of file descriptors", f"ulimit -n {SETUP_NOFILE}", "RLIMIT_NOFILE")
    assert contents(tmp_path) == earlier
    assert not (tmp_path / "sp").exists()


@pytest.mark.parametrize("kind", ["nofile", "torch", "numpy", "python", "thread"])
def test_a_limit_reached_during_set_up_leaves_only_what_was_there(tmp_path, earlier, kind):
    """The fault comes after the memory's set-up (its pool, its threads, its spill directory and lock)
    and before the first chunk: the files the run made go, in a spill directory that was there before
    only its own; the earlier run it would have replaced is whole."""
    result = run(tmp_path, [sys.executable, "-c", FAULT, kind, "setup"],
                 *generate("o.mp4", "--overwrite", "--spill", "mine"))
    one_error_line(result, LIMIT_NAMED[kind])
    assert contents(tmp_path) == earlier


@pytest.mark.parametrize("kind", ["nofile", "torch", "thread"])
def test_a_limit_reached_mid_run_leaves_a_video_that_decodes_to_its_log(tmp_path, kind):
    out = tmp_path / "o.mp4"
    result = run(tmp_path, [sys.executable, "-c", FAULT, kind, "run"], *generate("o.mp4", "--spill", "sp"))
    one_error_line(result, LIMIT_NAMED[kind])
    records = read_log(tmp_path / "o.log.jsonl")
    chunks = [r for r in records if r["type"] == "chunk"]
    assert [r["chunk"] for r in chunks] == [0, 1]
    assert records[-1]["type"] == "summary" and records[-1]["status"] == "failed", records[-1]
    assert count_frames(out) == chunks[-1]["frames_total"]
    assert (tmp_path / "o.config.json").is_file()
