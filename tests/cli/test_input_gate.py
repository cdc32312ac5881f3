"""Every file a command reads is checked before it is opened, and every JSON from outside is read bounded.

One test per fault class: a named pipe (FIFO) where a log, a batch manifest, a job list, a preset, a
start image, a trajectory, a pose folder's array, a checkpoint's file or a run's config should be; a
directory as ``--image``; a file under /proc as a trajectory or a log; a regular file as the checkpoint
directory; damaged JSON (nested thousands deep, binary bytes, wrong kinds) in a log, a manifest and a job
line. Each runs the CLI in a subprocess with a bounded wait (a regression that waits on a FIFO fails the
test instead of hanging the suite) and asserts exit 1, exactly one stderr line ``worldpager: error: ...``
naming the path, no traceback, and that nothing the user had is changed.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests_support import TINY, WORLDPAGER, hang_guard

WAIT_S = 300.0   # far above a refusal's time on a loaded machine; only a hang reaches it

HEADER = {"type": "header", "schema": 1, "config": {"model": "micro", "chunks": 9}, "model": {"fps": 16}}
CHUNK = {"type": "chunk", "chunk": 0, "frames": 9, "wall_ms": 100.0}


def refused(cwd: Path, *args, needles=()) -> str:
    """Run the CLI: it exits 1 with one ``worldpager: error:`` line holding every needle, no traceback."""
    result = subprocess.run(WORLDPAGER + [str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                            timeout=WAIT_S, stdin=subprocess.DEVNULL)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def snapshot(*paths: Path) -> dict:
    """What each path holds now (its bytes, or its kind), to check nothing was changed."""
    return {p: p.read_bytes() if p.is_file() else ("fifo" if p.is_fifo() else "dir" if p.is_dir() else None)
            for p in paths}


@pytest.fixture
def earlier_run(tmp_path):
    """An earlier run's MP4 and log at ``out.mp4`` (replaced with --overwrite only once a chunk is made)."""
    out, log = tmp_path / "out.mp4", tmp_path / "out.log.jsonl"
    out.write_bytes(b"\x00\x00\x00\x18ftypisom earlier video")
    log.write_text(json.dumps(HEADER) + "\n")
    return out, log


def generate(tmp_path, *extra):
    return ("generate", "--model", "micro", "--chunks", "1", "--out", tmp_path / "out.mp4", "--overwrite", *extra)


# ---- FIFOs and other non-files ------------------------------------------------------------------------

@pytest.mark.parametrize("command", [("report", "--out", "rep"), ("tail", "--no-follow")])
def test_fifo_log(tmp_path, command):
    fifo = tmp_path / "s.log.jsonl"
    os.mkfifo(fifo)
    refused(tmp_path, command[0], fifo, *command[1:], needles=(str(fifo), "named pipe (FIFO)"))
    assert fifo.is_fifo() and not (tmp_path / "rep" / "report.html").exists()


@pytest.mark.parametrize("command", [("report", "--out", "rep"), ("tail", "--no-follow")])
def test_proc_file_as_a_log(tmp_path, command):
    refused(tmp_path, command[0], "/proc/self/status", *command[1:], needles=("/proc/self/status", "under /proc"))


def test_fifo_batch_manifest_is_refused_before_the_lock(tmp_path):
    jobs, out_dir = tmp_path / "jobs.jsonl", tmp_path / "out"
    jobs.write_text('{"model": "micro", "chunks": 1}\n')
    out_dir.mkdir()
    os.mkfifo(out_dir / "batch-manifest.json")
    for _ in range(2):   # the second run is refused for the same reason: no lock was left held
        refused(tmp_path, "batch", jobs, "--out-dir", out_dir, needles=("batch-manifest.json", "named pipe (FIFO)"))
    assert sorted(p.name for p in out_dir.iterdir()) == ["batch-manifest.json"]


def test_fifo_job_list(tmp_path):
    fifo = tmp_path / "jobs.jsonl"
    os.mkfifo(fifo)
    refused(tmp_path, "batch", fifo, "--out-dir", tmp_path / "out", needles=("jobs.jsonl", "named pipe (FIFO)"))


