"""What an output path may be, and opening one for writing: the one place for both (no torch).

Every file a command writes at a path the user names, or at a name derived from one (the MP4, the log,
the resolved config, the output's lock, a fork's staged files, a report's page and figures, a truth
video, a pose folder's arrays, a training checkpoint, a benchmark's strip), is a regular file or is not
there yet. Anything else is refused with one line before anything is written: a named pipe (opening it
for writing would wait for a reader forever), a socket, a device (``/dev/null`` would swallow the video),
a directory, a name under ``/proc``, ``/sys`` or ``/dev`` (kernel views, not a drive: ``/proc/self/x``
cannot be made). A symlink is judged by what it points to: to a regular file, or to a name not there
yet in a directory that exists, it is fine; to a FIFO it is not. Paths are judged with
``os.stat``/``os.lstat``, never by opening them.

* ``check_output_file(path, name, fix)`` — the check above, for one file (``name`` is how the message
  calls it, e.g. ``--log``; ``fix`` says what to do instead).
* ``check_output_dir(path, name, files, fix)`` — a directory output (a report, a pose folder, a training
  directory): not there yet, or a directory; and each of ``files`` in it passes ``check_output_file``.
* ``make_output_dir(path, name, files, fix)`` — ``check_output_dir``, then the directory made (with its
  parents); a drive that refuses (a part of the path is a file, no permission) is one ``OutputError``.
* ``refuse_in_use(path, name)`` — ``OutputInUseError`` when another process writes the file at ``path``,
  under this name or another (a hard link, a symlink, ``dir/../x``): its writer holds a flock on it
  (below). A momentary probe, taken and given back at once; the error names the holder's pid.
* ``open_output(path, name, append)`` — the fd a writer of a run's output (the MP4, the log, the resolved
  config) writes through. Opened without truncating and without blocking (``O_NONBLOCK``: a FIFO put
  there since the check fails instead of waiting), refused unless the opened file is regular, then
  locked with an exclusive ``flock`` held for as long as the fd is open — ``OutputInUseError`` when
  another process holds it — and only then truncated (unless ``append``). So a second run that names
  the same file under any spelling is refused before it changes a byte, and the lock belongs to the
  file, not to the name: a file written under a temporary name and renamed into place (a resumed MP4,
  a continued log) keeps its lock across the rename.
* ``write_failure(exc)`` — the words for a write the drive refused (``OutputDriveError`` carries them for
  a path the drive would not let be looked at): its ``strerror``, and for a drive
  that failed (EIO) or went read-only (EROFS, as ext4 does after an error) what that means, and for a file
  past the process's file-size limit (EFBIG: ``ulimit -f``) that limit (``engine.files.limits``).
"""
from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from engine.errors import OutputError
from engine.files.file_lock import lock_holder, try_lock_fd
from engine.files.input_files import pseudo_root, shown
from engine.files.limits import file_size_text

LOCK_TRIES = 50          # a probe (``refuse_in_use``) holds a file's lock for microseconds: wait out one
LOCK_RETRY_S = 0.01


class OutputInUseError(OutputError):
    """Another process writes this output."""


class OutputDriveError(OutputError):
    """The drive refused to let an output path be looked at or written (EIO, EROFS, ENOMEM…): worded by
    ``write_failure``. An ENOMEM here is the drive's answer, not the process's memory (``engine.files.limits``)."""

    memory_is_the_drives = True


_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def describe(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for a non-regular file)."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


_DRIVE_FAILURES = {
    errno.EIO: "the drive holding it failed (check the drive and its connection)",
    errno.EROFS: "the drive holding it went read-only (a file system does that after an error: check the drive)",
}


def write_failure(exc: BaseException) -> str:
    """A refused write in words: ``Input/output error: the drive holding it failed (...)``; ``File too
    large: this process may write files of at most 8 KiB (ulimit -f 8, RLIMIT_FSIZE) ...`` (EFBIG)."""
    text = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    code = getattr(exc, "errno", None)
    hint = file_size_text() if code == errno.EFBIG else _DRIVE_FAILURES.get(code)
    return f"{text}: {hint}" if hint else text


def _fix(name: str, fix: str | None) -> str:
    return fix or f"choose another {name}"


def _refuse_pseudo(path: Path, name: str, fix: str | None) -> None:
    """A name under /proc, /sys or /dev (through symlinks) is no place for an output."""
    root = pseudo_root(path)
    if root is not None:
        raise OutputError(f"{name} {path} is under {root}, not on a drive: it cannot hold the output (nothing "
                          f"was written); {_fix(name, fix)}")


