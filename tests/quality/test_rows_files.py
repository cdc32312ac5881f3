"""``bench quality --from-rows``: every rows file goes through one checked reader (``engine.quality.rows_read``).

A file that is not rows of the benchmark being summarised — empty, a JSON list, a row missing a field, a
number written as a string, binary bytes, brackets nested thousands deep, the other benchmark's rows,
rows of runs that do not fit together, a directory, a FIFO — is one ``worldpager: error:`` line naming the
file (and the line), exit 1, never a traceback; the repository's own rows still summarise. Nothing here
runs a session: the runner is click's (a FIFO is read in a subprocess, bounded, in case the gate fails).
"""
from __future__ import annotations

import copy
import io
import json
import os
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.files.bounded_json import JsonInputError
from tests_support import WORLDPAGER, one_line_error
from worldpager_cli.main import cli
from engine.quality.rows_read import read_rows

DOCS = Path(__file__).resolve().parents[2] / "docs"
REVISIT_ROWS, LONG_ROWS = DOCS / "quality_revisit_rows.jsonl", DOCS / "quality_long_rows.jsonl"


def run(*args):
    return CliRunner().invoke(cli, ["bench", "quality", *map(str, args)])


def rows_of(path: Path, n: int | None = None) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[:n]]


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _revisit(**changes) -> dict:
    return {**rows_of(REVISIT_ROWS, 1)[0], **changes}


def _long(**changes) -> dict:
    return {**rows_of(LONG_ROWS, 1)[0], **changes}


def _without(row: dict, *path) -> dict:
    row = copy.deepcopy(row)
    parent = row
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return row


