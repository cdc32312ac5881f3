"""Where a new session's settings come from, and in which order: flags > WORLDPAGER_* environment
variables > preset > the user's config file > defaults (``generate``, ``plan`` and batch jobs alike).
Also ``-h`` for help, and one line for a config file that is missing or wrong.

Each case runs ``plan`` (it resolves the config ``generate`` would run and prints its k in its JSON line, in
well under a second) in a subprocess with its own environment.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from engine.batch.jobs import Job
from engine.batch.plan import job_config
from tests_support import WORLDPAGER, run_cli_inprocess


def _plan(tmp_path, *args, env=None, config=None, here=False) -> subprocess.CompletedProcess:
    """``worldpager plan`` with ``env`` added to the environment: in a process of its own, or with
    ``here`` in this process (the variables set for the call only)."""
    environ = dict(env or {})
    if config is not None:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        environ["WORLDPAGER_CONFIG"] = str(path)
    args = ["plan", "--model", "tiny", "--chunks", "10", "--quiet", *args]
    if here:
        code, out, err = run_cli_inprocess(args, env=environ, cwd=tmp_path)
        return subprocess.CompletedProcess(args, code, out, err)
    return subprocess.run(WORLDPAGER + args, cwd=tmp_path, env={**os.environ, **environ}, capture_output=True,
                          text=True, timeout=300)


def _retrieve_k(result) -> int:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])["retrieve_k"]


def _preset(tmp_path, k: int):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"memory": {"retrieve_k": k}}))
    return str(path)


def test_flags_then_environment_then_preset_then_config_file_then_defaults(tmp_path):
    """Each step in this process (its environment set for the call); the variable over the preset once in
    a process of its own, whose environment it inherits."""
    assert _retrieve_k(_plan(tmp_path, here=True)) == 3                                 # the default
    assert _retrieve_k(_plan(tmp_path, config={"memory": {"retrieve_k": 4}}, here=True)) == 4   # config file
    assert _retrieve_k(_plan(tmp_path, "--preset", _preset(tmp_path, 5),
                             config={"memory": {"retrieve_k": 4}}, here=True)) == 5     # preset over file
    assert _retrieve_k(_plan(tmp_path, "--preset", _preset(tmp_path, 5), env={"WORLDPAGER_RETRIEVE_K": "6"},
                             config={"memory": {"retrieve_k": 4}}, here=True)) == 6     # environment over preset
    assert _retrieve_k(_plan(tmp_path, "--preset", _preset(tmp_path, 5), env={"WORLDPAGER_RETRIEVE_K": "6"},
                             config={"memory": {"retrieve_k": 4}})) == 6                # ... in a process too
    assert _retrieve_k(_plan(tmp_path, "--preset", _preset(tmp_path, 5), "--retrieve-k", "7",
                             env={"WORLDPAGER_RETRIEVE_K": "6"}, config={"memory": {"retrieve_k": 4}},
                             here=True)) == 7


def test_a_batch_job_reads_the_config_file_under_its_own_options(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"memory": {"retrieve_k": 4, "pool_slots": 6}}))
    monkeypatch.setenv("WORLDPAGER_CONFIG", str(path))
    cfg = job_config(Job("j", {"model": "tiny", "retrieve_k": 2}, "line 1"), tmp_path)
    assert cfg.memory.retrieve_k == 2 and cfg.memory.pool_slots == 6


@pytest.mark.parametrize("config, needle", [
    ({"memory": {"retreive_k": 4}}, "retreive_k"),
    ({"memory": {"retrieve_k": "four"}}, "retrieve_k"),
])
def test_a_wrong_config_file_is_one_line_naming_it(tmp_path, config, needle):
    result = _plan(tmp_path, config=config)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "config.yaml" in lines[0] and needle in lines[0]


def test_a_named_config_file_that_is_missing_is_one_line(tmp_path):
    result = _plan(tmp_path, env={"WORLDPAGER_CONFIG": str(tmp_path / "nope.yaml")})
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "nope.yaml" in lines[0], result.stderr


def test_h_is_help_for_the_tool_and_every_command(tmp_path):
    for args in ([], ["generate"], ["plan"], ["batch"], ["tail"]):
        result = subprocess.run(WORLDPAGER + [*args, "-h"], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 and "Usage:" in result.stdout, (args, result.stderr)
    assert "[env var: WORLDPAGER_SPILL]" in subprocess.run(WORLDPAGER + ["generate", "-h"], capture_output=True,
                                                           text=True, timeout=300).stdout
