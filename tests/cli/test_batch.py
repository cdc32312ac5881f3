"""``worldpager batch`` on one machine: job lists, the manifest, re-runs, a killed batch, bad input.

* a batch of several jobs with one bad trajectory: the others finish, the manifest says why the bad
  one failed, exit 1; after the file is fixed a re-run does only that job, exit 0;
* jobs on the arena model in one worker: the model's weights are loaded once, and the second job's
  MP4 is frame for frame a fresh ``worldpager generate`` of the same options (reuse resets the model's
  running state);
* a batch SIGKILLed while a job renders: the re-run resumes that job from its save point (the log
  keeps the chunks before it and has every chunk once; the MP4 holds every frame). That a resumed
  run's frames equal an uninterrupted run's is ``test_resume.py``'s (real models); the synthetic
  model used here for its steady pace draws blank frames;
* bad input is one line naming the file and line (or the two jobs, or the two workers), and nothing is
  written: a malformed JSON line, a CSV row of the wrong width, a trajectory given as a job list, an
  unknown option, two jobs with one output, two workers with one spill directory, Ray not installed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest
from click.testing import CliRunner

from engine.batch.manifest import MANIFEST_NAME
from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER, one_line_error
from worldpager_cli.main import cli

REPO = Path(__file__).resolve().parents[2]
YAW = REPO / "trajectories" / "yaw.yaml"
SYNTHETIC = ["--model", "synthetic", "--chunk-ms", "5", "--kv-scale", "0.034", "--pool-slots", "4", "--kv-bits", "16"]
ARENA = ["--model", "arena", "--pool-slots", "4",   # a small pool: sizing one from the machine takes seconds
         "--late-prefetch", "wait"]                # frames compared exactly: whatever the machine's speed


def run(*args):
    return CliRunner().invoke(cli, ["batch", *map(str, args)], catch_exceptions=False)


def frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def same_frames(a: Path, b: Path) -> bool:
    fa, fb = frames(a), frames(b)
    return len(fa) == len(fb) > 0 and all(np.array_equal(x, y) for x, y in zip(fa, fb))


def manifest(out_dir: Path) -> dict:
    return json.loads((out_dir / MANIFEST_NAME).read_text())["jobs"]


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def write_jsonl(path: Path, *jobs: dict) -> Path:
    path.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return path


def test_a_failed_job_is_recorded_and_only_it_runs_again_once_fixed(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("keys: [w, a\n")
    jobs = write_jsonl(tmp_path / "jobs.jsonl",
                       {"name": "a", "chunks": 3, "trajectory": str(YAW)},
                       {"name": "b", "chunks": 2, "seed": 1},
                       {"name": "c", "chunks": 2, "trajectory": str(bad)})
    out = tmp_path / "out"
    first = run(jobs, "--out-dir", out, *SYNTHETIC)
    assert first.exit_code == 1, first.output
    entries = manifest(out)
    assert entries["a"]["status"] == entries["b"]["status"] == "done"
    assert entries["c"]["status"] == "failed" and str(bad) in entries["c"]["error"]
    assert "line" in entries["c"]["error"] and "\n" not in entries["c"]["error"]
    summary = last_json(first.output)
    assert (summary["done"], summary["failed"], summary["ran"]) == (2, 1, 3)
    assert [r["name"] for r in summary["results"]] == ["a", "b", "c"]
    assert (out / "a.mp4").is_file() and (out / "b.log.jsonl").is_file() and (out / "a.config.json").is_file()
    done_a = (out / "a.mp4").stat().st_mtime_ns

    bad.write_text(YAW.read_text())
    second = run(jobs, "--out-dir", out, *SYNTHETIC)
    assert second.exit_code == 0, second.output
    summary = last_json(second.output)
    assert (summary["status"], summary["ran"], summary["skipped"]) == ("done", 1, 2)
    assert [r["name"] for r in summary["results"] if r["status"] == "done"] == ["a", "b", "c"]
    entries = manifest(out)
    assert entries["c"]["status"] == "done" and entries["c"]["attempts"] == 2 and entries["c"]["error"] is None
    assert (out / "a.mp4").stat().st_mtime_ns == done_a   # a done job is not touched


def test_one_model_load_for_many_jobs_and_the_same_frames_as_generate(tmp_path):
    """Arena jobs (real weights, running state in the pipeline) through one worker."""
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(f"name,chunks,arena_seed,trajectory\nfirst,1,5,{YAW}\nsecond,2,12,\n")
    out = tmp_path / "out"
    result = run(jobs, "--out-dir", out, *ARENA)
    assert result.exit_code == 0, result.output
    summary = last_json(result.output)
    assert summary["model_loads"] == 1 and summary["done"] == 2
    entries = manifest(out)
    assert entries["first"]["model_reused"] is False and entries["second"]["model_reused"] is True

    fresh = tmp_path / "fresh.mp4"
    gen = CliRunner().invoke(cli, ["generate", *ARENA, "--arena-seed", "12", "--chunks", "2",
                                   "--out", str(fresh), "--quiet"], catch_exceptions=False)
    assert gen.exit_code == 0, gen.output
    assert same_frames(out / "second.mp4", fresh)


def test_a_killed_batch_resumes_its_job_from_the_save_point(tmp_path):
    args = ["--model", "synthetic", "--chunk-ms", "100", "--kv-scale", "0.034", "--pool-slots", "4",
            "--kv-bits", "16", "--save-every", "2", "--spill", str(tmp_path / "spill" / "{job}")]
    chunks_total = 40   # seconds of chunks after the save point waited for, so the kill lands mid-way
    jobs = write_jsonl(tmp_path / "jobs.jsonl", {"name": "long", "chunks": chunks_total})
    out = tmp_path / "out"
    proc = subprocess.Popen(WORLDPAGER + ["batch", str(jobs), "--out-dir", str(out), *args, "--quiet"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    log = out / "long.log.jsonl"
    deadline = time.time() + PATIENCE_S
    while not (log.exists() and any(r.get("type") == "savepoint" and "path" in r and r["chunk"] >= 4
                                    for r in read_log(log))):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert manifest(out)["long"]["status"] == "running"   # as the killed batch left it
    assert not any(r.get("type") == "summary" for r in read_log(log))   # killed mid-way

    again = run(jobs, "--out-dir", out, *args)
    assert again.exit_code == 0, again.output
    entry = manifest(out)["long"]
    assert entry["status"] == "done" and entry["resumed_at"] >= 4 and entry["attempts"] == 2
    chunks = [r for r in read_log(log) if r.get("type") == "chunk"]
    assert [r["chunk"] for r in chunks] == list(range(chunks_total))   # kept up to the save point, then went on
    assert any(r.get("type") == "resume" for r in read_log(log))
    assert len(frames(out / "long.mp4")) == chunks[-1]["frames_total"] == 9 + (chunks_total - 1) * 12


# ---- bad input: one line, nothing written -------------------------------------------------------

@pytest.mark.parametrize("name, text, needles", [
    ("jobs.jsonl", '{"chunks": 2}\n{"chunks": 2,\n', ["jobs.jsonl line 2", "not valid JSON"]),
    ("jobs.jsonl", '{"chunks": 2}\n\n[1, 2]\n', ["jobs.jsonl line 3", "JSON object"]),
    ("jobs.jsonl", '{"chunks": "two"}\n', ["jobs.jsonl line 1", "'chunks'", "not an integer"]),
    ("jobs.jsonl", '{"chunks": 2, "host_memory": 4}\n', ["jobs.jsonl line 1", "unknown job option 'host_memory'"]),
    ("jobs.jsonl", '{"chunks": 2, "device": "cuda:1"}\n', ["jobs.jsonl line 1", "--devices"]),
    ("jobs.jsonl", '{"chunks": 0}\n', ["jobs.jsonl line 1", "chunks must be at least 1"]),
    ("jobs.csv", "name,chunks\na,2\nb,2,3\n", ["jobs.csv line 3", "3 cells, the header has 2"]),
    ("jobs.yaml", "keys: [w, a]\nframes: 10\n", ["jobs.yaml", "not a job list", "glob"]),
    ("jobs.yaml", "- chunks: 2\n- chunks: x\n", ["jobs.yaml line 2", "not an integer"]),
    ("jobs.jsonl", '{"name": "a", "chunks": 2}\n{"name": "a", "chunks": 3}\n', ["line 2", "job name 'a'", "line 1"]),
    ("jobs.jsonl", '{"out": "x.mp4"}\n{"name": "y", "out": "x.mp4"}\n', ["line 2", "x.mp4", "'x'"]),
    ("jobs.txt", "a\n", ["unknown format '.txt'"]),
])
def test_a_bad_job_list_is_one_line_naming_the_line(tmp_path, name, text, needles):
    jobs = tmp_path / name
    jobs.write_text(text)
    one_line_error(run(jobs, "--out-dir", tmp_path / "out", *SYNTHETIC), *needles)
    assert not (tmp_path / "out").exists()


def test_two_workers_given_one_spill_directory_are_refused(tmp_path):
    jobs = write_jsonl(tmp_path / "jobs.jsonl", {"name": "a"}, {"name": "b"})
    line = one_line_error(run(jobs, "--out-dir", tmp_path / "out", *SYNTHETIC, "--workers", "2",
                              "--spill", tmp_path / "spill"), "'a'", "'b'", "2 workers", "{job}")
    assert str(tmp_path / "spill") in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "spill").exists()


def test_a_host_share_too_small_is_refused_before_anything_runs(tmp_path):
    jobs = write_jsonl(tmp_path / "jobs.jsonl", {"name": "a", "chunks": 2})
    one_line_error(run(jobs, "--out-dir", tmp_path / "out", *SYNTHETIC, "--workers", "2", "--host-mem", "2"),
                   "jobs.jsonl line 1", "--host-mem")
    assert not (tmp_path / "out").exists()


def test_no_trajectory_matching_the_glob(tmp_path):
    one_line_error(run(str(tmp_path / "none" / "*.yaml"), "--out-dir", tmp_path / "out", *SYNTHETIC),
                   "no trajectory file matches")


def test_ray_not_installed_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)   # what `import ray` meets without the package
    jobs = write_jsonl(tmp_path / "jobs.jsonl", {"name": "a"})
    one_line_error(run(jobs, "--out-dir", tmp_path / "out", *SYNTHETIC, "--ray"), "worldpager[ray]")
    assert not (tmp_path / "out").exists()


def test_a_glob_of_trajectories_is_one_job_each(tmp_path):
    for name in ("north", "south"):
        (tmp_path / f"{name}.yaml").write_text(YAW.read_text())
    out = tmp_path / "out"
    result = run(str(tmp_path / "*.yaml"), "--out-dir", out, *SYNTHETIC, "--chunks", "2", "--quiet")
    assert result.exit_code == 0, result.output
    assert sorted(manifest(out)) == ["north", "south"]
    assert all((out / f"{n}.mp4").is_file() for n in ("north", "south"))


def test_a_stopped_batch_marks_its_job_interrupted_and_the_next_run_resumes_it(tmp_path):
    """What Ctrl-C / SIGTERM do (the CLI's handler calls ``request_stop``): the job in hand stops after its
    chunk with a last save point, the batch is interrupted, the next run goes on from that save point."""
    from engine.batch.driver import BatchDriver
    from engine.batch.jobs import load_jobs
    from engine.batch.local import InlineBackend
    from engine.batch.manifest import Manifest
    from engine.batch.plan import plan_jobs

    shared = {"model": "synthetic", "chunk_ms": 5, "kv_scale": 0.034, "pool_slots": 4, "kv_bits": 16,
              "spill": str(tmp_path / "spill" / "{job}"), "decode_overlap": False}   # the stop lands after chunk 2
    jobs = write_jsonl(tmp_path / "jobs.jsonl", {"name": "first", "chunks": 6}, {"name": "second", "chunks": 2})
    out = tmp_path / "out"
    plans = plan_jobs(load_jobs(str(jobs), shared), out, 1, "cpu", None, 8 << 30, 0)
    with Manifest(out) as m:
        driver = BatchDriver(plans, m, InlineBackend("cpu"))
        driver.on_event = lambda e: e.kind == "chunk" and e.record["chunk"] == 2 and driver.request_stop()
        assert driver.run().status == "interrupted"
        assert m.entry("first")["status"] == "interrupted" and m.entry("second")["status"] == "pending"
    again = run(jobs, "--out-dir", out, *SYNTHETIC, "--spill", tmp_path / "spill" / "{job}")
    assert again.exit_code == 0, again.output
    entries = manifest(out)
    assert entries["first"]["resumed_at"] == 3, (entries["first"], again.output)
    assert entries["second"]["status"] == "done"
