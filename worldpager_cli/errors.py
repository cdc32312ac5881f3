"""Turning exceptions into exit codes and one-line messages.

Exit codes (the table is also in docs/conventions.md):

====  ==========================================================================================
0     done
1     bad input: any ``WorldPagerError`` (a file that is missing or not ours, a value a command
      refuses, an output that cannot be written, a batch job line that is wrong); also a resource
      limit of the user's environment: out of memory, threads or file descriptors, wherever it
      surfaced (``engine.files.limits``: one line naming the limit, ``ulimit -v`` / ``ulimit -n``, and the fix)
2     usage error, as click and argparse use it: an unknown option or command, an option value of
      the wrong type or not among its choices, a missing argument
3     ``tail``: the session ended without its summary line
70    internal error (``EX_SOFTWARE`` of sysexits.h): a bug, reported with its traceback
130   interrupted (Ctrl-C, SIGTERM, SIGHUP)
141   the reader of stdout went away (a closed pipe: ``worldpager plan | head``)
====  ==========================================================================================
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

import click

from engine.errors import WorldPagerError
from engine.files.limits import limit_error
from worldpager_cli.help import ExamplesGroup
from worldpager_cli.streams import guard_streams

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE, EXIT_UNFINISHED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_INTERNAL = 70       # EX_SOFTWARE (sysexits.h): an internal error
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE, what a shell reports for a writer whose reader has gone


def silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush of a closed pipe is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def printable(message) -> str:
    """``message`` on one line: each control character (a newline in a file name) written as its escape."""
    text = str(message)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def say_error(message) -> None:
    """Print ``worldpager: error: <message>`` on stderr, always one line (the one place error lines print)."""
    click.echo(f"worldpager: error: {printable(message)}", err=True)


def ignore_file_size_signal() -> None:
    """A write past ``ulimit -f`` fails with EFBIG, told as the limit (``engine.files.limits``), instead of
    SIGXFSZ killing the process (its default action, a core dump) with the outputs half written.
    CPython ignores it at start-up too; said here so that it holds however the interpreter was started."""
    if hasattr(signal, "SIGXFSZ"):
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        except ValueError:   # not the main thread (an embedding caller): its own handlers stand
            pass


class OneLineUsageError(click.ClickException):
    """A click usage error shown as ``worldpager: error: ...`` on one line, exit 2 (as click and argparse)."""

    exit_code = EXIT_USAGE

    def show(self, file=None) -> None:
        say_error(self.format_message())


def one_line(exc: click.UsageError) -> click.ClickException:
    """The one-line form of ``exc``; the bare-command help (``NoArgsIsHelpError``) keeps its text."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        exc.exit_code = EXIT_USAGE
        return exc
    where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    return OneLineUsageError(" ".join(exc.format_message().split()) + where)


class WorldPagerGroup(ExamplesGroup):
    """A click group whose commands report errors as one line with a documented exit code."""

    def main(self, *args, **kwargs):
        guard_streams()   # a closed or full stdout/stderr is never a traceback
        ignore_file_size_signal()
        return super().main(*args, **kwargs)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:   # the group's own options
            raise one_line(exc) from None

    def invoke(self, ctx: click.Context):
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()   # a full stdout fails here, not in the interpreter's last flush
            return result
        except click.UsageError as exc:   # an unknown command, or a command's options and arguments
            raise one_line(exc) from None
        except WorldPagerError as exc:
            say_error(_resource_limit(exc) or exc)
            ctx.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            click.echo("worldpager: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:   # the reader went away (``worldpager plan | head``): stop quietly
            silence_stdout()
            ctx.exit(EXIT_BROKEN_PIPE)
        except Exception as exc:  # an internal bug: keep the traceback for the report
            limit = _resource_limit(exc)
            if limit is not None:   # the user's environment, not a bug: one line, as bad input
                say_error(limit)
                ctx.exit(EXIT_BAD_INPUT)
            traceback.print_exc(file=sys.stderr)
            click.echo(f"worldpager: internal error: {type(exc).__name__}: {printable(exc)}", err=True)
            ctx.exit(EXIT_INTERNAL)


def _resource_limit(exc: BaseException) -> str | None:
    """The one line for memory, threads or file descriptors that ran out (``engine.files.limits``), or None."""
    try:
        error = limit_error(exc)
    except MemoryError:   # too little memory even to word it
        return "out of memory (see ulimit -v and the memory available); raise the limit or free memory"
    return None if error is None else str(error)
