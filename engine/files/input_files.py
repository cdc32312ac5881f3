"""What an input path may be, and opening one for reading: the one gate for every file a command reads (no torch).

The twin of ``engine.files.output_files``. Every file the program reads at a path the user names, or at a name
derived from one (a log, a batch manifest, a rows file, a preset, a start image, a config, a trajectory,
a pose folder's arrays, a checkpoint's files, a save point, ``--from``), is a regular file (through
symlinks). Anything else is refused with one line before it is opened: a named pipe (opening it would
wait for a writer forever; reading it would wait for data), a socket, a device, a directory, a file under
``/proc``, ``/sys`` or ``/dev`` (their sizes are not their contents, and reading some of them never ends).

* ``check_input_file(path, name, fix)`` — the check above; returns the ``os.stat_result`` (``name`` is
  how the message calls it, e.g. ``--log``; ``fix`` says what to do instead).
* ``check_input_dir(path, name, fix)`` — a directory input (a checkpoint, a pose folder) exists and is a
  directory.
* ``open_input(path, name, binary)`` — the file object a reader reads through. Opened with ``O_NONBLOCK``
  (a FIFO put there since the check fails instead of waiting), refused unless the opened file is regular,
  then switched back to blocking reads.
* ``read_input_bytes(path, name, limit)`` — the whole file, refused past ``limit`` bytes.
* ``refuse_wrong_kind(path, name, files, dirs)`` — only the kind: a path that is there and is not what a
  reader takes (a regular file when ``files``, a directory when ``dirs``; never a pseudo file system) is
  refused; a missing path is left to its reader, whose message says what it looks for.
* ``shown(path)`` — a name as messages print it: as it is, or quoted with its control characters escaped
  (a name with a newline stays on the error's one line).
* ``pseudo_root(path)`` — ``/proc``, ``/sys`` or ``/dev`` when ``path`` resolves under one (not ``/dev/shm``).

Every failure is an ``InputError`` (exit 1) whose message names the path and what it is.
"""
from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

from engine.errors import InputError

PSEUDO_ROOTS = ("/proc", "/sys", "/dev")
ORDINARY_UNDER_PSEUDO = ("/dev/shm",)   # a tmpfs of ordinary files: a fine place to read and write

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def describe(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for a non-regular file)."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def shown(path) -> str:
    """``path`` as a message prints it: unchanged when printable, else quoted with escapes (one line)."""
    text = os.fspath(path) if not isinstance(path, str) else path
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return repr(text)


def _fix(name: str, fix: str | None) -> str:
    return fix or f"name a regular file as {name}"


def _under(real: str, root: str) -> bool:
    return real == root or real.startswith(root + "/")


def pseudo_root(path) -> str | None:
    """The pseudo file system (``/proc``, ``/sys``, ``/dev``) that ``path`` resolves into, or None
    (``/dev/shm`` is an ordinary tmpfs, not one of them)."""
    real = os.path.realpath(path)
    if any(_under(real, ordinary) for ordinary in ORDINARY_UNDER_PSEUDO):
        return None
    return next((root for root in PSEUDO_ROOTS if _under(real, root)), None)


def _stat(path: Path, name: str, fix: str | None) -> os.stat_result:
    try:
        return os.stat(path)   # through symlinks
    except FileNotFoundError:
        if os.path.islink(path):
            raise InputError(f"{name} {shown(path)} is a symlink to {shown(os.path.realpath(path))}, which does "
                             f"not exist") from None
        raise InputError(f"{name} {shown(path)} does not exist") from None
    except NotADirectoryError:
        raise InputError(f"{name} {shown(path)} does not exist (a part of it is not a directory)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{name} {shown(path)} is a symlink loop; {_fix(name, fix)}") from None
        raise InputError(f"cannot read {name} {shown(path)}: {exc.strerror or exc}") from None


def _what(path: Path, mode: int) -> str:
    if os.path.islink(path):
        return f"a symlink to {shown(os.path.realpath(path))}, {describe(mode)}"
    return describe(mode)


def check_input_file(path, name: str, fix: str | None = None) -> os.stat_result:
    """``path`` may be read as a file (see the module docstring); else a one-line ``InputError``."""
    path = Path(path)
    st = _stat(path, name, fix)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{name} {shown(path)} is {_what(path, st.st_mode)}, not a regular file; {_fix(name, fix)}")
    root = pseudo_root(path)
    if root is not None:
        raise InputError(f"{name} {shown(path)} is a file under {root}, not a regular file on a drive; "
                         f"{_fix(name, fix)}")
    return st


def check_input_dir(path, name: str, fix: str | None = None) -> os.stat_result:
    """``path`` is a directory (through symlinks); else a one-line ``InputError``."""
    path = Path(path)
    st = _stat(path, name, fix)
    if not stat.S_ISDIR(st.st_mode):
        what = "a regular file" if stat.S_ISREG(st.st_mode) else _what(path, st.st_mode)
        raise InputError(f"{name} {shown(path)} is {what}, not a directory; {fix or f'name a directory as {name}'}")
    root = pseudo_root(path)
    if root is not None:
        raise InputError(f"{name} {shown(path)} is under {root}, not a directory on a drive; "
                         f"{fix or f'name a directory as {name}'}")
    return st


def open_input(path, name: str, binary: bool = True, fix: str | None = None, encoding: str = "utf-8"):
    """The checked file open for reading (``rb``, or text in ``encoding`` with strict decoding)."""
    path = Path(path)
    check_input_file(path, name, fix)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read {name} {shown(path)}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):   # replaced between the check and the open
            raise InputError(f"{name} {shown(path)} is {describe(st.st_mode)}, not a regular file; {_fix(name, fix)}")
        os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return raw if binary else io.TextIOWrapper(raw, encoding=encoding, errors="strict")


def read_input_bytes(path, name: str, limit: int, fix: str | None = None) -> bytes:
    """The whole file at ``path`` (checked as above); an ``InputError`` when it holds more than ``limit`` bytes."""
    path = Path(path)
    with open_input(path, name, binary=True, fix=fix) as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read {name} {shown(path)}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{name} {shown(path)} is larger than {limit:,} bytes; {fix or 'is it the right file?'}")
    return data


def refuse_wrong_kind(path, name: str, files: bool = True, dirs: bool = False) -> None:
    """An ``InputError`` when ``path`` exists and is not a regular file (``files``) or a directory
    (``dirs``), or lies under a pseudo file system; nothing when it is missing (see the module docstring)."""
    path = Path(path).expanduser()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError:
        st = _stat(path, name, None)   # its one-line error (a symlink loop, a failing drive, ...)
    if (files and stat.S_ISREG(st.st_mode)) or (dirs and stat.S_ISDIR(st.st_mode)):
        root = pseudo_root(path)
        if root is None:
            return
        raise InputError(f"{name} {shown(path)} is under {root}, not on a drive; name a file on a drive as {name}")
    wanted = " or ".join(w for w, on in (("a regular file", files), ("a directory", dirs)) if on)
    what = "a regular file" if stat.S_ISREG(st.st_mode) else _what(path, st.st_mode)
    raise InputError(f"{name} {shown(path)} is {what}, not {wanted}; name {wanted} as {name}")