BAD_FILES = {   # name: (file contents (bytes) or rows, --long, what the line says)
    "empty": (b"", False, "holds no rows"),
    "blank lines": (b"\n\n", False, "holds no rows"),
    "a JSON list": (b"[1, 2]\n", False, "line 1 is a list, expected an object"),
    "a row missing a field": ([_without(_revisit(), "seed")], False, "line 1 has no field 'seed'"),
    "a class missing": ([_without(_revisit(), "classes", "generated")], False, "no class 'generated'"),
    "a string number": ([_revisit(), _revisit(seed="3")], False, "line 2: field 'seed' is a string"),
    "a string number deep in a long row": ([_long(bins=[{**_long()["bins"][0], "psnr": "13406"}])], True,
                                           "line 1: bin 1: field 'psnr' is a string"),
    "negative frames": ([_revisit(classes={**_revisit()["classes"], "all": {"frames": -4, "psnr": 1.0}})], False,
                        "field 'all': field 'frames' is -4"),
    "binary bytes": (b"\xff\xfe\x00\x01binary\n", False, "line 1 is not UTF-8"),
    "deeply nested brackets": (b"[" * 3000 + b"]" * 3000 + b"\n", False, "line 1 nests 3000 levels deep"),
    "not JSON": (b'{"experiment": "revisit",\n', False, "line 1 is not JSON"),
    "an unknown experiment": ([{"experiment": "speed"}], False, "experiment 'speed' is none of"),
    "long rows without --long": (LONG_ROWS.read_bytes(), False, "line 1 is a row of the long benchmark "
                                                                "(bench quality --long): read it with --long"),
    "revisit rows with --long": (REVISIT_ROWS.read_bytes(), True, "not a row of the long benchmark (read it "
                                                                  "without --long)"),
    "a long row with no bins": ([_long(bins=[])], True, "field 'bins' is empty"),
    "a long row with fps 0": ([_long(fps=0)], True, "field 'fps' is 0"),
    "half of the late split": ([_without(_long(), "late_new")], True, "'late_stood' and 'late_new'"),
    "an episode measured twice with other settings": ([_revisit(), _revisit(chunks=41)], False,
                                                      "line 2 measures revisit arm 'window' of the same episode"),
    "an episode's frames differing between arms": (
        [_revisit(), _revisit(arm="int4", classes={**_revisit()["classes"], "all": {"frames": 1, "psnr": 20.0}})],
        False, "line 2: the frames of each class"),
    "long arms on no common seed": ([_long(seed=0), _long(arm="int4", seed=1)], True,
                                    "no held-out seed has rows of every arm"),
    "long rows of two bin lengths": ([_long(), _long(arm="int4", bin_s=5.0)], True, "bins of 5.0 s"),
    "drift arms of other blocks": ([{"experiment": "drift", "arm": "bf16", "block_start": 0, "psnr_truth": 20.0,
                                     "ssim_truth": 0.5},
                                    {"experiment": "drift", "arm": "int4", "block_start": 50, "psnr_truth": 20.0,
                                     "ssim_truth": 0.5}], False, "drift arm 'int4' has blocks"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_rows_file_is_one_line(tmp_path, case):
    content, long, says = BAD_FILES[case]
    path = tmp_path / "rows.jsonl"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        write(path, content)
    result = run(*(["--long"] if long else []), "--from-rows", path, "--out-dir", tmp_path / "out")
    line = one_line_error(result, says)
    assert str(path) in line or "--from-rows:" in line
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


def test_a_directory_or_a_missing_file_is_one_line(tmp_path):
    one_line_error(run("--from-rows", tmp_path, "--out-dir", tmp_path / "out"), "is a directory, not a regular file")
    one_line_error(run("--from-rows", tmp_path / "nope", "--out-dir", tmp_path / "out"), "does not exist")


def test_a_fifo_is_refused_before_it_is_opened(tmp_path):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    for long in ([], ["--long"]):   # no writer ever opens it: reading would wait forever
        done = subprocess.run([*WORLDPAGER, "bench", "quality", *long, "--from-rows", str(fifo), "--out-dir",
                               str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines() == [f"worldpager: error: --from-rows {fifo} is a named pipe (FIFO), "
                                                    f"not a regular file; name a regular file as --from-rows"]


def test_the_repositorys_rows_summarise_with_the_right_flag(tmp_path):
    result = run("--from-rows", REVISIT_ROWS, "--out-dir", tmp_path / "revisit")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["revisit"]["episodes"] == 24
    result = run("--long", "--from-rows", LONG_ROWS, "--from-rows", DOCS / "quality_long_positions_rows.jsonl",
                 "--out-dir", tmp_path / "long")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["episodes"] == 8


def _field_paths(value, path=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*path, key)
            yield from _field_paths(inner, (*path, key))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        yield from _field_paths(value[0], (*path, 0))


def _summarise(rows: list[dict], long: bool) -> None:
    """What ``summary_from_rows`` and ``_finish`` do with rows, less the figure."""
    from engine.quality.long_summary import summarise_long
    from engine.quality.pooled import summarise_revisit
    from engine.quality.run import summarise_drift, summarise_positions
    from worldpager_cli.quality_long import echo_long
    from worldpager_cli.quality_tables import echo_tables

    with redirect_stdout(io.StringIO()):
        if long:
            echo_long(summarise_long(rows))
            return
        summaries = (("revisit", summarise_revisit), ("positions", summarise_positions), ("drift", summarise_drift))
        echo_tables({name: summarise([r for r in rows if r["experiment"] == name])
                     for name, summarise in summaries if any(r["experiment"] == name for r in rows)})


def _positions_and_drift() -> list[dict]:
    scores = {"psnr_truth": 20.0, "ssim_truth": 0.5, "psnr_first": 21.0, "ssim_first": 0.6, "psnr_first_truth": 22.0}
    rows = [{"experiment": "positions", "arm": arm, "seed": seed, "gap": 50, "arena_seed": 1_510_000 + seed,
             "chunks": 120, "return_chunk": 60, **scores, "hits": 3, "misses": 1, "stale": 0, "disk_bytes_read": 9}
            for arm in ("below", "extend") for seed in (0, 1)]
    return rows + [{"experiment": "drift", "arm": arm, "block_start": start, "chunks": 49, "psnr_truth": 20.0,
                    "ssim_truth": float("nan"), "ssim_frames": 0} for arm in ("int4", "bf16") for start in (0, 50)]


@pytest.mark.parametrize("base,long", [(rows_of(REVISIT_ROWS, 22), False), (rows_of(LONG_ROWS, 6), True),
                                       (_positions_and_drift(), False), (_positions_and_drift()[::-1], False)])
def test_any_field_removed_or_of_another_kind_is_refused_or_summarised(tmp_path, base, long):
    """The schema is the consumers': whatever one field of a row becomes, the rows are refused in one
    ``JsonInputError`` or summarised — never a KeyError, TypeError or ZeroDivisionError from the summary."""
    import numpy as np

    for path in _field_paths(base[0]):
        for value in (None, "text", -1, float("nan"), [], {}, True, 0, "DELETE"):
            rows = copy.deepcopy(base)
            parent = rows[0]
            for key in path[:-1]:
                parent = parent[key]
            if value == "DELETE":
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            try:
                read, _ = read_rows([write(tmp_path / "rows.jsonl", rows)], long)
            except JsonInputError as exc:
                assert "\n" not in str(exc)
                continue
            with np.errstate(all="ignore"):
                _summarise(read, long)
