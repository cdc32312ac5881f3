"""Errors that must name their real cause on one line, and leave nothing the run made when it made nothing.

* a name with a newline (missing, or a file that is not an image; a log ``tail`` finds unfinished) is one
  error line: control characters are escaped where every error line is printed;
* ``batch --quiet`` still prints a failed job's line (quiet hides progress, not failures);
* a full-size model without ``--checkpoint`` is refused before anything is built or written, unless
  ``--seeded-weights`` asks for it;
* a run that fails before its first chunk removes the MP4, log and config it made, never a file that
  was there before;
* a ``--spill-max`` below one chunk names the quota's minimum;
* ``ulimit -f`` (EFBIG) is told as the file-size limit with its value, not as a full drive.
"""
from __future__ import annotations

import json
import resource
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.errors import InputError
from engine.session.loop import Session
from tests_support import PATIENCE_S, WORLDPAGER, run_cli_inprocess
from worldpager_cli.main import cli

SYNTHETIC = ["--model", "synthetic", "--chunk-ms", "0", "--kv-scale", "0.034", "--pool-slots", "4", "--kv-bits", "16"]


def worldpager(*args, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(WORLDPAGER + [str(a) for a in args], capture_output=True, text=True, cwd=cwd,
                          timeout=PATIENCE_S, **kwargs)


def one_error_line(proc: subprocess.CompletedProcess, *needles: str, code: int = 1) -> str:
    """stderr is exactly one ``worldpager: error:`` line holding every needle; exit ``code``."""
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_name_with_a_newline_stays_on_one_line(tmp_path):
    missing = worldpager("generate", "--model", "micro", "--chunks", "1", "--image", "a\nb.png", "--out",
                         "x.mp4", "-q", cwd=tmp_path)
    one_error_line(missing, "a\\nb.png")
    bad = tmp_path / "bad\nimage.png"
    bad.write_bytes(b"not an image at all")
    unreadable = worldpager("generate", "--model", "micro", "--chunks", "1", "--image", bad, "--out", "x.mp4",
                            "-q", cwd=tmp_path)
    one_error_line(unreadable, "bad\\nimage.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]   # nothing written


def test_tail_of_an_unfinished_log_with_a_newline_in_its_name_is_one_line(tmp_path):
    log = tmp_path / "odd\nname.log.jsonl"
    log.write_text("")
    proc = worldpager("tail", "--no-follow", log, cwd=tmp_path)
    one_error_line(proc, "odd\\nname.log.jsonl", "the session did not finish", code=3)


def test_batch_quiet_still_prints_a_failed_jobs_line(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("keys: [w, a\n")
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"name": "good", "chunks": 1}) + "\n"
                    + json.dumps({"name": "bad", "chunks": 1, "trajectory": str(broken)}) + "\n")
    proc = worldpager("batch", jobs, "--out-dir", tmp_path / "out", "--quiet", *SYNTHETIC, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("worldpager: bad: failed: "), proc.stderr
    assert str(broken) in lines[0] and "line 2" in lines[0]


def test_a_full_size_model_without_weights_is_refused_before_anything_is_written(tmp_path):
    proc = worldpager("generate", "--model", "mg2-gta", "--chunks", "1", "--out", "g.mp4", cwd=tmp_path)
    one_error_line(proc, "--model mg2-gta has no built-in weights", "--checkpoint DIR",
                   "worldpager download --mode gta", "--seeded-weights")
    code, out, err = run_cli_inprocess(["generate", "--preset", "mg2-4090-32g", "--chunks", "1", "--out", "p.mp4"],
                                       cwd=tmp_path)   # the same refusal through a preset: in this process
    one_error_line(subprocess.CompletedProcess([], code, out, err), "--model mg2-universal has no built-in weights")
    assert list(tmp_path.iterdir()) == []


def test_seeded_weights_lets_a_full_size_model_through_and_the_small_ones_need_no_flag():
    from engine.model.registry import model_spec
    from engine.settings.overlay import resolve_session_config
    from engine.settings.options import overlay

    for name in ("mg2-universal", "mg2-templerun"):
        cfg = resolve_session_config(None, overlay({"model": name, "seeded_weights": True}))
        assert cfg.seeded_weights and "seeded random weights" in model_spec(cfg).banner
    for name in ("tiny", "micro"):
        assert model_spec(resolve_session_config(None, overlay({"model": name}))).name == name


def _failing_warnings(self):
    raise InputError("trajectory t.yaml: a step that fails after the outputs were opened")


def test_a_run_that_fails_before_its_first_chunk_leaves_no_outputs(tmp_path, monkeypatch):
    """A failure between the outputs' opening and the run (here: the warnings said before the load) removes
    the MP4, log and config this run made; an earlier run's files (``--overwrite``) stay as they were."""
    monkeypatch.setattr(Session, "warnings", _failing_warnings)
    out = tmp_path / "a.mp4"
    result = CliRunner().invoke(cli, ["generate", *SYNTHETIC, "--chunks", "2", "--out", str(out), "-q"])
    assert result.exit_code == 1 and "fails after the outputs were opened" in result.output, result.output
    assert list(tmp_path.iterdir()) == []

    out.write_bytes(b"an earlier run's video")
    again = CliRunner().invoke(cli, ["generate", *SYNTHETIC, "--chunks", "2", "--out", str(out), "--overwrite"])
    assert again.exit_code == 1, again.output
    assert [p.name for p in tmp_path.iterdir()] == ["a.mp4"] and out.read_bytes() == b"an earlier run's video"


def test_a_batch_job_that_fails_before_its_first_chunk_leaves_no_outputs(tmp_path, monkeypatch):
    monkeypatch.setattr(Session, "warnings", _failing_warnings)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"name": "j", "chunks": 1}) + "\n")
    result = CliRunner().invoke(cli, ["batch", str(jobs), "--out-dir", str(tmp_path / "out"), *SYNTHETIC])
    assert result.exit_code == 1 and "fails after the outputs were opened" in result.output, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["batch-manifest.json"]


