"""``--json`` on every command that prints a result: stdout is exactly one JSON object; what a person
reads (the table, the notes) goes to stderr. Every command of the CLI either takes ``--json`` or is one
that prints no result (listed here with what it prints instead)."""
from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from worldpager_cli.main import cli

# Commands that print no JSON result (what they print instead), and the run commands whose --json is the
# run's summary (docs/conventions.md).
NO_RESULT: dict[str, str] = {}   # none today: every command prints a result


def _leaves(group: click.Group, prefix: str = ""):
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            yield from _leaves(command, path + " ")
        else:
            yield path, command


def test_every_command_takes_json_or_prints_no_result():
    missing = [path for path, command in _leaves(cli)
               if path not in NO_RESULT and "--json" not in {o for p in command.params for o in p.opts}]
    assert missing == []


@pytest.mark.parametrize("args", [
    ["plan", "--preset", "mg2-4090-32g", "--minutes", "1"],
    ["inspect", "--model", "micro"],
    ["bench", "store", "--spill", ".", "--dry-run"],
    ["bench", "predict", "--chunks", "12"],
    ["download", "--dry-run", "--dir", "x"],
    ["bench", "arena", "--episodes", "1", "--chunks", "4"],
])
def test_json_puts_one_object_on_stdout(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), dict)              # the whole of stdout: one object
    assert result.stderr.strip()                                    # the table went to stderr
    plain = CliRunner().invoke(cli, args)
    assert json.loads(plain.stdout.strip().splitlines()[-1]).keys() == json.loads(result.stdout).keys()


def test_doctor_json(tmp_path):
    result = CliRunner().invoke(cli, ["doctor", "--spill", str(tmp_path), "--json"])
    assert json.loads(result.stdout)["checks"]


def test_json_lines_are_strict_json_with_unmeasured_figures_as_null():
    from worldpager_cli.json_output import json_line

    line = json_line({"gain_db": float("nan"), "rows": [1.5, float("inf")], "kind": {"se": float("-inf")}})
    assert line == '{"gain_db":null,"rows":[1.5,null],"kind":{"se":null}}'
    json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
