"""Turning exceptions into exit codes and one-line messages.

Exit codes: 0 done, 1 bad input (any ``WorldPagerError``), 2 internal error, 130 interrupted.
"""
from __future__ import annotations

import sys
import traceback

import click

from engine.errors import WorldPagerError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 130


class WorldPagerGroup(click.Group):
    """A click group whose commands report errors as one line with a documented exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except WorldPagerError as exc:
            click.echo(f"worldpager: error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            click.echo("worldpager: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # an internal bug: keep the traceback for the report
            traceback.print_exc(file=sys.stderr)
            click.echo(f"worldpager: internal error: {type(exc).__name__}: {exc}", err=True)
            ctx.exit(EXIT_INTERNAL)
