"""Shared parsing helpers of every trajectory format: the one-line error messages and the checked readers
of numbers, whole numbers, pitch and mouse values, strictly increasing times and content lines.

Owns the message shape ``FILE[ line N]: [FIELD: ]message`` (``_Context``) that every format raises, and
the rule that a value from YAML/JSON must already be a number while CSV text is parsed (``text=True``).
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

from engine.errors import InputError

_MOUSE_LIMIT = 1.0          # larger mouse values are unit mistakes (degrees?), not MG2 inputs


class _Context:
    """Builds the one-line error messages: ``FILE[ line N]: [FIELD: ]message``."""

    def __init__(self, path: str):
        self.path = path

    def error(self, message: str, line: int | None = None, field: str | None = None) -> InputError:
        where = self.path + (f" line {line}" if line else "")
        text = f"{where}: {field + ': ' if field else ''}{message}"
        return InputError(re.sub(r"\s*[\r\n]+\s*", " ", text))   # one line, whatever the input held


def _show(value: Any) -> str:
    """A user's value for a message: repr, shortened."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _content_lines(text: str):
    """(line number, stripped text) of lines that are neither blank nor ``#`` comments."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped


def _number(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    """A finite float from a YAML/JSON number, or from CSV text when ``text`` (YAML/JSON strings are
    wrong types, not numbers)."""
    if text and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ctx.error(f"{_show(value)} is not a number", line, field) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ctx.error(f"expected a number, got {_show(value)}", line, field)
    try:
        number = float(value)
    except OverflowError:   # an integer beyond the float range
        raise ctx.error(f"{_show(value)} is too large", line, field) from None
    if not math.isfinite(number):
        raise ctx.error(f"{value} is not a finite number", line, field)
    return number


MAX_COORDINATE = 1e9   # world units; far beyond any scene, and its squares stay finite in the geometry


def _coordinate(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    """A position coordinate: finite and within +-MAX_COORDINATE world units."""
    number = _number(ctx, value, line, field, text)
    if abs(number) > MAX_COORDINATE:
        raise ctx.error(f"{number:g} is outside +-{MAX_COORDINATE:g} world units", line, field)
    return number


def _integer(ctx: _Context, value: Any, line: int | None, field: str, minimum: int, text: bool = False) -> int:
    number = _number(ctx, value, line, field, text)
    if number != int(number) or number < minimum:
        raise ctx.error(f"expected a whole number >= {minimum}, got {_show(value)}", line, field)
    return int(number)


def _pitch(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    pitch = _number(ctx, value, line, field, text)
    if abs(pitch) > 90:
        raise ctx.error(f"pitch {pitch:g} is outside [-90, 90] degrees", line, field)
    return pitch


def _mouse_value(ctx: _Context, value: Any, line: int | None, field: str, text: bool = False) -> float:
    number = _number(ctx, value, line, field, text)
    if abs(number) > _MOUSE_LIMIT:
        raise ctx.error(f"mouse value {number:g} is outside [-1, 1] (MG2's camera press is 0.1)", line, field)
    return number


def _check_times(ctx: _Context, times: list[float], shown: list[str], lines: list[int | None],
                 field: Callable[[int], str]) -> None:
    """Times must strictly increase; ``shown`` is each time as the user wrote it (seconds or frame)."""
    for i in range(1, len(times)):
        if times[i] == times[i - 1]:
            raise ctx.error(f"duplicate time ({shown[i]})", lines[i], field(i))
        if times[i] < times[i - 1]:
            raise ctx.error(f"time goes backwards ({shown[i]} after {shown[i - 1]})", lines[i], field(i))
