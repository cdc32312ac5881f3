"""The bounded JSON reader and the input gate: every failure is one InputError naming the input."""
from __future__ import annotations

import os

import pytest

from engine.files.bounded_json import (INTEGER, NULL, NUMBER, STRING, JsonInputError, expect_finite, expect_object,
                                 iter_json_lines, parse_json, read_json_file)
from engine.errors import InputError
from engine.files.input_files import check_input_dir, check_input_file, open_input, read_input_bytes, shown


@pytest.mark.parametrize("data, words", [
    (b"[" * 3000, "nests 3000 levels"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[1, 2", "not JSON"),
    (b"x" * 20_000, "more than the 10,000"),
    (b"1" * 5000, "not JSON that can be read"),   # past Python's int digit limit
], ids=["deep", "binary", "torn", "large", "digits"])
def test_bad_documents_are_one_line_errors_naming_the_input(data, words):
    with pytest.raises(JsonInputError) as info:
        parse_json(data, "the message", 10_000, max_depth=16)
    assert words in str(info.value) and "the message" in str(info.value)
    assert "\n" not in str(info.value)


def test_brackets_inside_strings_do_not_count_as_depth():
    assert parse_json(b'{"a": "[[[[[[\\"[[[["}', "m", 100, max_depth=1) == {"a": '[[[[[["[[[['}


def test_fields_and_kinds():
    row = {"a": 1, "b": True, "c": "x", "d": None}
    assert expect_object(row, "row", {"a": INTEGER, "c": STRING}, {"d": (NUMBER, NULL)}) is row
    for required, words in [({"z": NUMBER}, "no field 'z'"), ({"b": NUMBER}, "'b' is true or false, expected a number"),
                            ({"c": NUMBER}, "'c' is a string")]:
        with pytest.raises(JsonInputError, match=words):
            expect_object(row, "row", required)
    with pytest.raises(JsonInputError, match="is a list, expected an object"):
        expect_object([row], "row")
    with pytest.raises(JsonInputError, match="finite"):
        expect_finite(float("inf"), "x")


def test_json_lines_name_the_bad_line_and_may_skip_a_torn_tail(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n{"a": ')
    with pytest.raises(JsonInputError, match="line 4"):
        list(iter_json_lines(path, "--rows", 1000))
    assert [n for n, _ in iter_json_lines(path, "--rows", 1000, skip_torn_tail=True)] == [1, 3]
    path.write_bytes(b'{"a": 1}\n' + b" " * 2000 + b"\n")
    with pytest.raises(JsonInputError, match="line 2 is longer than 1,000"):
        list(iter_json_lines(path, "--rows", 1000))


def test_the_gate_refuses_what_is_not_a_regular_file_before_opening_it(tmp_path):
    fifo = tmp_path / "a\nfifo"
    os.mkfifo(fifo)
    cases = [(fifo, "named pipe"), (tmp_path, "a directory"), ("/dev/null", "character device"),
             ("/proc/self/status", "under /proc"), (tmp_path / "nope", "does not exist")]
    for path, words in cases:
        for call in (lambda p: check_input_file(p, "--log"), lambda p: open_input(p, "--log"),
                     lambda p: read_json_file(p, "--log", 100)):
            with pytest.raises(InputError, match=words) as info:
                call(path)
            assert "\n" not in str(info.value)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(InputError, match="symlink to .* named pipe"):
        check_input_file(link, "--log")
    with pytest.raises(InputError, match="not a directory"):
        check_input_dir(link, "--checkpoint")


def test_reads_within_bounds_and_refuses_past_them(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"k": [1, 2]}')
    assert read_json_file(path, "--config", 100) == {"k": [1, 2]}
    assert read_input_bytes(path, "--config", 100) == b'{"k": [1, 2]}'
    with pytest.raises(InputError, match="larger than 5 bytes"):
        read_input_bytes(path, "--config", 5)
    assert shown(tmp_path / "x") == str(tmp_path / "x") and shown("a\nb") == "'a\\nb'"
