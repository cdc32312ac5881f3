"""Looking at a path on a drive that may fail: the one place set-up and resume turn an ``OSError`` into words.

``pathlib``'s ``exists()``, ``is_dir()`` and ``is_file()`` answer False only for ENOENT, ENOTDIR, EBADF
and ELOOP; any other error of the lookup (EIO from a dying drive, ENOMEM, EACCES on a parent
directory, ESTALE on a network mount) is raised — a traceback, where the user should read one line.
Every probe of the spill directory, the save-point directory (``OUT.mp4.save/``), the outputs a
resume continues and the inputs it reads goes through here.

Contract. Each function takes the ``path``, ``what`` (how the user knows it: ``--spill``, ``the save
points of OUT``) and optionally ``fix`` (what to do about it; default: check the drive and the
permissions, then run again). ``exists``, ``is_dir``, ``is_file`` and ``stat`` answer as ``pathlib``
does for a path that is not there; ``listdir``, ``look_inside`` (every entry of a directory, each
looked at), ``statvfs`` and ``probing`` (a context manager around a set-up step's own file calls:
opening, locking, reading) let no ``OSError`` through. Every other error
is one ``DriveError`` line: ``WHAT PATH: STRERROR (ERRNO) on FILE; FIX`` (``on FILE`` when a file under
PATH failed).
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat as stat_mode
from pathlib import Path
from typing import Iterator

from engine.errors import WorldPagerError

DEFAULT_FIX = "check the drive (dmesg) and the permissions of the path, then run again"


class DriveError(WorldPagerError):
    """A path could not be looked at or opened for a reason other than its absence."""
    # An ENOMEM a drive's probe returned is the drive's fault as reported, not the process's memory:
    # engine.files.limits does not retell this error as "out of memory" (EMFILE/ENFILE it still does).
    memory_is_the_drives = True


def drive_error(path, exc: OSError, what: str, fix: str | None = None) -> DriveError:
    """The one line for ``exc``, raised while looking at ``path`` (or a file under it)."""
    where = os.fsdecode(exc.filename) if exc.filename not in (None, "") else os.fsdecode(path)
    on = "" if where == os.fsdecode(path) else f" on {where}"
    name = errno.errorcode.get(exc.errno, f"errno {exc.errno}") if exc.errno is not None else type(exc).__name__
    reason = exc.strerror or str(exc)
    return DriveError(f"{what} {path}: {reason} ({name}){on}; {fix or DEFAULT_FIX}")


@contextlib.contextmanager
def probing(path, what: str, fix: str | None = None) -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into a ``DriveError`` naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise drive_error(path, exc, what, fix) from None


def stat(path, what: str, fix: str | None = None, follow: bool = True) -> os.stat_result | None:
    """``os.stat`` of ``path``; None where it is not there (as ``pathlib`` counts absence)."""
    try:
        return os.stat(path, follow_symlinks=follow)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return None
        raise drive_error(path, exc, what, fix) from None
    except ValueError:   # a name the OS cannot take (an embedded NUL): not there
        return None


def exists(path, what: str, fix: str | None = None) -> bool:
    return stat(path, what, fix) is not None


def is_dir(path, what: str, fix: str | None = None) -> bool:
    st = stat(path, what, fix)
    return st is not None and stat_mode.S_ISDIR(st.st_mode)


def is_file(path, what: str, fix: str | None = None) -> bool:
    st = stat(path, what, fix)
    return st is not None and stat_mode.S_ISREG(st.st_mode)


def listdir(path, what: str, fix: str | None = None) -> list[Path]:
    """The entries of the directory ``path`` (``Path.iterdir``, as a list)."""
    with probing(path, what, fix):
        return list(Path(path).iterdir())


def look_inside(directory, what: str, fix: str | None = None) -> list[Path]:
    """The entries of ``directory``, each looked at (``lstat``): a drive that fails on any of them is
    told now, before a session opens them."""
    with probing(directory, what, fix):
        entries = list(Path(directory).iterdir())
        for entry in entries:
            entry.lstat()
    return entries


def statvfs(path, what: str, fix: str | None = None) -> os.statvfs_result:
    with probing(path, what, fix):
        return os.statvfs(path)
