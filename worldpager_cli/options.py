"""The session's flags, built from the one table of options (``engine.settings.options``): ``generate`` and
``plan`` take all of them, ``batch`` those a batch can share between its jobs.

Contract. ``session_options`` adds every flag that sets a session's config (``--preset``, the length,
the model, its inputs and outputs, the memory flags, ``--set``) to a click command, as keyword arguments
named like the table's options; ``options_of(names, ...)`` adds some of them. ``session_overlay(opts)``
turns those arguments into the sparse config overlay ``engine.settings.overlay.resolve_session_config`` applies
over the preset: only what the user gave, so that a preset's values (``pool_slots`` among them) hold
unless a flag overrides them.
``chunks_for_length`` turns ``--chunks`` / ``--seconds`` / ``--minutes`` into chunks of a video grid.
Nothing here imports the engine's session or torch (``worldpager --help`` and ``plan`` stay fast).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import click

from engine.errors import ConfigError
from engine.settings.options import (BY_NAME, SESSION_OPTIONS, SIZE_UNITS, Option, check_input_options, overlay,  # noqa: F401 (re-exported)
                            parse_size_option)
from engine.settings.sizes import size_in

LENGTH_KEYS = ("chunks", "seconds", "minutes")


def given(**values) -> dict:
    """Only the flags the user gave (None = not given), as a config overlay."""
    return {k: v for k, v in values.items() if v is not None}


def chunks_for_length(chunks: int | None, seconds: float | None, minutes: float | None,
                      fps: int, first_chunk_frames: int, chunk_frames: int) -> int | None:
    """Chunks needed for the requested length (None when no length flag was given)."""
    given_ = [v is not None for v in (chunks, seconds, minutes)]
    if sum(given_) > 1:
        raise ConfigError("give only one of --chunks, --seconds, --minutes")
    if chunks is not None:
        if chunks < 1:
            raise ConfigError(f"--chunks must be at least 1, got {chunks}")
        return chunks
    if seconds is None and minutes is None:
        return None
    total_s = seconds if seconds is not None else minutes * 60
    if not math.isfinite(total_s) or total_s <= 0:
        flag, value, unit = ("--seconds", seconds, "seconds") if seconds is not None else ("--minutes", minutes, "minutes")
        raise ConfigError(f"{flag} must be a positive number of {unit}, got {value:g}")
    frames = math.ceil(total_s * fps)
    return 1 + max(0, math.ceil((frames - first_chunk_frames) / chunk_frames))


class CheckedNumber(click.ParamType):
    """An int or a finite float, at least ``low`` (above it when ``low_open``): anything else is click's
    usage error (exit 2) in the flag's own unit — ``--minutes -3`` is "-3 is not a positive number of
    minutes", not a number of seconds."""

    def __init__(self, integer: bool, low: float | None = None, low_open: bool = False, unit: str = ""):
        self.integer, self.low, self.low_open, self.unit = integer, low, low_open, unit
        self.name = "integer" if integer else "float"

    def convert(self, value, param, ctx):
        number = (click.INT if self.integer else click.FLOAT).convert(value, param, ctx)
        unit = f" of {self.unit}" if self.unit else ""
        if not self.integer and not math.isfinite(number):
            self.fail(f"{value} is not a finite number{unit}", param, ctx)
        if self.low is not None and (number < self.low or (self.low_open and number == self.low)):
            if self.low_open and self.low == 0:
                wanted = f"a positive number{unit}"
            else:
                wanted = f"at least {self.low:g}" + (f" ({self.unit})" if self.unit else "")
            self.fail(f"{value} is not {wanted}", param, ctx)
        return number


class Size(click.ParamType):
    """A byte size by the one rule of ``engine.settings.sizes`` (``24G``, ``22.5GiB``, ``512M``; a plain number in
    ``unit``), given as a number of ``unit`` (an int when ``integer``): anything else, zero and negatives
    included (or below ``low``), is click's usage error (exit 2), one line naming the flag and the value."""

    name = "size"

    def __init__(self, unit: str, integer: bool = False, low: float = 0.0, low_open: bool = True):
        self.unit, self.integer, self.low, self.low_open = unit, integer, low, low_open

    def convert(self, value, param, ctx):
        try:
            number = size_in(value, self.unit, SIZE_UNITS[self.unit])
        except ConfigError as exc:
            self.fail(str(exc).partition(": ")[2], param, ctx)
        shown = repr(value) if isinstance(value, str) else value
        if number < self.low or (self.low_open and number == self.low):
            wanted = f"a positive number of {self.unit}" if self.low == 0 and self.low_open else f"at least {self.low:g} {self.unit}"
            self.fail(f"{shown} is not {wanted}", param, ctx)
        if self.integer:
            if not float(number).is_integer():
                self.fail(f"{shown} is not a whole number of {self.unit}", param, ctx)
            return int(number)
        return number


class SessionSize(click.ParamType):
    """A size option of the session table (``engine.settings.options.parse_size_option``): ``--host-mem 24G`` is
    24.0 (GiB), ``--spill-max 10%`` stays text; a bad one is a usage error (exit 2)."""

    name = "size"

    def __init__(self, option: Option):
        self.option = option

    def convert(self, value, param, ctx):
        try:
            return parse_size_option(self.option, value)
        except ConfigError as exc:
            text = str(exc)
            self.fail(text.split(": ", 1)[1] if text.startswith(self.option.flag + ": ") else text, param, ctx)


def click_option(option: Option, help: str | None = None):
    """The click flag of one of the table's options (``help`` replaces the table's text)."""
    text = help or option.help
    env = {"envvar": option.envvar, "show_envvar": True}
    if option.kind == "switch":
        return click.option(f"{option.flag}/--no-{option.flag[2:]}", option.name, default=None, help=text, **env)
    if option.kind == "settings":
        return click.option(option.flag, option.name, multiple=True, metavar="KEY=VALUE", help=text, **env)
    kind = {"path": click.Path(path_type=Path), "int": int, "float": float, "text": str}.get(option.kind)
    if option.kind in ("int", "float"):
        kind = CheckedNumber(option.kind == "int", option.low, option.low_open, option.unit)
    if option.kind == "choice":
        kind = click.Choice(option.choices)
    if option.kind == "size":
        kind = SessionSize(option)
    return click.option(option.flag, option.name, type=kind, help=text, **env)


def options_of(names, func, helps: Mapping[str, str] | None = None):
    """``func`` with the flags of the table's options ``names``, in the table's order."""
    helps = helps or {}
    for option in reversed([o for o in SESSION_OPTIONS if o.name in names]):
        func = click_option(option, helps.get(option.name))(func)
    return func


def session_options(func):
    """Every flag of a session's config (the whole table, ``engine.settings.options``)."""
    return options_of(BY_NAME, func)


def session_overlay(opts: Mapping) -> dict:
    """The config overlay of the session flags given (``opts``: ``session_options``'s arguments;
    ``--preset`` and the length are not part of it). Input paths are checked for their kind first."""
    check_input_options(opts)
    return overlay(opts)
