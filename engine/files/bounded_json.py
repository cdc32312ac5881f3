"""The one bounded reader for JSON that comes from outside (no torch).

Socket messages, rows files, manifests, logs, job lines and configs are all read through here: their size,
text encoding, nesting depth, type and fields are checked before anything uses them, and every failure is
one ``JsonInputError`` (an ``InputError``: exit 1 on the CLI, a counted drop on the play socket) whose
message names what was read and what is wrong with it — never a ``RecursionError``, ``UnicodeDecodeError``,
``KeyError`` or ``TypeError`` from deep inside.

* ``parse_json(data, what, max_bytes, max_depth)`` — one document from ``bytes`` or ``str``.
* ``read_json_file(path, name, max_bytes, max_depth)`` — one document from a file, through the input
  gate (``engine.files.input_files``: a FIFO, device or directory is refused before it is opened).
* ``iter_json_lines(path, name, max_line_bytes, max_depth, skip_blank, skip_torn_tail)`` — JSON Lines,
  ``(line number, value)`` a line; a bad line's error names its number. ``skip_torn_tail`` drops a last
  line with no newline that does not parse (a writer killed mid-line), as a log reader must.
* ``expect_object(value, what, required, optional)`` — ``value`` is an object whose fields have the
  kinds named (``NUMBER``, ``INTEGER``, ``STRING``, ``BOOL``, ``LIST``, ``OBJECT``, ``ANY``, or a tuple
  of them, e.g. ``(NUMBER, NULL)``); returns it. A bool is never a number.

The depth is measured before ``json.loads`` runs, so a document of 3,000 ``[`` is refused, not recursed into.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

from engine.errors import InputError
from engine.files.input_files import open_input, read_input_bytes, shown

DEFAULT_MAX_DEPTH = 32
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = re.compile(rb"[\[\]{}]")


class JsonInputError(InputError):
    """JSON from outside that is too large, not UTF-8, too deep, not JSON, or not of the expected shape."""


def _depth(data: bytes) -> int:
    if data.count(b"[") + data.count(b"{") <= 1:
        return data.count(b"[") + data.count(b"{")
    deepest = depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b'""', data)):
        depth += 1 if bracket in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json(data: bytes | str, what: str, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The JSON document in ``data``; a ``JsonInputError`` naming ``what`` when it is not one within the bounds."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise JsonInputError(f"{what} is {len(raw):,} bytes, more than the {max_bytes:,} allowed")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonInputError(f"{what} is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") from None
    depth = _depth(raw)
    if depth > max_depth:
        raise JsonInputError(f"{what} nests {depth} levels deep, more than the {max_depth} allowed")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonInputError(f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (RecursionError, ValueError) as exc:   # ValueError: e.g. an integer of too many digits
        raise JsonInputError(f"{what} is not JSON that can be read: {str(exc).splitlines()[0][:120]}") from None


def read_json_file(path, name: str, max_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """The JSON document in the file at ``path``, checked by the input gate and the bounds above."""
    data = read_input_bytes(path, name, max_bytes)
    return parse_json(data, f"{name} {shown(path)}", max_bytes, max_depth)


def iter_json_lines(path, name: str, max_line_bytes: int, max_depth: int = DEFAULT_MAX_DEPTH,
                    skip_blank: bool = True, skip_torn_tail: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each line of the JSON Lines file at ``path`` (1-based numbers)."""
    with open_input(Path(path), name, binary=True) as f:
        number = 0
        while True:
            line = f.readline(max_line_bytes + 2)
            if not line:
                return
            number += 1
            torn = not line.endswith(b"\n")
            if torn and len(line) > max_line_bytes:
                raise JsonInputError(f"{name} {shown(path)} line {number} is longer than {max_line_bytes:,} bytes")
            if skip_blank and not line.strip():
                continue
            try:
                yield number, parse_json(line, f"{name} {shown(path)} line {number}", max_line_bytes + 2, max_depth)
            except JsonInputError:
                if torn and skip_torn_tail and not f.read(1):
                    return
                raise


NUMBER, INTEGER, STRING, BOOL, LIST, OBJECT, NULL, ANY = (
    "a number", "an integer", "a string", "true or false", "a list", "an object", "null", "anything")


def _is(value: Any, kind: str) -> bool:
    if kind == ANY:
        return True
    if kind == NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == INTEGER:
        return isinstance(value, int) and not isinstance(value, bool)
    types = {STRING: str, BOOL: bool, LIST: list, OBJECT: dict, NULL: type(None)}
    assert kind in types, f"unknown kind {kind!r}"
    return isinstance(value, types[kind])


def kind_of(value: Any) -> str:
    """The kind of a JSON value, in the words of the messages."""
    for kind in (BOOL, INTEGER, NUMBER, STRING, LIST, OBJECT, NULL):
        if _is(value, kind):
            return kind
    return type(value).__name__


def expect_kind(value: Any, what: str, kind: str | tuple[str, ...]) -> Any:
    """``value`` when it is of ``kind`` (or one of them); else a ``JsonInputError`` naming ``what``."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not any(_is(value, k) for k in kinds):
        raise JsonInputError(f"{what} is {kind_of(value)}, expected {' or '.join(kinds)}")
    return value


def expect_finite(value: Any, what: str) -> float:
    """A number that is neither NaN nor infinite, as a float."""
    expect_kind(value, what, NUMBER)
    if not math.isfinite(value):
        raise JsonInputError(f"{what} is {value}, expected a finite number")
    return float(value)


def expect_object(value: Any, what: str, required: Mapping[str, Any] = None,
                  optional: Mapping[str, Any] = None) -> dict:
    """``value`` when it is an object holding every field of ``required`` (and any of ``optional``) with
    the kinds named; other fields are left alone. Else a ``JsonInputError`` naming ``what`` and the field."""
    expect_kind(value, what, OBJECT)
    for field, kind in (required or {}).items():
        if field not in value:
            raise JsonInputError(f"{what} has no field {field!r}")
        expect_kind(value[field], f"{what}: field {field!r}", kind)
    for field, kind in (optional or {}).items():
        if field in value:
            expect_kind(value[field], f"{what}: field {field!r}", kind)
    return value
