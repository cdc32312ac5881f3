"""How every ``worldpager bench`` subcommand prints: a human table, the machine line, then one JSON line.

Cells arrive as numbers and leave formatted (``num``, ``ratio``, ``size``); ``echo_json`` ends every
subcommand with the machine that made the figures (``engine.bench.machine``) and one compact JSON line
holding the whole result plus ``bench``, ``machine`` and ``params``.
"""
from __future__ import annotations

import click

from worldpager_cli.json_output import emit_json, json_line

from engine.bench.machine import machine_line

MiB, GiB = 1 << 20, 1 << 30


def echo_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Left-aligned first column, right-aligned others (cells arrive formatted)."""
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        first = r[0].ljust(widths[0])
        click.echo("  ".join([first] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip())


def num(value: float | None) -> str:
    """Three significant digits, no exponent for the sizes benchmarks produce."""
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def size(nbytes: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def echo_json(kind: str, result: dict, machine_info: dict, params: dict) -> None:
    """The last line: everything, compact, floats cut to six significant digits."""
    doc = {"bench": kind, **result, "machine": machine_info, "params": params}
    click.echo(machine_line(machine_info))
    emit_json(json_line(round_figures(doc)))


def round_figures(value):
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: round_figures(v) for k, v in value.items()}
    if isinstance(value, list):
        return [round_figures(v) for v in value]
    return value
