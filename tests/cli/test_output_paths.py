"""Outputs that are not plain files, and one file under two names (``engine/files/output_files.py``,
``engine/session/ownership.py``).

Every file a command writes at a name the user gives, or one derived from it, is refused with one line
before anything is written when it is a FIFO (opening it would wait for a reader forever), a socket, a
character device (``/dev/null``'s kind), a directory, or a symlink to one of them; the thing that was
there is left as it was. Two runs never write one file: a second run naming a running one's MP4 or log
through a symlink, a hard link or ``..`` is one line naming the writer's pid, and the first run's video
then decodes to the frames its log records. Commands refused here never reach the model, so they run
in this process (bounded by ``hang_guard``: a FIFO opened for writing would block).
"""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.errors import OutputError
from engine.io.video import VideoWriter, count_frames
from engine.files.output_files import OutputInUseError, check_output_file, refuse_in_use
from engine.session.ownership import claim_output, lock_path
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, hang_guard, run_cli_inprocess, start_generate, wait_for_chunks
from worldpager_cli.main import cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
YAW = Path(__file__).resolve().parents[2] / "trajectories" / "yaw.yaml"
KINDS = ("fifo", "socket", "device", "directory", "link-to-fifo")
MADE = {"fifo": stat.S_ISFIFO, "socket": stat.S_ISSOCK, "device": stat.S_ISCHR, "directory": stat.S_ISDIR,
        "link-to-fifo": stat.S_ISFIFO}
WORDS = {"fifo": "named pipe (FIFO)", "socket": "a socket", "device": "a character device",
         "directory": "a directory", "link-to-fifo": "a symlink to"}


def make(path: Path, kind: str) -> None:
    """A ``kind`` at ``path`` (relative to the current directory: a socket's name must be short)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))   # the socket file stays after the socket is closed
    elif kind == "device":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))   # what /dev/null is
        except PermissionError:
            pytest.skip("making a device node needs root")
    elif kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path.with_name(path.name + ".target"))
        path.symlink_to(path.name + ".target")


def still(path: Path, kind: str) -> None:
    """``path`` is the ``kind`` that was made there, untouched."""
    assert MADE[kind](os.stat(path).st_mode), (path, kind)
    if kind == "directory":
        assert list(path.iterdir()) == []


def listing(directory: Path) -> list[tuple[str, int]]:
    return sorted((p.name, stat.S_IFMT(os.lstat(p).st_mode)) for p in directory.iterdir())


def here(*args):
    """``worldpager ARGS`` in this process, bounded (a FIFO opened for writing would block)."""
    with hang_guard(PATIENCE_S, doing=f"worldpager {' '.join(map(str, args))}"):
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def refused(result, *needles: str) -> str:
    """Exit 1, exactly one ``worldpager: error:`` line, no traceback, holding every needle."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1, result.output
    assert [line for line in lines if line.startswith("worldpager: error: ")] == lines[-1:], result.output
    assert "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def run(cwd: Path, *args) -> None:
    """``worldpager ARGS`` run to its end in this process, from ``cwd`` (a run the tests read, not test)."""
    code, _, err = run_cli_inprocess(args, cwd=cwd)
    assert code == 0, err


# ---- 1. outputs that are not plain files ------------------------------------------------------------

