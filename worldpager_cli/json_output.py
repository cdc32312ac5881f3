"""``--json`` on the commands that print a result: one JSON object on stdout, and nothing else there.

Owns ``json_result`` (a decorator that gives a command the ``--json`` flag: while the command runs with
it, everything it would print on stdout for people — tables, notes — goes to stderr instead) and
``emit_json(text)`` (the result's JSON line, always on the real stdout) and ``json_line(doc)`` (strict JSON:
an unmeasured NaN figure is null). So a script reads stdout with
one ``json.loads``, and a person still sees the table. Commands print their JSON through ``emit_json``
whether or not the flag is given: without it, the JSON line is the last line of stdout, after the table.
(``generate``, ``resume`` and ``fork`` have their own ``--json``: the run's summary object.)
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import sys

import click

_real_stdout = None   # set while a command runs with --json: where emit_json writes


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def json_line(doc) -> str:
    """``doc`` as one compact line of strict JSON: a figure that could not be measured (NaN, inf) is null."""
    return json.dumps(_finite(doc), separators=(",", ":"), allow_nan=False)


def emit_json(text: str) -> None:
    """The result's JSON line, on stdout (the real one, also while human text is sent to stderr)."""
    click.echo(text, file=_real_stdout)


@contextlib.contextmanager
def human_text_to_stderr():
    global _real_stdout
    saved = sys.stdout
    _real_stdout, sys.stdout = saved, sys.stderr
    try:
        yield
    finally:
        sys.stdout, _real_stdout = saved, None


def json_result(command):
    """Give ``command`` a ``--json`` flag (see the module docstring)."""
    @click.option("--json", "json_only", is_flag=True,
                  help="Print the result as one JSON object on stdout and nothing else there (the table "
                       "and notes go to stderr).")
    @functools.wraps(command)
    def wrapper(*args, json_only: bool = False, **kwargs):
        if not json_only:
            return command(*args, **kwargs)
        with human_text_to_stderr():
            return command(*args, **kwargs)
    return wrapper
