"""``--spill-max`` under save points: a run whose quota is full (chunks being dropped every few chunks),
killed with SIGKILL, resumed, gives the same video frame for frame as the run never interrupted; its
dropped chunks are the same; the spill directory never took more than the quota; a quota below what the
session pins is a one-line error before anything is written.

The quota (3 MiB: 16 blocks of the arena model's int4 chunks, 10 kept) is far below the unbounded run's
need (40 chunks), so drops start around chunk 12 and the kill comes after many of them. ``--late-prefetch
wait`` keeps the frames independent of the machine's speed.
"""
from __future__ import annotations

import subprocess

import pytest

from engine.runtime.telemetry import read_log
from tests_support import PATIENCE_S, WORLDPAGER
from tests.cli.test_resume import ENV, _frames, _kill_when, _resume, _savepoint_at_least

CHUNKS = 40
QUOTA = "3M"
ARGS = ["--model", "arena", "--pool-slots", "4", "--save-every", "2", "--late-prefetch", "wait",
        "--spill-max", QUOTA]


def _generate(tmp, name: str, args=ARGS) -> subprocess.Popen:
    return subprocess.Popen(WORLDPAGER + ["generate", *args, "--chunks", str(CHUNKS), "--quiet",
                                          "--out", str(tmp / f"{name}.mp4"), "--spill", str(tmp / f"{name}.spill")],
                            cwd=tmp, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _dropped(records) -> list[int]:
    return sorted(c for r in records if r["type"] == "drop" for c in r["chunks"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    proc = _generate(tmp, "ref")
    assert proc.wait(timeout=PATIENCE_S) == 0, proc.communicate()
    return _frames(tmp / "ref.mp4"), read_log(tmp / "ref.log.jsonl")


def test_the_reference_run_keeps_to_its_quota(reference):
    _, records = reference
    chunks = [r for r in records if r["type"] == "chunk"]
    assert all(r["disk_alloc_bytes"] <= r["spill_max_bytes"] for r in chunks)
    summary = records[-1]["quota"]
    assert summary["dropped"] >= 15 and summary["dropped"] == len(_dropped(records))
    assert {r["reason"] for r in records if r["type"] == "drop"} <= {"redundant", "cold"}


@pytest.mark.parametrize("kill_after", ["savepoint 24", "chunk 29"])
def test_killed_under_a_full_quota_and_resumed_is_bit_identical(tmp_path, reference, kill_after):
    frames_ref, records_ref = reference
    proc = _generate(tmp_path, "run")
    log = tmp_path / "run.log.jsonl"
    kind, n = kill_after.split()
    seen = _savepoint_at_least(int(n)) if kind == "savepoint" else \
        (lambda r: r.get("type") == "chunk" and r["chunk"] >= int(n))
    _kill_when(proc, log, seen)
    before = read_log(log)
    assert _dropped(before), "the kill came before the quota was full"
    done = _resume(tmp_path / "run.mp4")
    assert done.returncode == 0, done.stderr
    frames = _frames(tmp_path / "run.mp4")
    assert len(frames) == len(frames_ref)
    assert all((a == b).all() for a, b in zip(frames, frames_ref)), "resumed frames differ"
    records = read_log(log)
    assert records[-1]["status"] == "done"
    assert records[-1]["quota"]["dropped"] == records_ref[-1]["quota"]["dropped"]
    assert not [r for r in records if r["type"] == "note" and "misses" in r]   # every slot chunk came back
    assert all(r["disk_alloc_bytes"] <= r["spill_max_bytes"] for r in records if r["type"] == "chunk")


def test_a_quota_below_what_is_pinned_is_a_one_line_error(tmp_path):
    proc = _generate(tmp_path, "small", [*ARGS[:-1], "1M"])
    out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode != 0
    assert err.strip().count("\n") == 0 and "--spill-max 1M holds" in err and "give at least" in err
    assert not (tmp_path / "small.mp4").exists()


def test_tail_and_report_show_the_disk_against_the_quota(tmp_path, reference):
    """The reference run's log (kept by the fixture) read back by ``tail`` and ``report``."""
    import json

    log = tmp_path / "ref.log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in reference[1]))
    tail = subprocess.run(WORLDPAGER + ["tail", str(log)], capture_output=True, text=True, timeout=PATIENCE_S)
    assert tail.returncode == 0, tail.stderr
    assert "spill " in tail.stdout and "dropped at chunk" in tail.stdout
    assert "chunks dropped (" in tail.stdout.splitlines()[-1]
    report = subprocess.run(WORLDPAGER + ["report", str(log), "--out", str(tmp_path / "r")], capture_output=True,
                            text=True, timeout=PATIENCE_S)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout.splitlines()[-1])["figures"]["disk_use"].endswith("disk_use.png")
    assert "chunks dropped" in (tmp_path / "r" / "report.html").read_text()


def test_plan_predicts_the_disk_with_and_without_the_quota(tmp_path):
    import json

    done = subprocess.run(WORLDPAGER + ["plan", "--model", "mg2-universal", "--minutes", "37.5", "--spill",
                                        str(tmp_path), "--spill-max", "100G", "--host-mem", "64", "--probe-mib", "1"],
                          capture_output=True, text=True, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    quota = json.loads(done.stdout.splitlines()[-1])["quota"]
    assert quota["spill_max_bytes"] == 100 << 30
    assert quota["disk_bytes_quota"] <= quota["spill_max_bytes"] < quota["disk_bytes_unbounded"]
    assert quota["drops_from_chunk"] == quota["keep"]