GENERATE_OUTPUTS = {"--out": "o.mp4", "--log": "o.log.jsonl", "the resolved config": "o.config.json",
                    "lock file": ".o.mp4.lock"}


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]], ids=["", "overwrite"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", list(GENERATE_OUTPUTS))
def test_generate_refuses_an_output_that_is_not_a_regular_file(tmp_path, monkeypatch, which, kind, overwrite):
    monkeypatch.chdir(tmp_path)
    name = Path(GENERATE_OUTPUTS[which])
    make(name, kind)
    before = listing(tmp_path)
    result = here("generate", "--model", "micro", "--chunks", 1, "--out", "o.mp4", "--log", "o.log.jsonl",
                  *overwrite)
    refused(result, "o.", WORDS[kind])
    assert listing(tmp_path) == before   # nothing written, nothing removed
    still(name, kind)


def test_resume_refuses_a_video_that_is_not_a_regular_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("k.mp4")
    refused(here("resume", "k.mp4"), "k.mp4", "named pipe (FIFO)")
    assert listing(tmp_path) == [("k.mp4", stat.S_IFIFO)]


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """A finished 3-chunk arena run with save points and a spill directory (forked, reported)."""
    cwd = tmp_path_factory.mktemp("parent")
    run(cwd, "generate", "--chunks", 3, "--save-every", 1, "--pool-slots", 4, "--spill", "p.spill", "--out", "p.mp4",
        "--quiet")
    return cwd / "p.mp4"


@pytest.mark.parametrize("name", ["b.mp4", "b.log.jsonl", "b.config.json", "b.trajectory.yaml", ".b.mp4.fork",
                                  ".b.log.jsonl.fork", ".b.mp4.lock"])
def test_fork_refuses_a_branch_file_that_is_not_a_regular_file(tmp_path, monkeypatch, parent, name):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(name)
    refused(here("fork", parent, "--trajectory", YAW, "--out", "b.mp4", "--overwrite"), name, "named pipe (FIFO)")
    assert listing(tmp_path) == [(name, stat.S_IFIFO)]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_batch_job_whose_output_is_not_a_regular_file_fails_alone(tmp_path, kind):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"name": "a", "model": "micro", "chunks": 1}\n{"name": "b", "model": "micro", "chunks": 1}\n')
    out = tmp_path / "out"
    out.mkdir()
    make(out / "a.log.jsonl", kind)
    done = subprocess.run(WORLDPAGER + ["batch", str(jobs), "--out-dir", str(out)], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if "a.log.jsonl" in line]
    assert said and all(WORDS[kind] in line for line in said), done.stderr
    still(out / "a.log.jsonl", kind)
    assert not (out / "a.mp4").exists()
    assert count_frames(out / "b.mp4") == 9   # the other job ran


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_report_truth_and_export_refuse_an_output_that_is_not_a_regular_file(tmp_path, monkeypatch, parent, kind):
    monkeypatch.chdir(tmp_path)
    log = parent.with_suffix(".log.jsonl")
    Path("r").mkdir()
    make(Path("r/report.html"), kind)
    refused(here("report", log, "--out", "r"), "report.html", WORDS[kind])
    still(Path("r/report.html"), kind)
    assert [p.name for p in Path("r").iterdir()] == ["report.html"]
    make(Path("t.mp4"), kind)
    refused(here("arena", "truth", log, "--out", "t.mp4"), "t.mp4", WORDS[kind])
    make(Path("t2.poses.csv"), kind)
    refused(here("arena", "truth", log, "--out", "t2.mp4"), "t2.poses.csv", WORDS[kind])
    Path("poses").mkdir()
    make(Path("poses/poses.npy"), kind)
    for extra in ([], ["--overwrite"]):
        refused(here("trajectory", "export", "poses", "--trajectory", YAW, *extra), "poses.npy", WORDS[kind])
    still(Path("poses/poses.npy"), kind)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poses", "r", "t.mp4", "t2.poses.csv"]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_training_and_bench_outputs_that_are_not_regular_files_are_refused(tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    Path("train").mkdir()
    make(Path("train/last.pt"), kind)
    refused(here("train", "arena", "--out", "train", "--steps", 1, "--quiet"), "last.pt", WORDS[kind])
    make(Path("w.safetensors"), kind)
    refused(here("train", "arena", "--out", "t2", "--steps", 1, "--export", "w.safetensors"), "--export")
    make(Path("s.png"), kind)
    refused(here("bench", "arena", "--quick", "--strip", "s.png"), "--strip", WORDS[kind])
    Path("q").mkdir()
    make(Path("q/quality-rows.jsonl"), kind)
    refused(here("bench", "quality", "--quick", "--out-dir", "q"), "quality-rows.jsonl", WORDS[kind])
    Path("d").mkdir()
    make(Path("d/device_check.log"), kind)
    refused(here("bench", "device", "--dry-run", "--out", "d"), "device_check.log", WORDS[kind])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "q", "s.png", "train", "w.safetensors"]
    for path in ("train/last.pt", "w.safetensors", "s.png", "q/quality-rows.jsonl", "d/device_check.log"):
        still(Path(path), kind)


def test_what_a_symlink_points_to_is_what_counts(tmp_path):
    (tmp_path / "real.mp4").write_bytes(b"x")
    (tmp_path / "to-file.mp4").symlink_to("real.mp4")
    (tmp_path / "to-new.mp4").symlink_to("new.mp4")
    check_output_file(tmp_path / "to-file.mp4", "--out")
    check_output_file(tmp_path / "to-new.mp4", "--out")
    (tmp_path / "to-nowhere.mp4").symlink_to("nodir/new.mp4")
    with pytest.raises(OutputError, match="whose directory does not exist"):
        check_output_file(tmp_path / "to-nowhere.mp4", "--out")
    (tmp_path / "loop.mp4").symlink_to("loop.mp4")
    with pytest.raises(OutputError, match="symlink loop"):
        check_output_file(tmp_path / "loop.mp4", "--out")


# ---- 2. one file under two names ----------------------------------------------------------------------

