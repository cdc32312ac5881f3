"""``worldpager bench ...``: measurements, one subcommand each, each a human table then one JSON line.

Every subcommand calls one engine function that returns a flat dict of numbers, prints a table of the
figures that matter, and ends with one compact JSON line holding the whole dict plus ``bench`` (the
subcommand), ``machine`` (CPU count and name, the device) and ``params`` (what was asked for), so
scripts read the last line and people read the rest. Nothing here asserts a speed.

To add an experiment, write one ``@click.command`` that does the same in a ``bench_*.py`` module and add it
to the group below; the printing helpers are ``worldpager_cli.bench_output``.
"""
from __future__ import annotations

import click

from worldpager_cli.bench_kernels import disk, quant
from worldpager_cli.bench_runs import device, predict, quota
from worldpager_cli.bench_speed import speed
from worldpager_cli.bench_store import memory, store
from worldpager_cli.errors import WorldPagerGroup


@click.group(cls=WorldPagerGroup)
def bench() -> None:
    """Measure the pieces that decide whether a session stalls (each prints a table, then JSON)."""


for command in (quant, disk, store, memory, predict, device, quota, speed):
    bench.add_command(command)
