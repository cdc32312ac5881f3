"""What the run commands (``generate``, ``resume``, ``fork``) share: their output flags, the human text on
stderr, and the end of a run — the closing line, the ``--json`` summary, the exit of an interrupted run.
"""
from __future__ import annotations

import click

from worldpager_cli.errors import EXIT_INTERRUPTED
from worldpager_cli.json_output import json_line
from worldpager_cli.run_signals import stop_on_signals
from worldpager_cli.run_summary import run_summary, summary_text
from worldpager_cli.streams import stdout_failure

from engine.config import WEIGHT_FORMATS
from engine.errors import OutputError

OVERWRITE = click.option("--overwrite", is_flag=True,
                         help="Replace the outputs of an earlier run at --out (default: refuse).")
WEIGHTS = click.option("--weights", type=click.Choice(WEIGHT_FORMATS),
                       help="The weight format the run was made with (its save point's; another is refused: the "
                            "frames would differ). Default: the save point's.")
QUIET = click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors and warnings (stderr).")
JSON = click.option("--json", "as_json", is_flag=True,
                    help="At the end, print the run's summary as one JSON object on stdout (keys: "
                         "docs/conventions.md). Human text stays on stderr.")
RUN_FLAGS = {"overwrite": "Output", "quiet": "Output", "as_json": "Output"}


def say_to(quiet: bool):
    """Human text: stderr, or nothing with --quiet."""
    return (lambda text: None) if quiet else (lambda text: click.echo(text, err=True))


def warn(lines: list[str]) -> None:
    """Warnings go to stderr, also with --quiet (they are not progress)."""
    for line in lines:
        click.echo(f"worldpager: warning: {line}", err=True)


def run_and_report(session, progress, grid, say, as_json: bool, cfg, frames_before: int) -> None:
    """Run, then the closing line (stderr) and, with --json, the summary object (stdout)."""
    with progress, stop_on_signals(session):
        result = session.run()
    if as_json:   # also for an interrupted run (exit 130): a script learns how far it got
        click.echo(json_line(run_summary(result, cfg, grid.fps, frames_before)))
    # Seconds per chunk over the chunks this run made: a resumed or forked run inherits the others.
    summary = summary_text(result, grid.fps)
    if result.status == "interrupted":
        click.echo(f"worldpager: interrupted after {result.chunks} chunks: wrote {summary}", err=True)
        warn_stdout_failure()
        raise SystemExit(EXIT_INTERRUPTED)
    say(f"wrote {summary}")
    warn_stdout_failure()
    if result.savepoint_errors:   # the video is whole, but a crash would have lost more than promised
        raise OutputError(f"{len(result.savepoint_errors)} save point(s) could not be written "
                          f"(last: {result.savepoint_errors[-1]}); the video is complete")


def warn_stdout_failure() -> None:
    if stdout_failure() is not None:
        warn([f"standard output failed ({stdout_failure().strerror}): the --json summary was not printed; "
               "the video is whole"])