def _spellings(tmp_path: Path, name: str) -> dict[str, str]:
    """Other names of ``tmp_path/name``: a symlink, a hard link, and ``..`` after a symlinked directory
    (``away/jump`` leads to ``deep``, so ``away/jump/../NAME`` is ``NAME`` here, not in ``away``)."""
    stem, suffix = name.split(".", 1)
    (tmp_path / f"{stem}-sym.{suffix}").symlink_to(name)
    os.link(tmp_path / name, tmp_path / f"{stem}-hard.{suffix}")
    (tmp_path / "deep").mkdir(exist_ok=True)
    (tmp_path / "away").mkdir(exist_ok=True)
    if not (tmp_path / "away" / "jump").is_symlink():
        (tmp_path / "away" / "jump").symlink_to(tmp_path / "deep")
    return {"symlink": f"{stem}-sym.{suffix}", "hard link": f"{stem}-hard.{suffix}", "dotdot": f"away/jump/../{name}"}


def test_a_running_video_or_log_under_another_name_is_refused_and_left_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # far more chunks than it can make before the SIGTERM below, on a bounded spill directory
    proc, out, log = start_generate(tmp_path, "a", 100000, "--quiet", "--pool-slots", "4", "--save-every", "0",
                                    "--spill", "sp", "--spill-max", "64M")
    wait_for_chunks(log, 1, proc)
    try:
        for how, other in _spellings(tmp_path, "a.mp4").items():
            assert os.path.samefile(other, out), how
            for extra in ([], ["--overwrite"]):
                refused(here("generate", "--model", "micro", "--chunks", 2, "--out", other, *extra),
                        f"pid {proc.pid}", "another WorldPager process")
        for how, other in _spellings(tmp_path, "a.log.jsonl").items():
            assert os.path.samefile(other, log), how
            refused(here("generate", "--model", "micro", "--chunks", 2, "--out", f"b-{len(how)}.mp4", "--log", other,
                         "--overwrite"), f"pid {proc.pid}", "--log")
        assert proc.poll() is None
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("b-")]   # the refused runs made nothing
        wait_for_chunks(log, 3, proc)   # still writing its own files
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, err
    records = read_log(log)
    assert [r["type"] for r in records].count("header") == 1 and records[-1]["type"] == "summary"
    assert count_frames(out) == [r for r in records if r["type"] == "chunk"][-1]["frames_total"]


def test_the_claim_is_taken_on_the_resolved_file(tmp_path):
    (tmp_path / "x.mp4").write_bytes(b"")
    spellings = _spellings(tmp_path, "x.mp4")
    assert lock_path(tmp_path / spellings["symlink"]) == lock_path(tmp_path / "x.mp4")
    assert lock_path(tmp_path / spellings["dotdot"]) == lock_path(tmp_path / "x.mp4")
    with claim_output(tmp_path / "x.mp4"):
        for other in spellings.values():
            if other != spellings["hard link"]:   # a hard link is another name: its file lock is the writer's
                with pytest.raises(OutputInUseError, match=f"pid {os.getpid()}"):
                    claim_output(tmp_path / other)


def test_a_writer_locks_its_file_under_every_name_also_after_a_resume_replaces_it(tmp_path):
    """The file lock belongs to the file the writer writes: a hard link to it is refused, also once a
    resume rewrote the video under a temporary name and renamed it over the old one."""
    out = tmp_path / "v.mp4"
    VideoWriter(out, 16, 16, 16).close()
    os.link(out, tmp_path / "first.mp4")
    writer = VideoWriter.reopen(out, 0, 16, 16, 16)   # a new file at v.mp4, locked before the rename
    try:
        os.link(out, tmp_path / "second.mp4")
        with pytest.raises(OutputInUseError, match=f"pid {os.getpid()}"):
            refuse_in_use(tmp_path / "second.mp4", "--out")
        with pytest.raises(OutputInUseError):
            claim_output(tmp_path / "second.mp4")
        refuse_in_use(tmp_path / "first.mp4", "--out")   # the old file is no longer this output
    finally:
        writer.close()
    refuse_in_use(tmp_path / "second.mp4", "--out")   # closed: free


def test_a_symlink_to_a_name_not_there_yet_is_written_through(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("videos").mkdir()
    Path("l.mp4").symlink_to("videos/new.mp4")
    result = here("generate", "--model", "micro", "--chunks", 1, "--out", "l.mp4", "--quiet")
    assert result.exit_code == 0, result.output
    assert Path("l.mp4").is_symlink() and count_frames("videos/new.mp4") == 9
    assert not lock_path(Path("l.mp4")).exists() and lock_path(Path("l.mp4")).parent == (tmp_path / "videos")
