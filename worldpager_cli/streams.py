"""The process's standard streams when they are closed or cannot be written.

Owns what happens when stdout or stderr is closed (``2>&-``), full (``> /dev/full``) or failing:
``guard_streams()`` (called before any command runs) points a closed descriptor at /dev/null and puts a
guard on stdout. A write to a stdout that fails raises ``StdoutError`` (one line, exit 1) for a command
whose output is what it prints (``plan``, ``bench``, ``inspect``), or — for commands whose product is a
file (``generate``, ``resume``, ``fork``, ``batch``: ``keep_going_without_stdout()``) — stops printing and
lets the work go on; ``stdout_failure()`` says what went wrong, for a warning at the end. A reader that
went away (a broken pipe) stays the ``BrokenPipeError`` the CLI turns into a quiet 141.
"""
from __future__ import annotations

import fcntl
import os
import sys

from engine.errors import OutputError


class StdoutError(OutputError):
    """Standard output cannot be written (full, failing): one line, exit 1."""


def _reopen_null(fd: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _fd_usable(fd: int) -> bool:
    """``fd`` is open for what it is for (0 reading, 1 and 2 writing). A descriptor closed when the
    process started may since have been taken by a file opened read-only (a launcher's script)."""
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return False
    return mode != (os.O_WRONLY if fd == 0 else os.O_RDONLY)


class _GuardedStdout:
    """sys.stdout with failing writes turned into ``StdoutError`` or, once told, into silence."""

    def __init__(self, stream):
        self._stream = stream
        self.keep_going = False
        self.failure: OSError | None = None

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _failed(self, exc: OSError):
        self.failure = self.failure or exc
        _reopen_null(1)   # the interpreter's last flush then goes nowhere, quietly
        try:
            self._stream.flush()
        except OSError:
            pass
        if isinstance(exc, BrokenPipeError) and not self.keep_going:
            raise exc
        if not self.keep_going:
            raise StdoutError(f"cannot write to standard output: {exc.strerror or exc}") from None

    def write(self, text):
        if (self.failure is not None and self.keep_going) or (isinstance(text, str) and not text):
            return len(text)   # click probes a stream with an empty write and swallows what it raises
        try:
            return self._stream.write(text)
        except OSError as exc:
            self._failed(exc)
            return len(text)

    def flush(self) -> None:
        if self.failure is not None and self.keep_going:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            self._failed(exc)


def guard_streams() -> None:
    """Closed stdin/stdout/stderr descriptors become /dev/null; stdout gets the guard (idempotent)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if not _fd_usable(fd):
            _reopen_null(fd)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False, buffering=1 if fd else -1))
    if sys.stdout is not None and not isinstance(sys.stdout, _GuardedStdout):
        sys.stdout = _GuardedStdout(sys.stdout)


def keep_going_without_stdout() -> None:
    """From now on a stdout that fails is dropped, not an error (the command's product is a file)."""
    if isinstance(sys.stdout, _GuardedStdout):
        sys.stdout.keep_going = True


def stdout_failure() -> OSError | None:
    """Why stdout stopped taking output, or None."""
    return sys.stdout.failure if isinstance(sys.stdout, _GuardedStdout) else None