@pytest.mark.parametrize("flag, name, needle", [
    ("--preset", "p.yaml", "named pipe (FIFO)"),
    ("--image", "start.png", "named pipe (FIFO)"),
    ("--trajectory", "path.yaml", "named pipe (FIFO)"),
])
def test_fifo_input_of_generate(tmp_path, earlier_run, flag, name, needle):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    before = snapshot(*earlier_run)
    refused(tmp_path, *generate(tmp_path, flag, fifo), needles=(name, needle))
    assert snapshot(*earlier_run) == before


def test_directory_as_image(tmp_path, earlier_run):
    (tmp_path / "pictures").mkdir()
    before = snapshot(*earlier_run)
    refused(tmp_path, *generate(tmp_path, "--image", tmp_path / "pictures"), needles=("pictures", "a directory"))
    assert snapshot(*earlier_run) == before


def test_proc_file_as_trajectory(tmp_path, earlier_run):
    before = snapshot(*earlier_run)
    refused(tmp_path, *generate(tmp_path, "--trajectory", "/proc/self/status"),
            needles=("/proc/self/status", "under /proc"))
    assert snapshot(*earlier_run) == before


def test_fifo_array_in_a_pose_folder(tmp_path, earlier_run):
    folder = tmp_path / "poses"
    folder.mkdir()
    os.mkfifo(folder / "poses.npy")
    before = snapshot(*earlier_run)
    refused(tmp_path, *generate(tmp_path, "--trajectory", folder), needles=("poses.npy", "not a regular file"))
    assert snapshot(*earlier_run) == before


def test_checkpoint_dir_that_is_a_file(tmp_path):
    file = tmp_path / "weights.bin"
    file.write_bytes(b"not a directory")
    refused(tmp_path, "generate", "--model", "tiny", "--chunks", "1", "--out", tmp_path / "o.mp4",
            "--checkpoint", file, needles=("weights.bin", "a regular file, not a directory"))
    assert file.read_bytes() == b"not a directory"


def test_fifo_checkpoint_file(tmp_path):
    root = tmp_path / "ckpt"
    for name in (TINY.dit_file, TINY.clip_file):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"weights")
    os.mkfifo(root / TINY.vae_file)
    refused(tmp_path, "generate", "--model", "tiny", "--chunks", "1", "--out", tmp_path / "o.mp4",
            "--checkpoint", root, needles=(TINY.vae_file, "named pipe (FIFO)"))


def test_fifo_config_of_a_run_to_resume(tmp_path, earlier_run):
    out, _ = earlier_run
    os.mkfifo(tmp_path / "out.config.json")
    before = snapshot(*earlier_run)
    refused(tmp_path, "resume", out, needles=("out.config.json", "named pipe (FIFO)"))
    assert snapshot(*earlier_run) == before


# ---- damaged JSON -------------------------------------------------------------------------------------

