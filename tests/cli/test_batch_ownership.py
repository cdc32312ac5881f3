"""``worldpager batch`` replaces only what its own manifest says one of its jobs made.

* a file at a job's output name before the batch runs — a ``generate`` video, a ``fork`` branch, a
  user's own file, another batch's output (a batch in another directory writing there; this
  directory's manifest deleted) — or another run's memory in the job's spill directory: the job fails
  with ``refused: …`` naming the paths and who wrote them, the files are byte-identical afterwards, the
  other job is done, exit 1; ``--overwrite`` replaces them;
* a job's files changed by the user after the batch's attempt ended are refused too; a job continued
  by ``worldpager resume`` after its batch was killed is refused (the finished video is kept);
* what the batch made itself is still redone: a killed batch's job without save points starts over
  (its cut-short files are read as its own), jobs sharing one spill directory (one worker) take over
  each other's memory as before (resuming a killed job is ``test_batch.py``'s);
* ``OUT_DIR/batch.lock`` is gone once a batch ends, done or failed, and a batch refused because another
  holds it leaves it alone;
* the warning that jobs make no save points is said once for the batch, not after every job.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import av
import pytest
from click.testing import CliRunner

from engine.batch.manifest import LOCK_NAME, MANIFEST_NAME, Manifest
from engine.files.file_lock import still_at
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, one_line_error
from worldpager_cli.main import cli

REPO = Path(__file__).resolve().parents[2]
YAW = REPO / "trajectories" / "yaw.yaml"
MICRO = ["--model", "micro", "--pool-slots", "4"]
SYNTHETIC = ["--model", "synthetic", "--chunk-ms", "100", "--kv-scale", "0.034", "--pool-slots", "4",
             "--kv-bits", "16"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def invoke(*args):
    return CliRunner().invoke(cli, [*map(str, args)], catch_exceptions=False)


def batch(jobs: Path, out: Path, *args):
    return invoke("batch", jobs, "--out-dir", out, *MICRO, *args)


def write_jobs(path: Path, *jobs: dict) -> Path:
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return path


def entries(out: Path) -> dict:
    return json.loads((out / MANIFEST_NAME).read_text())["jobs"]


def digest(*paths: Path) -> dict[str, str]:
    """sha256 of every file at or under ``paths``."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else [])
             if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def decodes_as_logged(video: Path) -> bool:
    """Every frame decodes, and they are exactly the frames the video's log records."""
    with av.open(str(video)) as c:
        frames = sum(1 for _ in c.decode(video=0))
    chunks = [r for r in read_log(video.with_suffix(".log.jsonl")) if r["type"] == "chunk"]
    return frames == chunks[-1]["frames_total"] > 0


