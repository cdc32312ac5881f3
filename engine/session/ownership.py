"""Who may write an output: one process per MP4, and no silent overwrite.

Owns three checks that come before anything of a run is written:

* ``check_video_path(out, flag)`` — the video is a ``.mp4`` file in an existing directory, and a regular
  file or not there yet (``engine.files.output_files``: never a FIFO, a socket, a device or a directory, also
  through a symlink); a one-line ``OutputError`` naming ``flag`` otherwise (``--out nodir/x.mp4`` blames
  ``--out``, not the log).
* ``claim_output(out, doing)`` — one writer per output, whatever the spelling of its name. Two locks:

  - **The name lock**: an exclusive ``flock`` on ``.NAME.mp4.lock`` beside the *resolved* video
    (symlinks and ``..`` resolved first, ``os.path.realpath``: ``link.mp4``, ``dir/../x.mp4`` and
    ``x.mp4`` are one output with one lock), holding the owner's pid, taken by ``generate``,
    ``resume``, ``fork`` and a batch worker's job before they write anything and held until the run
    ends (``OutputClaim.release``, or the process's exit: a killed owner frees it). A second process
    gets ``OutputInUseError``, one line naming the holder's pid. The owner removes the lock file when
    it releases it; a claimer that locked a file the previous owner had just removed tries again on the
    new one, so two owners never hold two different files for one video.
  - **The file lock**: a hard link is another name of the same file, which no resolving of names can
    see. So every writer of a run's files (the MP4, the log, the resolved config) holds an exclusive
    ``flock`` on the open file itself while it writes it, taken before it truncates or writes a byte
    (``engine.files.output_files.open_output``); a claim first probes the existing video's file lock and is
    refused (with the holder's pid) when another process writes that file under any name. The lock
    belongs to the file (the inode), not to a name, so it holds through what the video writer does to
    the file: it truncates the file it opened (same inode, same lock), and a resumed video, rewritten
    under a temporary name and renamed over the old one, is locked on the new file before the rename.
    (The old file, if it had other names, is then no longer this output.)

* ``refuse_existing(cfg, overwrite, flag)`` — a video, log or resolved config already at the run's paths
  is refused unless ``overwrite``; when they are an unfinished run that has a save point, the error says
  ``worldpager resume`` continues it. With ``overwrite`` nothing is removed here: the new run replaces
  the earlier run's files, save points included, once it has its first chunk
  (``engine.session.outputs``; a fork's at its commit), so a run that fails before that loses nothing.

Releasing the claim never masks the error a run ends with: a lock file that cannot be removed (the
output drive failed) is left behind (harmless: a lock file nobody holds is taken by the next claimer),
said as a warning only when the run itself went well.
"""
from __future__ import annotations

import errno
import logging
import os
import stat
import time
from pathlib import Path

from engine.config import SessionConfig
from engine.errors import InputError, OutputError
from engine.files.input_files import read_input_bytes
from engine.files.file_lock import release_lock, try_lock
from engine.files.input_files import shown
from engine.files.output_files import OutputDriveError, OutputInUseError, check_output_file, refuse_in_use, write_failure
from engine.session.save import savepoint_dir
from engine.session.savepoint import savepoint_paths
from engine.runtime.telemetry import read_log

VIDEO_SUFFIX = ".mp4"
CLAIM_TRIES = 8   # each retry follows a release by another process: a handful is plenty
log = logging.getLogger("worldpager.session")

__all__ = ["OutputClaim", "OutputInUseError", "check_video_path", "claim_output", "lock_path", "refuse_existing"]


def lock_path(out: Path) -> Path:
    """The name lock of ``out``: beside the file its name resolves to (symlinks and ``..`` resolved)."""
    real = Path(os.path.realpath(out))
    return real.with_name(f".{real.name}.lock")


