"""``worldpager report LOG [LOG ...] --out DIR``: a session's story as figures and one HTML page.

Several logs are overlaid on the same axes, each labelled by what its config changes. ``--follow``
(one log) redraws every few chunks while the session runs and once more at its summary. Prints the
files written, then one JSON line (stdout); a cut log's note is one warning line on stderr. Exit codes:
0 written (a log cut mid-line too: plotted up to its last whole record), 1 a log that is not ours, a
log with a damaged line before its end, or an output that cannot be written.
"""
from __future__ import annotations

from pathlib import Path

import click

from worldpager_cli.json_output import emit_json, json_line, json_result

from engine.errors import ConfigError
from engine.report.live import LiveReport
from engine.report.views import VIEWS
from engine.report.write import Report, write_report
from engine.runtime.telemetry import LogFollower


def echo_report(report: Report) -> None:
    for label, chunks in zip(report.labels, report.chunks):
        click.echo(f"{label}: {chunks} chunks plotted")
    for name, path in report.figures.items():
        click.echo(f"  {name:<11} {path}")
    click.echo(f"page: {report.page}")
    for note in report.notes:
        click.echo(f"worldpager: warning: {note}", err=True)   # a cut log: plotted up to the cut
    emit_json(json_line({"report": str(report.page), "figures": {k: str(v) for k, v in report.figures.items()},
                           "labels": report.labels, "chunks": report.chunks, "notes": report.notes}))


def follow_report(log: Path, out: Path, every: int, idle_timeout: float | None) -> Report:
    """Redraw ``out`` from ``log`` as its chunks arrive, until its summary (or it stops growing)."""
    live = LiveReport(log, out, every)
    for record in LogFollower(log).records(follow=True, idle_timeout_s=idle_timeout):
        if record.get("type") == "chunk" and live.chunk_seen() is not None:
            click.echo(f"redrawn at chunk {record.get('chunk')}: {live.last.page}", err=True)
    return live.finish()


@click.command()
@click.argument("logs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Directory for the figures (one PNG per view) and report.html (created if missing).")
@click.option("--follow", is_flag=True, help="One running session: redraw every --every chunks until it ends.")
@click.option("--every", type=int, default=10, show_default=True, help="With --follow: chunks between redraws.")
@click.option("--idle-timeout", type=float, default=None,
              help="With --follow: stop after this many seconds without a new line.")
@click.option("--title", default=None, help="The page's title. Default: names the sessions.")
@click.option("--view", "views", multiple=True, type=click.Choice(list(VIEWS)),
              help="Draw only this view (repeatable). Default: all.")
@json_result
def report(logs: tuple[Path, ...], out: Path, follow: bool, every: int, idle_timeout: float | None,
           title: str | None, views: tuple[str, ...]) -> None:
    """Plot session logs (overlaid): stalls, chunk time, RSS, pool, drive, retrieval, and a summary page."""
    if follow:
        if len(logs) != 1:
            raise ConfigError(f"--follow takes one log, got {len(logs)}")
        if idle_timeout is not None and not idle_timeout > 0:
            raise ConfigError(f"--idle-timeout must be a positive number of seconds, got {idle_timeout}")
        echo_report(follow_report(logs[0], out, every, idle_timeout))
    else:
        echo_report(write_report(list(logs), out, title, list(views) or None))