def refused(result, out: Path, name: str, *needles: str) -> str:
    """The batch ran its other jobs and failed ``name`` with one refusal line (no traceback), exit 1."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith(f"worldpager: {name}: failed")]
    assert len(lines) == 1 and "refused: " in lines[0], result.stderr
    error = entries(out)[name]["error"]
    assert entries(out)[name]["status"] == "failed" and error in lines[0] and "\n" not in error
    for needle in ("nothing was changed", "--overwrite", *needles):
        assert needle in error, error
    return error


# ---- what may sit at a job's output name -------------------------------------------------------

def _generated(tmp: Path, out: Path) -> list[Path]:
    made = invoke("generate", *MICRO, "--chunks", 3, "--out", out / "x.mp4", "--quiet")
    assert made.exit_code == 0, made.output
    return [out / "x.mp4", out / "x.log.jsonl", out / "x.config.json"]


def _forked(tmp: Path, out: Path) -> list[Path]:
    parent = invoke("generate", *MICRO, "--chunks", 3, "--save-every", 1, "--spill", tmp / "p.spill",
                    "--out", tmp / "p.mp4", "--quiet")
    assert parent.exit_code == 0, parent.output
    branch = invoke("fork", tmp / "p.mp4", "--at", 2, "--trajectory", YAW, "--out", out / "x.mp4", "--chunks", 3,
                    "--quiet")
    assert branch.exit_code == 0, branch.output
    return [out / "x.mp4", out / "x.log.jsonl", out / "x.config.json", out / "x.trajectory.yaml"]


def _users_own(tmp: Path, out: Path) -> list[Path]:
    (out / "x.mp4").write_bytes(b"my own video, not WorldPager's")
    return [out / "x.mp4"]


def _another_batchs(tmp: Path, out: Path) -> list[Path]:
    jobs = write_jobs(tmp / "other.jsonl", {"name": "x", "chunks": 2, "out": str(out / "x.mp4")})
    other = batch(jobs, tmp / "other")
    assert other.exit_code == 0, other.output
    return [out / "x.mp4", out / "x.log.jsonl", out / "x.config.json"]


def _this_dirs_deleted_manifest(tmp: Path, out: Path) -> list[Path]:
    first = batch(write_jobs(tmp / "first.jsonl", {"name": "x", "chunks": 2}), out)
    assert first.exit_code == 0, first.output
    (out / MANIFEST_NAME).unlink()
    return [out / "x.mp4", out / "x.log.jsonl", out / "x.config.json"]


@pytest.mark.parametrize("make, needle", [
    (_generated, "`worldpager generate`"),
    (_forked, "`worldpager fork`"),
    (_users_own, "not made by this batch"),
    (_another_batchs, "another batch's job 'x'"),
    (_this_dirs_deleted_manifest, "another batch's job 'x'"),
])
def test_a_job_whose_output_name_holds_what_the_batch_did_not_make_is_refused(tmp_path, make, needle):
    out = tmp_path / "out"
    out.mkdir()
    theirs = make(tmp_path, out)
    before = digest(*theirs)
    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 2}, {"name": "y", "chunks": 2})
    result = batch(jobs, out)
    refused(result, out, "x", str(out / "x.mp4"), needle)
    assert digest(*theirs) == before                      # not a byte changed
    assert entries(out)["y"]["status"] == "done" and decodes_as_logged(out / "y.mp4")

    again = batch(jobs, out, "--overwrite")
    assert again.exit_code == 0, again.output
    assert entries(out)["x"]["status"] == "done" and decodes_as_logged(out / "x.mp4")
    header = read_log(out / "x.log.jsonl")[0]   # the job's own now (its frames may equal theirs)
    assert header["batch"] == {"run": entries(out)["x"]["made"]["runs"][-1], "job": "x"}
    assert any("--overwrite: replacing" in line for line in again.stderr.splitlines())


def test_another_runs_memory_in_a_jobs_spill_directory_is_refused(tmp_path):
    spill = tmp_path / "spill"
    made = invoke("generate", *MICRO, "--chunks", 3, "--save-every", 1, "--spill", spill / "x",
                  "--out", tmp_path / "g.mp4", "--quiet")
    assert made.exit_code == 0, made.output
    before = digest(spill / "x")
    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 2}, {"name": "y", "chunks": 2})
    out = tmp_path / "out"
    result = batch(jobs, out, "--spill", spill / "{job}")
    refused(result, out, "x", "spill directory", str(spill / "x"))
    assert digest(spill / "x") == before and entries(out)["y"]["status"] == "done"
    assert not (out / "x.mp4").exists()
    again = batch(jobs, out, "--spill", spill / "{job}", "--overwrite")
    assert again.exit_code == 0 and entries(out)["x"]["status"] == "done", again.output


def test_jobs_sharing_one_spill_directory_take_it_over_from_each_other(tmp_path):
    """One worker may give every job the same spill directory: each job's memory there is this batch's."""
    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 2}, {"name": "y", "chunks": 2})
    out = tmp_path / "out"
    result = batch(jobs, out, "--spill", tmp_path / "shared")
    assert result.exit_code == 0, result.output
    changed = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 3}, {"name": "y", "chunks": 3})
    again = batch(changed, out, "--spill", tmp_path / "shared")   # both redone: their own outputs
    assert again.exit_code == 0, again.output
    assert [entries(out)[n]["chunks"] for n in "xy"] == [3, 3]


def test_a_jobs_file_changed_by_the_user_after_its_attempt_is_refused(tmp_path):
    """A stopped job (Ctrl-C: interrupted, resumable) whose MP4 the user then replaced with their own."""
    from engine.batch.driver import BatchDriver
    from engine.batch.jobs import load_jobs
    from engine.batch.local import InlineBackend
    from engine.batch.plan import plan_jobs

    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 6})
    shared = {"model": "micro", "pool_slots": 4, "save_every": 1, "spill": str(tmp_path / "spill" / "{job}"),
              "decode_overlap": False}   # decoded in the loop: the stop lands after chunk 2
    out = tmp_path / "out"
    plans = plan_jobs(load_jobs(str(jobs), shared), out, 1, "cpu", None, 8 << 30, 0)
    with Manifest(out) as m:
        driver = BatchDriver(plans, m, InlineBackend("cpu"))
        driver.on_event = lambda e: e.kind == "chunk" and e.record["chunk"] == 2 and driver.request_stop()
        assert driver.run().status == "interrupted"
    (out / "x.mp4").write_bytes((out / "x.mp4").read_bytes()[:-100] + b"the user's own ending")
    before = digest(out)
    result = batch(jobs, out, "--save-every", 1, "--spill", tmp_path / "spill" / "{job}")
    refused(result, out, "x", str(out / "x.mp4"), "changed after this batch's last attempt")
    assert {k: v for k, v in digest(out).items() if not k.endswith(MANIFEST_NAME)} == \
        {k: v for k, v in before.items() if not k.endswith(MANIFEST_NAME)}


def _longer_video(tmp: Path, out: Path) -> str:
    longer = invoke("generate", *MICRO, "--store", "window", "--chunks", 8, "--out", tmp / "long.mp4", "--quiet")
    assert longer.exit_code == 0, longer.output
    (out / "x.mp4").write_bytes((tmp / "long.mp4").read_bytes())
    return "more than the 3 chunks the job's log records"


def _not_a_worldpager_video(tmp: Path, out: Path) -> str:
    (out / "x.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(1000))
    return "is not a video this job's writer made"


@pytest.mark.parametrize("replace", [_longer_video, _not_a_worldpager_video])
def test_a_cut_short_jobs_video_replaced_by_the_user_is_refused(tmp_path, replace):
    """The manifest as a killed batch leaves it (the job ``running``, its files unrecorded): the files
    are read, and an MP4 that is not the one beside the job's log is refused."""
    from engine.batch.driver import BatchDriver
    from engine.batch.jobs import load_jobs
    from engine.batch.local import InlineBackend
    from engine.batch.plan import plan_jobs

    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 6})
    shared = {"model": "micro", "pool_slots": 4, "save_every": 1, "spill": str(tmp_path / "spill" / "{job}"),
              "decode_overlap": False}   # decoded in the loop: the stop lands after chunk 2
    out = tmp_path / "out"
    plans = plan_jobs(load_jobs(str(jobs), shared), out, 1, "cpu", None, 8 << 30, 0)
    with Manifest(out) as m:
        driver = BatchDriver(plans, m, InlineBackend("cpu"))
        driver.on_event = lambda e: e.kind == "chunk" and e.record["chunk"] == 2 and driver.request_stop()
        assert driver.run().status == "interrupted"
        m.update("x", status="running", made={**m.entry("x")["made"], "files": None})   # as if killed
    needle = replace(tmp_path, out)
    before = digest(out / "x.mp4", out / "x.log.jsonl", tmp_path / "spill")
    result = batch(jobs, out, "--save-every", 1, "--spill", tmp_path / "spill" / "{job}")
    refused(result, out, "x", str(out / "x.mp4"), needle)
    assert digest(out / "x.mp4", out / "x.log.jsonl", tmp_path / "spill") == before


