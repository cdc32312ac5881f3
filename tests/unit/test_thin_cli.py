"""The command line stays a thin shell (DESIGN §8): no file of ``worldpager_cli/`` over 300 lines, and the
readers and benchmark logic live in ``engine/`` (the rows reader of ``--from-rows`` among them)."""
from pathlib import Path

import engine.quality.rows_read as rows_read

CLI = Path(__file__).resolve().parents[2] / "worldpager_cli"
MAX_LINES = 300


def test_no_command_line_file_is_over_300_lines():
    long = {p.name: n for p in CLI.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"worldpager_cli files over {MAX_LINES} lines (move their logic into engine/): {long}"


def test_the_rows_reader_lives_in_the_engine():
    assert rows_read.__name__.startswith("engine.") and not list(CLI.glob("*rows*.py"))