DEEP = "[" * 5000
DAMAGE = {   # name: (the bad line, what the error says)
    "deep": (('{"type": "chunk", "x": ' + DEEP).encode(), "levels deep"),
    "binary": (b"\xff\xfe\x00\x01 binary bytes", "not text"),
    "kinds": (json.dumps({"type": "chunk", "chunk": "one"}).encode(), "'chunk' is not a number"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", [("report", "--out", "rep"), ("tail", "--no-follow")])
def test_damaged_log(tmp_path, damage, command):
    line, needle = DAMAGE[damage]
    log = tmp_path / "d.log.jsonl"
    log.write_bytes(json.dumps(HEADER).encode() + b"\n" + line + b"\n" + json.dumps(CHUNK).encode() + b"\n")
    before = snapshot(log)
    refused(tmp_path, command[0], log, *command[1:], needles=("d.log.jsonl line 2", needle))
    assert snapshot(log) == before


@pytest.mark.parametrize("content, needle", [
    (DEEP.encode(), "levels deep"),
    (b"\xff\xfe{}", "not UTF-8"),
    (json.dumps({"version": 1, "jobs": {"a": {"status": "done", "attempts": "x"}}}).encode(), "'attempts'"),
    (json.dumps({"version": 1, "jobs": [1]}).encode(), "not a batch manifest"),
], ids=["deep", "binary", "kinds", "jobs-not-an-object"])
def test_damaged_batch_manifest(tmp_path, content, needle):
    jobs, out_dir = tmp_path / "jobs.jsonl", tmp_path / "out"
    jobs.write_text('{"model": "micro", "chunks": 1}\n')
    out_dir.mkdir()
    (out_dir / "batch-manifest.json").write_bytes(content)
    refused(tmp_path, "batch", jobs, "--out-dir", out_dir, needles=("batch-manifest.json", needle))
    assert (out_dir / "batch-manifest.json").read_bytes() == content
    assert not (out_dir / "batch.lock").exists()   # the lock is given back on the error


@pytest.mark.parametrize("line, needle", [
    (DEEP.encode(), "levels deep"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"chunks": [1, 2]}', "option 'chunks'"),
    (b"[1]", "a job is a JSON object"),
], ids=["deep", "binary", "kinds", "not-an-object"])
def test_damaged_job_line(tmp_path, line, needle):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b'{"model": "micro", "chunks": 1}\n' + line + b"\n")
    refused(tmp_path, "batch", jobs, "--out-dir", tmp_path / "out", needles=("jobs.jsonl", needle))
    assert not (tmp_path / "out" / "batch-manifest.json").exists()


def test_deeply_nested_yaml_job_list(tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("- " + "[" * 3000 + "\n")
    refused(tmp_path, "batch", jobs, "--out-dir", tmp_path / "out", needles=("jobs.yaml", "nested too deeply"))


def test_fifo_log_for_plan_timing(tmp_path):
    fifo = tmp_path / "s.log.jsonl"
    os.mkfifo(fifo)
    refused(tmp_path, "plan", "--timing-from", fifo, needles=("s.log.jsonl", "named pipe (FIFO)"))


def test_fifo_spill_index_is_one_line_not_a_wait(tmp_path):
    from engine.memory.disk import INDEX_NAME, index_document
    from engine.memory.room import tier_room
    from engine.memory.types import SpillIndexError

    (tmp_path / "blocks.dat").write_bytes(b"\0" * 4096)
    os.mkfifo(tmp_path / INDEX_NAME)
    with hang_guard(WAIT_S, doing="reading a FIFO index"):
        with pytest.raises(SpillIndexError, match="named pipe"):
            index_document(tmp_path / INDEX_NAME)
        assert tier_room(tmp_path, resume=True) == 0   # an index that cannot be read holds no room


# ---- every input option, by kind, whatever the model reads ---------------------------------------------

@pytest.mark.parametrize("command", [("plan",), ("generate", "--model", "micro", "--chunks", "1")])
@pytest.mark.parametrize("flag, kind, needle", [
    ("--image", "fifo", "not a regular file"), ("--observe", "fifo", "not a regular file"),
    ("--observe-poses", "dir", "a directory, not a regular file"), ("--arena-weights", "fifo", "not a regular file"),
    ("--arena-weights", "dir", "a directory, not a regular file"), ("--checkpoint", "fifo", "not a directory"),
    ("--trajectory", "proc", "under /proc"),
])
def test_an_input_option_of_the_wrong_kind_is_refused_even_where_the_model_reads_none(tmp_path, command, flag,
                                                                                      kind, needle):
    """micro reads no arena weights and plan reads no image: a FIFO there is still refused, never waited on."""
    path = {"fifo": tmp_path / "in", "dir": tmp_path / "d", "proc": Path("/proc/self/status")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    out = () if command[0] == "plan" else ("--out", tmp_path / "o.mp4")
    refused(tmp_path, *command, *out, flag, path, needles=(flag, needle))
    assert not (tmp_path / "o.mp4").exists()


def test_a_job_naming_a_fifo_image_fails_as_that_job(tmp_path):
    fifo = tmp_path / "start.png"
    os.mkfifo(fifo)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"name": "a", "model": "micro", "chunks": 1, "image": str(fifo)}) + "\n")
    result = subprocess.run(WORLDPAGER + ["batch", str(jobs), "--out-dir", str(tmp_path / "out")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "--image" in result.stderr and "named pipe (FIFO)" in result.stderr, result.stderr


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_bench_quality_weights_of_the_wrong_kind(tmp_path, kind):
    path = tmp_path / "w.safetensors"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    refused(tmp_path, "bench", "quality", "--quick", "--weights", path, "--out-dir", tmp_path / "q",
            needles=("w.safetensors",))