# ---- a killed batch ------------------------------------------------------------------------------

def _killed_batch(tmp: Path, out: Path, jobs: Path, args: list[str], ready) -> None:
    """Start a batch, wait until ``ready(log records)``, SIGKILL it mid-job."""
    proc = subprocess.Popen(WORLDPAGER + ["batch", str(jobs), "--out-dir", str(out), *args, "--quiet"],
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    log = out / "x.log.jsonl"
    deadline = time.time() + PATIENCE_S
    while not (log.exists() and ready(read_log(log))):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert entries(out)["x"]["status"] == "running"   # as the killed batch left it


def test_a_killed_batchs_job_without_save_points_is_redone(tmp_path):
    args = [*SYNTHETIC, "--store", "window", "--save-every", "0"]
    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 40})
    out = tmp_path / "out"
    _killed_batch(tmp_path, out, jobs, args, lambda records: sum(r.get("type") == "chunk" for r in records) >= 3)
    again = invoke("batch", jobs, "--out-dir", out, *args)
    assert again.exit_code == 0, again.output
    entry = entries(out)["x"]
    assert entry["status"] == "done" and entry["attempts"] == 2 and entry["resumed_at"] is None
    chunks = [r["chunk"] for r in read_log(out / "x.log.jsonl") if r.get("type") == "chunk"]
    assert chunks == list(range(40)) and decodes_as_logged(out / "x.mp4")


