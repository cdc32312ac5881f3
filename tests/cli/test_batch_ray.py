"""``worldpager batch --ray`` on a real local Ray (2 CPUs, started once for the module).

* the same batch on the local backend (two worker processes) and on Ray (two CPU actors) writes the
  same MP4s frame for frame, and each actor loads the model once;
* an actor killed while its job renders: the job is resubmitted to the other actor, which resumes it
  (or starts it over) and finishes it: every chunk once in its log, a complete MP4. (That a resumed
  run's frames equal an uninterrupted run's is shown with real models in test_batch.py and
  test_resume.py; the synthetic model used here for its steady pace draws blank frames.)

Skipped when Ray is not installed (``pip install 'worldpager[ray]'``), except under ``CI=true``, where
it is part of the test extra and these tests must run.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.runtime.telemetry import read_log
from worldpager_cli.main import cli

try:
    import ray
except ImportError:   # the optional extra
    ray = None

REPO = Path(__file__).resolve().parents[2]
YAW = REPO / "trajectories" / "yaw.yaml"


@pytest.fixture(scope="module")
def local_ray():
    if ray is None:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed (it is in the test extra: pip install -e '.[test]')")
        pytest.skip("ray is not installed (pip install 'worldpager[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def run(*args):
    return CliRunner().invoke(cli, ["batch", *map(str, args)], catch_exceptions=False)


def frames(path: Path):
    import av

    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def same_frames(a: Path, b: Path) -> bool:
    import numpy as np

    fa, fb = frames(a), frames(b)
    return len(fa) == len(fb) > 0 and all(np.array_equal(x, y) for x, y in zip(fa, fb))


def test_ray_actors_write_the_local_batchs_frames(local_ray, tmp_path):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  - {{name: one, arena_seed: 3, trajectory: {YAW}}}\n  - {{name: two, arena_seed: 4}}\n")
    shared = ["--model", "arena", "--pool-slots", "4", "--chunks", "2", "--quiet", "--late-prefetch", "wait",
              "--host-mem", "12"]   # 6 GiB a worker, whatever else the machine is doing
    local = run(jobs, "--out-dir", tmp_path / "local", "--workers", "2", *shared)
    assert local.exit_code == 0, local.output
    on_ray = run(jobs, "--out-dir", tmp_path / "ray", "--ray", "auto", *shared)
    assert on_ray.exit_code == 0, on_ray.output
    summary = json.loads(on_ray.output.strip().splitlines()[-1])
    assert (summary["backend"], summary["workers"], summary["done"], summary["model_loads"]) == ("ray", 2, 2, 2)
    assert {r["worker"] for r in summary["results"]} == {"ray-0", "ray-1"}
    for name in ("one", "two"):
        assert same_frames(tmp_path / "local" / f"{name}.mp4", tmp_path / "ray" / f"{name}.mp4"), name


def test_a_killed_actor_s_job_is_resubmitted_to_another(local_ray, tmp_path):
    from engine.batch.driver import BatchDriver
    from engine.batch.jobs import load_jobs
    from engine.batch.manifest import Manifest
    from engine.batch.plan import plan_jobs
    from engine.batch.ray_backend import RayBackend

    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text('{"name": "victim", "chunks": 8}\n{"name": "other", "chunks": 2}\n')
    shared = {"model": "synthetic", "chunk_ms": 150, "kv_scale": 0.034, "pool_slots": 4, "kv_bits": 16, "save_every": 2,
              "spill": str(tmp_path / "spill" / "{job}")}
    job_list = load_jobs(str(jobs), shared)
    backend = RayBackend.connect("auto", jobs=len(job_list))
    plans = plan_jobs(job_list, tmp_path / "out", backend.workers, "cpu", 12.0, backend.host_bytes, 0)
    killed = []

    def kill_victim_once(event):
        if event.kind == "chunk" and event.name == "victim" and event.record["chunk"] >= 4 and not killed:
            actor = next(a for a in backend.actors if a.label == event.worker)
            killed.append(actor.label)
            ray.kill(actor.handle)

    with Manifest(tmp_path / "out") as manifest:
        result = BatchDriver(plans, manifest, backend, on_event=kill_victim_once).run()
        entry = manifest.entry("victim")
    assert killed and result.status == "done", entry
    assert entry["status"] == "done" and entry["worker"] != killed[0] and entry["attempts"] == 2

    log = [r for r in read_log(tmp_path / "out" / "victim.log.jsonl") if r.get("type") == "chunk"]
    assert [r["chunk"] for r in log] == list(range(8))   # every chunk once, made again from the save point on
    assert len(frames(tmp_path / "out" / "victim.mp4")) == log[-1]["frames_total"]