def _stat(path: Path, flag: str) -> os.stat_result | None:
    """``os.stat`` of ``path`` (None: not there); a drive that fails (EIO, EROFS, ENOMEM) is one line
    naming the path and what the drive did (``write_failure``), never a traceback or "out of memory"."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:   # a symlink loop: check_output_file names it
            return None
        raise OutputDriveError(f"cannot check {flag} {shown(path)}: {write_failure(exc)}; choose another "
                               f"{flag} on a drive that works") from None


def check_video_path(out: Path, flag: str = "--out") -> None:
    """A ``.mp4`` name in an existing directory, not a directory itself."""
    out = Path(out)
    if out.suffix.lower() != VIDEO_SUFFIX:
        raise OutputError(f"{flag} {out}: WorldPager writes MP4 video; give a name ending in .mp4 "
                          f"(e.g. {out.with_suffix(VIDEO_SUFFIX).name})")
    st = _stat(out, flag)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{flag} {out} is a directory; give a file name, e.g. {out / 'session.mp4'}")
    parent = out.parent
    st = _stat(parent, flag)
    if st is None or not stat.S_ISDIR(st.st_mode):
        what = "is not a directory" if st is not None else "does not exist"
        raise OutputError(f"{flag} {out}: {parent} {what}; create the directory or choose another {flag}")
    check_output_file(out, flag)


class OutputClaim:
    """The lock of one output, held until ``release`` (or the process's end)."""

    def __init__(self, out: Path, fd: int, path: Path):
        self.out, self.path, self._fd = Path(out), path, fd

    def release(self, quiet: bool = False) -> None:
        """Remove the lock file, then give the lock back (idempotent). Never raises for the drive: a lock
        file that cannot be removed is left (a warning, unless ``quiet``: an error is already on its way)."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            if _holds(fd, self.path):
                self.path.unlink(missing_ok=True)
        except OSError as exc:
            if not quiet:
                log.warning("worldpager: warning: could not remove the lock file %s (%s); it is harmless and "
                            "can be deleted", self.path, exc.strerror or exc)
        finally:
            try:
                release_lock(fd)
            except OSError:   # closing frees the lock whatever unlocking said
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self) -> "OutputClaim":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.release(quiet=exc_type is not None)


def claim_output(out: Path, doing: str = "write", wait_s: float = 0.0) -> OutputClaim:
    """Own ``out`` (see the module docstring); ``doing`` words the refusal ("cannot resume OUT: ...").
    ``wait_s``: how long a held lock is waited for before the refusal (a batch job retried after its
    worker was killed waits for that worker's process to finish exiting)."""
    out = Path(out)
    path = lock_path(out)
    if not out.parent.is_dir():
        raise OutputError(f"cannot {doing} {out}: directory {out.parent} does not exist")
    check_output_file(out, "--out" if doing == "write" else "the video")
    check_output_file(path, "the output's lock file", fix="remove it, or choose another output")
    claim = _lock_name(out, path, doing, wait_s)
    try:
        refuse_in_use(out, f"cannot {doing}")   # the same file under another name: a hard link
    except BaseException:
        claim.release(quiet=True)
        raise
    return claim


def _lock_name(out: Path, path: Path, doing: str, wait_s: float) -> OutputClaim:
    """The name lock (see the module docstring), holding this process's pid."""
    deadline = time.monotonic() + wait_s
    for _ in range(CLAIM_TRIES):
        try:
            fd = try_lock(path, 0o644)
            while fd is None and time.monotonic() < deadline:
                time.sleep(0.05)
                fd = try_lock(path, 0o644)
            if fd is not None and _holds(fd, path):
                claim = OutputClaim(out, fd, path)
                try:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                except BaseException:
                    claim.release(quiet=True)
                    raise
                return claim
        except OSError as exc:
            raise OutputError(f"cannot {doing} {out}: cannot create its lock {path} "
                              f"({exc.strerror or exc})") from None
        if fd is None:
            raise OutputInUseError(f"cannot {doing} {out}: another WorldPager process ({_holder(path)}) "
                                   f"is writing it (lock {path}); wait for it to end, or choose another output")
        release_lock(fd)   # the previous owner removed this file as we locked it: lock the new one
    raise OutputInUseError(f"cannot {doing} {out}: its lock {path} keeps changing hands; try again")


def _holds(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not one an earlier owner removed)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(path: Path) -> str:
    try:   # gated: a FIFO at the lock's name is no holder's pid, and is never waited on
        text = read_input_bytes(path, "lock", 64).decode("utf-8", "replace").strip()
    except (OSError, InputError):
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"


# ---- existing outputs ----------------------------------------------------------------------------

def refuse_existing(cfg: SessionConfig, overwrite: bool, flag: str = "--out") -> None:
    """Refuse to replace an earlier run's outputs unless ``overwrite`` (call it holding the claim)."""
    existing = [p for p in (cfg.out, cfg.log_path, cfg.config_path) if Path(p).is_file()]
    if not existing:
        return
    if overwrite:   # replaced by the new run at its first chunk (engine.session.outputs)
        return
    names = ", ".join(str(p) for p in existing)
    newest = savepoint_paths(savepoint_dir(cfg.out))
    if newest and not _finished(cfg.log_path) and Path(cfg.config_path).is_file():
        raise OutputError(f"{flag} {cfg.out}: an unfinished run is there ({names}) with a save point in "
                          f"{savepoint_dir(cfg.out)}: `worldpager resume {cfg.out}` continues it; "
                          f"--overwrite starts over")
    raise OutputError(f"{flag} {cfg.out}: would overwrite {names}; give --overwrite to replace them, "
                      f"or choose another {flag}")


def _finished(log: Path) -> bool:
    try:
        records = read_log(log)
    except (OSError, ValueError):
        return False
    return bool(records) and records[-1].get("type") == "summary" and records[-1].get("status") == "done"