def check_output_file(path: Path, name: str, fix: str | None = None) -> None:
    """``path`` may be written as a file (see the module docstring); else a one-line ``OutputError``."""
    path = Path(path)
    try:
        st = os.stat(path)   # through symlinks
    except (FileNotFoundError, NotADirectoryError):
        _refuse_pseudo(path, name, fix)
        _check_dangling(path, name, fix)   # not there yet (the caller checks its directory)
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{name} {path} is a symlink loop; {_fix(name, fix)}") from None
        raise OutputDriveError(f"cannot check {name} {shown(path)}: {write_failure(exc)}; {_fix(name, fix)}") from None
    if stat.S_ISREG(st.st_mode):
        _refuse_pseudo(path, name, fix)
        return
    raise OutputError(f"{name} {path} is {_what(path, st.st_mode)}, not a regular file: it cannot hold the "
                      f"output (nothing was written); {_fix(name, fix)}")


def _what(path: Path, mode: int) -> str:
    if os.path.islink(path):
        return f"a symlink to {os.path.realpath(path)}, {describe(mode)}"
    return describe(mode)


def _check_dangling(path: Path, name: str, fix: str | None) -> None:
    """A symlink to a name not there yet is written where it points: that directory must exist."""
    if not os.path.islink(path):
        return
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():
        raise OutputError(f"{name} {path} is a symlink to {target}, whose directory does not exist; "
                          f"{_fix(name, fix)}")


def check_output_dir(path: Path, name: str, files: tuple[str, ...] = (), fix: str | None = None) -> None:
    """``path`` is not there yet, or a directory (through symlinks), and each of ``files`` in it may be
    written as a file; else a one-line ``OutputError``."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        _refuse_pseudo(path, name, fix)
        return
    except OSError as exc:
        raise OutputDriveError(f"cannot check {name} {shown(path)}: {write_failure(exc)}; {_fix(name, fix)}") from None
    if not stat.S_ISDIR(st.st_mode):
        what = "a regular file" if stat.S_ISREG(st.st_mode) else _what(path, st.st_mode)
        raise OutputError(f"{name} {path} is {what}, not a directory; {_fix(name, fix)}")
    _refuse_pseudo(path, name, fix)
    for file in files:
        check_output_file(path / file, f"{name} {path}: its file", fix or f"move it away, or choose another {name}")


def make_output_dir(path: Path, name: str, files: tuple[str, ...] = (), fix: str | None = None) -> None:
    """``check_output_dir``, then ``path`` made (parents too); a refused ``mkdir`` is one ``OutputError``."""
    check_output_dir(path, name, files, fix)
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot make {name} {path}: {write_failure(exc)}; {_fix(name, fix)}") from None


def refuse_in_use(path: Path, name: str) -> None:
    """``OutputInUseError`` when another process writes the regular file at ``path`` (see the module
    docstring); nothing there, or not ours to open, is no refusal."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):   # only a regular file is opened (a device's open acts)
            return
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and not try_lock_fd(fd):
            raise _in_use(path, name, st)
    finally:
        os.close(fd)   # gives the probe's lock back


def _in_use(path: Path, name: str, st: os.stat_result) -> OutputInUseError:
    pid = lock_holder(st)
    who = f"pid {pid}" if pid is not None else "pid unknown"
    other = name if name.startswith("--") else "output"
    return OutputInUseError(f"{name} {path}: another WorldPager process ({who}) is writing this file (under "
                            f"this name or another: a link to it); wait for it to end, or choose another {other}")


def open_output(path: Path, name: str, append: bool = False, mode: int = 0o666) -> int:
    """An fd for writing ``path``, locked for this writer (see the module docstring); truncated unless
    ``append``. Raises ``OutputError`` for a path that is not a regular file, ``OutputInUseError`` when
    another process writes it, ``OSError`` when the drive refuses (the caller words that)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ELOOP):   # a FIFO without reader, a directory
            check_output_file(path, name)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{name} {path} is {_what(path, st.st_mode)}, not a regular file: it cannot hold "
                              f"the output (nothing was written); choose another {name}")
        if not _lock(fd):
            raise _in_use(path, name, st)
        os.set_blocking(fd, True)
        if append:
            os.lseek(fd, 0, os.SEEK_END)
        else:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(fd: int) -> bool:
    for attempt in range(LOCK_TRIES):
        if try_lock_fd(fd):
            return True
        time.sleep(LOCK_RETRY_S)
    return False