def test_a_killed_batchs_job_finished_by_worldpager_resume_is_not_redone(tmp_path):
    args = [*SYNTHETIC, "--save-every", "2", "--spill", str(tmp_path / "spill" / "{job}")]
    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "x", "chunks": 12})
    out = tmp_path / "out"
    _killed_batch(tmp_path, out, jobs, args, lambda records: any(
        r.get("type") == "savepoint" and "path" in r and r["chunk"] >= 2 for r in records))
    resumed = invoke("resume", out / "x.mp4", "--quiet")
    assert resumed.exit_code == 0, resumed.output
    before = digest(out / "x.mp4", out / "x.log.jsonl", out / "x.config.json", tmp_path / "spill")
    result = invoke("batch", jobs, "--out-dir", out, *args)
    refused(result, out, "x", "`worldpager resume`")
    assert digest(out / "x.mp4", out / "x.log.jsonl", out / "x.config.json", tmp_path / "spill") == before
    assert decodes_as_logged(out / "x.mp4")


# ---- batch.lock ----------------------------------------------------------------------------------

def test_the_lock_is_gone_after_a_batch_done_or_failed(tmp_path):
    out = tmp_path / "out"
    done = batch(write_jobs(tmp_path / "a.jsonl", {"name": "a", "chunks": 1}), out)
    assert done.exit_code == 0 and not (out / LOCK_NAME).exists(), done.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("keys: [w, a\n")
    failed = batch(write_jobs(tmp_path / "b.jsonl", {"name": "b", "chunks": 1, "trajectory": str(bad)}), out)
    assert failed.exit_code == 1 and entries(out)["b"]["status"] == "failed", failed.output
    assert not (out / LOCK_NAME).exists()
    assert sorted(p.name for p in out.iterdir()) == ["a.config.json", "a.log.jsonl", "a.mp4", MANIFEST_NAME]


def test_a_batch_refused_by_the_lock_leaves_it_to_its_holder(tmp_path):
    out = tmp_path / "out"
    jobs = write_jobs(tmp_path / "jobs.jsonl", {"name": "a", "chunks": 1})
    with Manifest(out) as holder:
        one_line_error(batch(jobs, out), "another batch is running", LOCK_NAME)
        assert still_at(holder._lock_fd, out / LOCK_NAME)   # the same file, still held
    assert not (out / LOCK_NAME).exists()
    after = batch(jobs, out)
    assert after.exit_code == 0 and not (out / LOCK_NAME).exists(), after.output


# ---- warnings ------------------------------------------------------------------------------------

def test_the_no_save_points_warning_is_said_once_for_the_batch(tmp_path):
    jobs = write_jobs(tmp_path / "jobs.jsonl", *({"name": n, "chunks": 1} for n in "abc"))
    result = batch(jobs, tmp_path / "out")
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "no save points" in line]
    assert len(said) == 1 and said[0].startswith("worldpager: warning: jobs a, b, c make no save points"), \
        result.stderr
    spilled = batch(jobs, tmp_path / "out2", "--spill", tmp_path / "spill" / "{job}")
    assert spilled.exit_code == 0 and "no save points" not in spilled.stderr, spilled.output
