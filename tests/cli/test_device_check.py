"""``worldpager bench device --dry-run``: the GPU check's whole control flow on the CPU, as CI runs it.

The dry run is the same code as the run on a GPU (every step, at tiny sizes), so these tests are what
is known about the check before its one chance on a lent GPU: every step reports, a step that fails or
overruns its budget is one row and the steps after it still run, and without PyAV only the MP4 steps
are skipped, with the reason. Budgets are raised far above any run's time (tests/tests_support.py
PATIENCE_S) except where a test is about a budget, so no outcome depends on the machine's speed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.bench.device_check import STEPS
from engine.bench.device_step_names import STEP_NAMES
from engine.bench.device_steps import junit_counts
from tests_support import PATIENCE_S, WORLDPAGER, run_cli_inprocess

REPO = Path(__file__).resolve().parents[2]
STATUSES = {"ok", "failed", "skipped"}


def patient(*names: str) -> list[str]:
    args = ["--budget-s", str(4 * PATIENCE_S)]
    for name in names or STEPS:
        args += ["--step-budget", f"{name}={PATIENCE_S}"]
    return args


def bench_device(out: Path, *args: str, env: dict | None = None, here: bool = False
                 ) -> tuple[subprocess.CompletedProcess, dict]:
    """``bench device --dry-run``; with ``here`` the command itself runs in this process (its steps still
    run in the child processes it starts and watches)."""
    command = ["bench", "device", "--dry-run", "--out", str(out), *args]
    if here:
        code, stdout, stderr = run_cli_inprocess(command, cwd=out.parent)
        run = subprocess.CompletedProcess(command, code, stdout, stderr)
    else:
        run = subprocess.run(WORLDPAGER + command, capture_output=True, text=True, timeout=4 * PATIENCE_S,
                             cwd=out.parent, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads((out / "device_check.json").read_text())
    assert doc["dry_run"] is True and doc["check"] == "device"
    for row in doc["steps"]:
        assert row["status"] in STATUSES, row
        assert (row["reason"] is None) == (row["status"] == "ok"), row
    return run, doc


def rows(doc: dict) -> dict[str, dict]:
    return {r["name"]: r for r in doc["steps"]}


@pytest.mark.slow
def test_dry_run_runs_every_step_and_writes_json_and_markdown(tmp_path):
    run, doc = bench_device(tmp_path / "check", *patient())
    assert [r["name"] for r in doc["steps"]] == list(STEPS)
    assert doc["failed"] == [] and doc["status"] == "ok", [(r["name"], r["reason"]) for r in doc["steps"]]
    assert doc["skipped"] == []          # PyAV and Triton are here: nothing to skip
    got = rows(doc)
    assert got["quant"]["figures"]["interpreted"] is True                      # Triton ran, interpreted
    assert set(got["quant"]["figures"]["backends"]) == {"reference", "triton"}
    assert got["parity_micro"]["figures"]["latents_rel_l2"][0] <= got["parity_micro"]["figures"]["tolerance_rel_l2"]
    assert got["dit_mg2"]["figures"]["context_tokens"] == 5 * got["dit_mg2"]["figures"]["chunk_tokens"]
    synthetic = got["synthetic_session"]["figures"]["runs"]
    assert set(synthetic) == {"prefetch", "on-demand"} and all(r["status"] == "done" for r in synthetic.values())
    assert synthetic["on-demand"]["disk_bytes_read"] > 0                       # the disk tier was read
    assert got["session_mp4"]["figures"]["frames"] == got["session_mp4"]["figures"]["expected_frames"]
    table = (tmp_path / "check" / "device_check.md").read_text()
    assert table.startswith("# Device check (dry run on the CPU)")
    assert all(f"| {name} | ok |" in table for name in STEPS)
    last = json.loads(run.stdout.strip().splitlines()[-1])
    assert last["bench"] == "device" and last["steps"] == doc["steps"]


def test_a_failing_step_is_one_row_and_the_next_steps_still_run(tmp_path):
    not_a_dir = tmp_path / "spill-file"
    not_a_dir.write_text("a file where the disk tier's directory should be")
    _, doc = bench_device(tmp_path / "check", "--steps", "env,synthetic_session,arena", "--spill", str(not_a_dir),
                          *patient("env", "synthetic_session", "arena"), here=True)
    got = rows(doc)
    assert list(got) == ["env", "synthetic_session", "arena"]       # in the order asked for
    assert got["synthetic_session"]["status"] == "failed"
    assert "--spill directory not found" in got["synthetic_session"]["reason"]
    assert got["env"]["status"] == got["arena"]["status"] == "ok"
    assert doc["status"] == "failed" and doc["failed"] == ["synthetic_session"]


def test_a_step_past_its_budget_is_stopped_and_a_fresh_process_goes_on(tmp_path):
    """pytest in a subprocess cannot start, let alone finish, in 50 ms: the step is killed with its
    process group, and the next step runs in a new child."""
    run, doc = bench_device(tmp_path / "check", "--steps", "pytest_gpu,env", "--budget-s", str(PATIENCE_S),
                            "--step-budget", "pytest_gpu=0.05", "--step-budget", f"env={PATIENCE_S}", here=True)
    got = rows(doc)
    assert got["pytest_gpu"]["status"] == "failed"
    assert got["pytest_gpu"]["reason"] == "ran past its budget of 0.05 s and was stopped"
    assert got["env"]["status"] == "ok"
    assert "pytest_gpu: failed" in run.stderr


def hide_av(tmp_path: Path) -> dict:
    """An environment whose ``import av`` fails as it does where PyAV is not installed."""
    hide = tmp_path / "no_av"
    (hide / "av").mkdir(parents=True)
    (hide / "av" / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'av\'", name="av")\n')
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(hide), str(REPO), os.environ.get("PYTHONPATH", "")]))


def test_junit_counts_count_modules_that_need_pyav_apart(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_video_thing.py").write_text("import av\n\ndef test_x():\n    pass\n")
    (suite / "test_other.py").write_text("import missing_module_xyz\n")
    (suite / "test_kernels.py").write_text("def test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2\n\n"
                                           "def test_skip():\n    import pytest\n    pytest.skip('no')\n")
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    "--continue-on-collection-errors", f"--junitxml={junit}", str(suite)],
                   env=hide_av(tmp_path), cwd=tmp_path, capture_output=True, timeout=PATIENCE_S)
    got = junit_counts(junit)
    assert (got["passed"], got["failed"], got["errors"], got["skipped"]) == (1, 1, 1, 1)
    assert len(got["av_collection_errors"]) == 1 and "test_video_thing" in got["av_collection_errors"][0]
    assert any("test_other" in name for name in got["failures"])
    assert any("test_bad" in name for name in got["failures"])


def test_without_pyav_the_mp4_steps_are_skipped_with_the_reason_and_the_rest_run(tmp_path):
    """A folder first on PYTHONPATH whose ``av`` cannot be imported stands for a machine without PyAV;
    the check, its children and the model steps import no PyAV."""
    env = hide_av(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import av"], env=env, capture_output=True, text=True)
    assert probe.returncode == 1 and "No module named 'av'" in probe.stderr
    names = ("env", "quant", "parity_micro", "dit_mg2", "arena", "session_mp4", "synthetic_session")
    _, doc = bench_device(tmp_path / "check", "--steps", ",".join(names), *patient(*names), env=env)
    got = rows(doc)
    for name in ("session_mp4", "synthetic_session"):
        assert got[name]["status"] == "skipped"
        assert got[name]["reason"].startswith("PyAV is not importable") and ".whl/" in got[name]["reason"]
    assert all(got[n]["status"] == "ok" for n in names[:5]), [(n, got[n]["reason"]) for n in names]
    assert got["env"]["figures"]["av"].startswith("missing")
    assert doc["skipped"] == ["session_mp4", "synthetic_session"] and doc["status"] == "ok"


def test_the_steps_run_in_the_order_of_their_names():
    """``--steps`` is read against the torch-free names before torch is imported."""
    assert tuple(STEPS) == STEP_NAMES


def test_bad_options_are_one_line_errors(tmp_path):
    """The first through the real entry point, as a user meets it; the others in this process (the same
    command and the same checks, without a process that imports torch for each)."""
    run = subprocess.run(WORLDPAGER + ["bench", "device", "--dry-run", "--out", str(tmp_path / "x"), "--steps", "nope"],
                         capture_output=True, text=True, timeout=PATIENCE_S)
    assert run.returncode == 1 and "unknown step 'nope'" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    for args, message in ((["--steps", "env,env"], "name each step once"),
                          (["--step-budget", "env=-1"], "seconds must be positive"),
                          (["--step-budget", "nope=3"], "no step 'nope'"), (["--budget-s", "0"], "must be positive")):
        code, out, err = run_cli_inprocess(["bench", "device", "--dry-run", "--out", tmp_path / "x", *args])
        assert code == 1 and message in err and out == "", (args, err)
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
