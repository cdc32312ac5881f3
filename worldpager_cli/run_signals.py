"""Signals during a run command: what Ctrl-C, SIGTERM and SIGHUP do before and while a session runs.

Owns the two regimes of ``generate``, ``resume`` and ``fork``: before the first chunk (``abort_on_signals``:
SIGTERM and SIGHUP interrupt like Ctrl-C, nothing is made yet) and while chunks are made
(``stop_on_signals``: the first signal finishes the chunk in hand and stops cleanly, a second aborts).
"""
from __future__ import annotations

import os
import signal
import sys

import click

from worldpager_cli.errors import EXIT_INTERRUPTED

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class abort_on_signals:
    """SIGTERM and SIGHUP interrupt like Ctrl-C (a KeyboardInterrupt: exit 130)."""

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in STOP_SIGNALS[1:]}
        return self

    def __exit__(self, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


class stop_on_signals:
    """First Ctrl-C, SIGTERM or SIGHUP: finish the chunk in hand, then stop cleanly (exit 130).
    A second one of any of them: interrupt at once — the session closes the MP4 and the log without
    waiting on the drive, and the process exits without waiting for threads still on it."""

    def __init__(self, session):
        self.session = session
        self.previous: dict[int, object] = {}
        self.aborted = False

    def _handler(self, signum, frame) -> None:
        if self.session._stop.is_set():
            self.aborted = True
            raise KeyboardInterrupt
        self.session.request_stop()
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        try:
            click.echo(f"\nworldpager: {name}: stopping after the current chunk ({name} again to abort)", err=True)
        except OSError:   # SIGHUP: the terminal may be gone; the stop is what matters
            pass

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._handler) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, exc_type, *exc):
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)
        if self.aborted and exc_type is KeyboardInterrupt:
            # The MP4 and the log are closed; what is left are transfer threads that may be blocked on
            # the drive, and the interpreter's teardown would wait for them (or for seconds of freeing).
            click.echo("worldpager: interrupted", err=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