def test_a_quota_below_one_chunk_names_the_quotas_minimum(tmp_path):
    result = CliRunner().invoke(cli, ["generate", "--model", "synthetic", "--kv-scale", "0.034", "--chunks", "2",
                                      "--spill", str(tmp_path / "sp"), "--spill-max", "16K",
                                      "--out", str(tmp_path / "q.mp4")])
    assert result.exit_code == 1, result.output
    line = result.output.strip()
    assert "\n" not in line and line.startswith("worldpager: error: --spill-max 16K (16.0 KiB) is below the quota's "
                                                "minimum: one stored chunk takes "), line
    assert " MiB (" in line and "give at least " in line and "0.0 MiB" not in line
    assert list(tmp_path.iterdir()) == []


def _file_size_limit(kib: int):
    def limit():   # in the child, before exec: SIGXFSZ at its default action (a core dump), as a shell leaves it
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib * 1024, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    return limit


@pytest.mark.parametrize("kib, extra, needle", [
    (8, [], "cannot write "),                                                 # the MP4 or the log
    (40, ["--spill", "sp", "--save-every", "1"], "cannot write the spill directory "),
])
def test_ulimit_f_is_told_as_the_file_size_limit(tmp_path, kib, extra, needle):
    proc = worldpager("generate", "--model", "micro", "--chunks", "4", "--out", "a.mp4", "-q", *extra, cwd=tmp_path,
                      preexec_fn=_file_size_limit(kib))
    assert proc.returncode == 1, (proc.returncode, proc.stderr)   # not killed by SIGXFSZ
    line = proc.stderr.splitlines()[-1]
    assert line.startswith("worldpager: error: " + needle), proc.stderr
    assert f"File too large: this process may write files of at most {kib} KiB (ulimit -f {kib}, RLIMIT_FSIZE)" \
        in line and "ulimit -f unlimited" in line and "full" not in line, line
    assert "Traceback" not in proc.stderr
    # a save point that could not be made says the drive's own error in the log, and no misleading
    # warning (a save point "timed out") comes before the one error line
    assert "TimeoutError" not in proc.stderr and "save point" not in proc.stderr.replace(line, ""), proc.stderr
    logged = tmp_path / "a.log.jsonl"
    lines = logged.read_text().splitlines() if logged.exists() else []   # the last may be cut by the limit
    errors = [json.loads(r)["error"] for r in lines if r.startswith('{"type":"savepoint"') and '"error"' in r]
    assert all("File too large" in e for e in errors), errors
