"""``worldpager doctor``: what this machine offers WorldPager — the torch build and its devices, Triton,
PyAV with H.264, memory and cores, a drive for ``--spill`` (a real O_DIRECT probe) and the third-party
modules each command imports (with the pip line of any that is missing) — as a table and one JSON line
last. Exit 0 when the core install's commands can run here, 1 when something they need is missing.
"""
from __future__ import annotations

from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from worldpager_cli.errors import EXIT_BAD_INPUT


@click.command()
@click.option("--spill", type=click.Path(path_type=Path), help="The directory to probe for the disk tier "
              "(a 16 MiB O_DIRECT write and read, removed after; one not there yet is probed where generate "
              "would create it). Default: the current directory.")
@json_result
def doctor(spill) -> None:
    """Check this machine: torch build, CUDA devices, Triton, PyAV/x264, memory, a spill drive, and the
    modules commands import (aiohttp for play, Ray for batch --ray, transformers for LingBot)."""
    from engine.bench.doctor import run_checks

    rows = run_checks(spill)
    width = max(len(r.name) for r in rows)
    for r in rows:
        click.echo(f"{r.name:<{width}}  {r.status:<7}  {r.found}" + (f"\n{'':<{width}}           -> {r.advice}"
                                                                       if r.advice and r.status != "ok" else ""),
                   err=True)
    ready = all(r.status != "missing" for r in rows)
    click.echo(f"worldpager: {'ready' if ready else 'not ready'}: "
               f"{sum(r.status == 'ok' for r in rows)} ok, {sum(r.status == 'warn' for r in rows)} warnings, "
               f"{sum(r.status == 'missing' for r in rows)} missing", err=True)
    emit_json(json_line({"ready": ready, "checks": [r.as_json() for r in rows]}))
    if not ready:
        raise SystemExit(EXIT_BAD_INPUT)
