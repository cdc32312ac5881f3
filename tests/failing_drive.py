"""A drive that fails, emulated at the ``os`` level inside a CLI subprocess (tests only).

Imported before the CLI (``python -c "import failing_drive; from worldpager_cli.main import cli; cli()"``,
with ``tests/`` on ``PYTHONPATH``), it wraps the calls that ``pathlib``, ``shutil`` and our own code
make to look at or open a path — ``os.stat``, ``os.lstat``, ``os.open``, ``os.scandir``,
``os.listdir``, ``os.statvfs``, ``os.mkdir``, ``os.access``, ``os.unlink``, ``os.replace``,
``os.rename``, ``os.chmod`` and the built-in ``open`` — so that, for a path under
``$FAILING_DRIVE_UNDER``, they raise ``OSError($FAILING_DRIVE_ERRNO)`` (``EIO`` by default; any name of
the ``errno`` module) the way a dying drive does. ``os.access`` answers False, as the kernel's error
makes it. ``$FAILING_DRIVE_NAMES`` (comma-separated file names) narrows the fault to those names under
the directory (e.g. ``index.json`` alone). Every probe of ours is covered, also those no test knows
of; calls on open file descriptors are left alone (the fault is in looking paths up).
"""
from __future__ import annotations

import builtins
import errno
import io
import os

UNDER = os.environ.get("FAILING_DRIVE_UNDER")
CODE = getattr(errno, os.environ.get("FAILING_DRIVE_ERRNO", "EIO"))
NAMES = {n for n in os.environ.get("FAILING_DRIVE_NAMES", "").split(",") if n}


def _failing(path) -> bool:
    if UNDER is None or isinstance(path, int):
        return False
    try:
        text = os.fsdecode(path)
    except TypeError:
        return False
    full = _abspath(text)
    root = _abspath(UNDER)
    if full != root and not full.startswith(root.rstrip("/") + "/"):
        return False
    return not NAMES or os.path.basename(full) in NAMES


def _abspath(text: str) -> str:
    # os.path.abspath calls os.getcwd only: no probe of its own, so no recursion into the wrappers
    return os.path.normpath(os.path.join(_getcwd(), text))


def _raise(path) -> None:
    raise OSError(CODE, os.strerror(CODE), os.fsdecode(path))


def _wrap(name: str, nargs: int = 1) -> None:
    real = getattr(os, name)

    def wrapped(*args, **kwargs):
        for path in args[:nargs]:
            if _failing(path):
                _raise(path)
        return real(*args, **kwargs)
    wrapped.__wrapped__ = real
    setattr(os, name, wrapped)


def _wrap_access() -> None:
    real = os.access

    def access(path, *args, **kwargs):
        return False if _failing(path) else real(path, *args, **kwargs)
    os.access = access


def _wrap_open() -> None:
    real = builtins.open

    def opened(file, *args, **kwargs):
        if _failing(file):
            _raise(file)
        return real(file, *args, **kwargs)
    builtins.open = io.open = opened


_getcwd = os.getcwd
if UNDER:
    for _name in ("stat", "lstat", "open", "scandir", "listdir", "statvfs", "mkdir", "unlink", "chmod", "rmdir",
                  "truncate"):
        _wrap(_name)
    for _name in ("replace", "rename"):
        _wrap(_name, nargs=2)
    _wrap_access()
    _wrap_open()
