"""Clean-up on the way out (``engine/files/cleanup.py``): every step runs, the first error wins, a later one is
at most one warning line."""
from __future__ import annotations

import errno
import logging

import pytest

from engine.files.cleanup import Cleanup
from engine.errors import OutputError


def _fails(exc: BaseException):
    def step():
        raise exc
    return step


def test_with_nothing_failing_the_first_step_error_is_raised_after_every_step(caplog):
    ran = []
    cleanup = Cleanup()
    cleanup.run(_fails(OSError(errno.EIO, "Input/output error")))
    cleanup.run(_fails(OutputError("cannot write log x")))
    cleanup.run(ran.append, "last")
    with caplog.at_level(logging.WARNING), pytest.raises(OSError, match="Input/output"):
        cleanup.finish()
    assert ran == ["last"]
    assert [r.getMessage() for r in caplog.records] == [
        "worldpager: warning: closing the outputs also failed: cannot write log x"]


def test_the_error_on_its_way_wins_and_the_same_news_is_not_said_twice(caplog):
    failing = OutputError("cannot write video v.mp4: Input/output error")
    cleanup = Cleanup(failing)
    cleanup.run(_fails(OutputError("cannot write video v.mp4: Input/output error")))
    cleanup.run(_fails(OSError(errno.EROFS, "Read-only file system", "v.mp4")))
    cleanup.run(_fails(OSError(errno.EIO, "Input/output error")))
    with caplog.at_level(logging.WARNING):
        cleanup.finish()   # nothing raised: the caller raises ``failing``
    assert [r.getMessage() for r in caplog.records] == [
        "worldpager: warning: closing the outputs also failed: v.mp4: Read-only file system: the drive holding it "
        "went read-only (a file system does that after an error: check the drive) (and 1 more)"]


def test_an_interrupt_in_a_step_lets_the_others_run_then_goes_on():
    ran = []
    cleanup = Cleanup(OutputError("disk"))
    cleanup.run(_fails(KeyboardInterrupt()))
    cleanup.run(ran.append, "log closed")
    with pytest.raises(KeyboardInterrupt):
        cleanup.finish()
    assert ran == ["log closed"]


def test_a_bug_in_a_step_is_raised_unless_an_error_is_on_its_way(caplog):
    cleanup = Cleanup()
    cleanup.run(_fails(TypeError("bug")))
    with pytest.raises(TypeError):
        cleanup.finish()
    cleanup = Cleanup(OutputError("disk"))
    cleanup.run(_fails(TypeError("bug")))
    with caplog.at_level(logging.WARNING):
        cleanup.finish()
    assert "TypeError: bug" in caplog.records[-1].getMessage()
