"""``bench quality``'s flags (``worldpager_cli.quality_flags``) and ``--out-dir``: refused before anything runs.

A number out of its range (``--minutes 1e308`` was an OverflowError), a name that is none of its flag's
choices, a flag of the other benchmark (``--minutes`` without ``--long`` was silently ignored) is click's
usage error: one ``worldpager: error:`` line naming the flag, exit 2. An ``--out-dir`` that is a file, or
under ``/proc``, is one line, exit 1 (was a FileExistsError traceback). Nothing here runs a session.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests_support import one_line_error
from worldpager_cli.main import cli

DOCS = Path(__file__).resolve().parents[2] / "docs"


def run(*args):
    return CliRunner().invoke(cli, ["bench", "quality", *map(str, args)])


USAGE = [   # (arguments, what the line names)
    (["--long", "--minutes", "1e308"], "1e308 is more than 1440 minutes"),
    (["--long", "--minutes", "inf"], "inf is not a finite number of minutes"),
    (["--long", "--minutes", "nan"], "nan is not a finite number of minutes"),
    (["--long", "--minutes", "0"], "0 is not a positive number of minutes"),
    (["--long", "--minutes", "five"], "--minutes"),
    (["--seeds", "0"], "'--seeds': 0 is not at least 1"),
    (["--seeds", "10000000"], "'--seeds': 10000000 is more than 1000 seeds"),
    (["--seed-start", "99999999999999999999"], "--seed-start"),
    (["--threads", "100000"], "'--threads': 100000 is more than 1024"),
    (["--drift-chunks", "1e9"], "--drift-chunks"),
    (["--chunks", "8"], "'--chunks': 8: an episode needs more than 10 chunks"),
    (["--chunks", "10000000"], "'--chunks': 10000000 is more than"),
    (["--observed", "40"], "'--observed': 40: give 1 to 39 observed chunks"),
    (["--observed", "0"], "'--observed': 0 is not at least 1"),
    (["--only", "bogus"], "'--only': 'bogus' is not one of revisit, positions, drift"),
    (["--only", "revisit,speed"], "'speed' is not one of revisit, positions, drift"),
    (["--only", ","], "'--only'"),
    (["--kinds", "spin,spiral"], "'--kinds': 'spiral' is not one of glance, spin, walk"),
    (["--arms", "int3"], "'--arms': 'int3' is not one of window, bf16"),
    (["--arms", "extend"], "'--arms': 'extend' is not one of"),          # a --long arm
    (["--long", "--arms", "int8"], "'--arms': 'int8' is not one of window, int4, extend"),   # a revisit arm
    (["--minutes", "3"], "--minutes only applies to the long benchmark: add --long"),
    (["--minutes", "5"], "--minutes only applies to the long benchmark"),      # its default, given
    (["--no-baselines"], "--no-baselines only applies to the long benchmark: add --long"),
    (["--long", "--no-baselines"], "--no-baselines runs only the arms named: name them with --arms"),
    (["--long", "--only", "revisit"], "--only is a flag of the revisit benchmark; --long does not take it"),
    (["--long", "--kinds", "spin"], "--kinds is a flag of the revisit benchmark"),
    (["--long", "--chunks", "40"], "--chunks is a flag of the revisit benchmark"),
    (["--long", "--drift-chunks", "0"], "--drift-chunks is a flag of the revisit benchmark"),
    (["--long", "--workdir", "/tmp"], "--workdir is a flag of the revisit benchmark"),
    (["--from-rows", DOCS / "quality_revisit_rows.jsonl", "--minutes", "3"], "--minutes only applies"),
]


@pytest.mark.parametrize("args,says", USAGE, ids=[" ".join(map(str, a)) for a, _ in USAGE])
def test_a_bad_flag_is_a_one_line_usage_error(tmp_path, args, says):
    result = run(*args, "--out-dir", tmp_path / "out")
    one_line_error(result, says, code=2)
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [[], ["--long"], ["--from-rows", DOCS / "quality_revisit_rows.jsonl"],
                                  ["--long", "--from-rows", DOCS / "quality_long_rows.jsonl"]],
                         ids=["revisit", "long", "from-rows", "long from-rows"])
def test_an_out_dir_that_cannot_be_a_directory_is_one_line(tmp_path, args):
    file = tmp_path / "a-file"
    file.write_text("mine\n")
    # --quick: should the check ever be lost, a smoke run, not the benchmark
    one_line_error(run(*args, "--quick", "--out-dir", file), f"--out-dir {file} is a regular file, not a directory")
    assert file.read_text() == "mine\n"
    one_line_error(run(*args, "--quick", "--out-dir", file / "sub"),
                   f"cannot make --out-dir {file / 'sub'}: Not a directory")
    one_line_error(run(*args, "--quick", "--out-dir", "/proc/self/quality"),
                   "--out-dir /proc/self/quality is under /proc")
