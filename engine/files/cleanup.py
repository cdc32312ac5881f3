"""Clean-up on the way out: every step runs, the first error wins, a later one is at most a warning.

Owns ``Cleanup``, used wherever a run closes what it opened (the MP4, the memory, the log, save points
in flight, files it made, locks): ``Cleanup(failing)`` runs each step with ``run(step, ...)`` whatever
the steps before it did, then ``finish()``:

* ``failing`` is the error the run is already on its way out with (None on a run that went well). It
  wins: a step's error (``OSError`` or a ``WorldPagerError``: a drive that failed, a full drive) is then
  no error of its own; the first one is said in one warning line (with how many more there were; one
  that says what ``failing`` says is not said again), so that a dying output drive gives the run's
  one-line error and not a traceback from closing its files.
* With nothing failing, the first step's error is raised by ``finish()`` (it is the run's error); later
  ones are the warning.
* An interrupt (a second Ctrl-C) or an internal error met in a step does not stop the steps after it;
  ``finish()`` raises it (an interrupt always; an internal error unless ``failing`` is already on its
  way, when it is one more warning).
"""
from __future__ import annotations

import logging
from typing import Callable

from engine.errors import WorldPagerError
from engine.files.output_files import write_failure

log = logging.getLogger("worldpager.session")
CLEANUP_ERRORS = (OSError, WorldPagerError)   # what the drive and the user's paths can do to a clean-up


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Cleanup:
    """Steps of one clean-up (see the module docstring)."""

    def __init__(self, failing: BaseException | None = None):
        self.failing = failing
        self.first: BaseException | None = None       # the first step error (the run's, if none failing)
        self.later: list[BaseException] = []           # step errors that lost to an earlier one
        self.pending: BaseException | None = None     # an interrupt or internal error met in a step

    def run(self, step: Callable, *args, **kwargs) -> None:
        try:
            step(*args, **kwargs)
        except CLEANUP_ERRORS as exc:
            if self.failing is None and self.first is None:
                self.first = exc
            elif self.failing is None or one_line(exc) != one_line(self.failing):   # not the same news again
                self.later.append(exc)
        except BaseException as exc:   # a second signal, or a bug: the steps after it still run
            if self.pending is None:
                self.pending = exc
            else:
                self.later.append(exc)

    def finish(self) -> None:
        """Say the later errors in one warning line; raise what must be raised (module docstring)."""
        pending = self.pending
        if pending is not None and self.failing is not None and not isinstance(pending, KeyboardInterrupt):
            self.later.insert(0, pending)   # the run's own error is on its way: a bug here is reported, not raised
            pending = None
        if self.later:
            more = f" (and {len(self.later) - 1} more)" if len(self.later) > 1 else ""
            log.warning("worldpager: warning: closing the outputs also failed: %s%s", _named(self.later[0]), more)
        if pending is not None:
            raise pending
        if self.first is not None:
            raise self.first


def _named(exc: BaseException) -> str:
    if isinstance(exc, OSError):   # the file it was about, and what the drive said
        return f"{exc.filename}: {write_failure(exc)}" if exc.filename else write_failure(exc)
    text = one_line(exc)
    return text if isinstance(exc, WorldPagerError) else f"{type(exc).__name__}: {text}"
