"""Byte sizes, one rule for every flag, preset, config file and batch job line that gives one (no torch, no click).

The rule (docs/usage.md, "Sizes"): a number, optionally with a fraction, then optionally a unit ``K``,
``M``, ``G`` or ``T``, written alone, with ``iB`` or with ``B``, in any case: ``24G``, ``24GiB``, ``24GB``,
``512M``, ``1.5T``, ``800k``. Units are binary: ``G``, ``GiB`` and ``GB`` all mean 2^30 bytes (the rule
``--spill-max`` always had; a drive's decimal gigabyte is not a unit here). A bare ``B`` is bytes. A plain
number (``24``, ``22.5``) is in the flag's own unit: GiB for ``--host-mem`` and ``--device-mem``, MiB for a
``--*-mib`` flag, bytes for ``--spill-max``.

* ``parse_size(value, what, plain)`` — bytes (a float; ``what`` names the flag or key in the message,
  ``plain`` is the unit of a plain number in bytes). A string, an int or a float; anything else, a negative,
  a non-finite number or text that is not a size is a one-line ``ConfigError`` naming ``what`` and the value.
* ``size_in(value, what, unit)`` — the same size in ``unit`` (a plain number is already in it): what a
  ``memory.host_mem_gib`` key holds.
* ``unit_name(unit)`` — ``"GiB"``, ``"MiB"``, ``"bytes"``: how messages name a plain number's unit.

Whether zero is allowed is the caller's rule (every flag today wants a positive size).
"""
from __future__ import annotations

import math
import re
from typing import Any

from engine.errors import ConfigError

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
UNITS = {"": None, "B": 1, "K": KiB, "M": MiB, "G": GiB, "T": TiB}
EXAMPLES = "24G, 24GiB, 24GB, 512M or 1.5T"
_SIZE = re.compile(r"^\s*(-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[-+]?[0-9]+)?)[ \t]*(?:([KMGT])(?:I?B)?|(B))?\s*$", re.IGNORECASE)


def unit_name(unit: int) -> str:
    """How a message names a plain number's unit."""
    return {1: "bytes", KiB: "KiB", MiB: "MiB", GiB: "GiB", TiB: "TiB"}.get(unit, f"units of {unit} bytes")


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_size(value: Any, what: str, plain: int = 1) -> float:
    """Bytes of ``value`` (see the module docstring); a plain number counts ``plain`` bytes a unit."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{what}: {_show(value)} is not a size (e.g. {EXAMPLES}; a plain number is "
                          f"{unit_name(plain)})")
    if isinstance(value, (int, float)):
        number, unit = float(value) if math.isfinite(value) else math.nan, plain
    else:
        m = _SIZE.match(value)
        if m is None:
            raise ConfigError(f"{what}: {_show(value)} is not a size (e.g. {EXAMPLES}; a plain number is "
                              f"{unit_name(plain)})")
        number = float(m.group(1))
        letter = (m.group(2) or m.group(3) or "").upper()
        unit = UNITS[letter] or plain
    if not math.isfinite(number):
        raise ConfigError(f"{what}: {_show(value)} is not a finite size")
    if number < 0:
        raise ConfigError(f"{what}: {_show(value)} is not a positive number of {unit_name(plain)}")
    if not math.isfinite(number * unit):
        raise ConfigError(f"{what}: {_show(value)} is not a finite size")
    return number * unit


def size_in(value: Any, what: str, unit: int) -> float:
    """``value`` in ``unit`` (a plain number is already in it)."""
    return parse_size(value, what, unit) / unit
