"""Who may write an output: one process per MP4, and no silent overwrite.

Owns three checks that come before anything of a run is written:

* ``check_video_path(out, flag)`` — the video is a ``.mp4`` file in an existing directory (a one-line
  ``OutputError`` naming ``flag`` otherwise: ``--out nodir/x.mp4`` blames ``--out``, not the log).
* ``claim_output(out, doing)`` — an exclusive ``flock`` on ``.NAME.mp4.lock`` beside the video
  (``engine.file_lock``), holding the owner's pid, taken by ``generate``, ``resume``, ``fork`` and a
  batch worker's job before they write anything and held until the run ends (``OutputClaim.release``,
  or the process's exit: a killed owner frees it). A second process gets ``OutputInUseError``, one line
  naming the holder's pid. The owner removes the lock file when it releases it; a claimer that locked a
  file the previous owner had just removed tries again on the new one, so two owners never hold two
  different files for one video.
* ``refuse_existing(cfg, overwrite, flag)`` — a video, log or resolved config already at the run's paths
  is refused unless ``overwrite``; when they are an unfinished run that has a save point, the error says
  ``worldpager resume`` continues it. With ``overwrite`` nothing is removed here: the new run replaces
  the earlier run's files, save points included, once it has its first chunk
  (``engine.session.outputs``; a fork's at its commit), so a run that fails before that loses nothing.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from engine.config import SessionConfig
from engine.errors import OutputError
from engine.file_lock import release_lock, try_lock
from engine.session.save import savepoint_dir
from engine.session.savepoint import savepoint_paths
from engine.telemetry import read_log

VIDEO_SUFFIX = ".mp4"
CLAIM_TRIES = 8   # each retry follows a release by another process: a handful is plenty


class OutputInUseError(OutputError):
    """Another process writes this output."""


def lock_path(out: Path) -> Path:
    out = Path(out)
    return out.with_name(f".{out.name}.lock")


def check_video_path(out: Path, flag: str = "--out") -> None:
    """A ``.mp4`` name in an existing directory, not a directory itself."""
    out = Path(out)
    if out.suffix.lower() != VIDEO_SUFFIX:
        raise OutputError(f"{flag} {out}: WorldPager writes MP4 video; give a name ending in .mp4 "
                          f"(e.g. {out.with_suffix(VIDEO_SUFFIX).name})")
    if out.is_dir():
        raise OutputError(f"{flag} {out} is a directory; give a file name, e.g. {out / 'session.mp4'}")
    parent = out.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"{flag} {out}: {parent} {what}; create the directory or choose another {flag}")


class OutputClaim:
    """The lock of one output, held until ``release`` (or the process's end)."""

    def __init__(self, out: Path, fd: int):
        self.out, self.path, self._fd = Path(out), lock_path(out), fd

    def release(self) -> None:
        """Remove the lock file, then give the lock back (idempotent)."""
        if self._fd < 0:
            return
        try:
            if _holds(self._fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            release_lock(self._fd)
            self._fd = -1

    def __enter__(self) -> "OutputClaim":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim_output(out: Path, doing: str = "write", wait_s: float = 0.0) -> OutputClaim:
    """Own ``out`` (see the module docstring); ``doing`` words the refusal ("cannot resume OUT: ...").
    ``wait_s``: how long a held lock is waited for before the refusal (a batch job retried after its
    worker was killed waits for that worker's process to finish exiting)."""
    out = Path(out)
    path = lock_path(out)
    if not out.parent.is_dir():
        raise OutputError(f"cannot {doing} {out}: directory {out.parent} does not exist")
    deadline = time.monotonic() + wait_s
    for _ in range(CLAIM_TRIES):
        try:
            fd = try_lock(path, 0o644)
            while fd is None and time.monotonic() < deadline:
                time.sleep(0.05)
                fd = try_lock(path, 0o644)
        except OSError as exc:
            raise OutputError(f"cannot {doing} {out}: cannot create its lock {path} "
                              f"({exc.strerror or exc})") from None
        if fd is None:
            raise OutputInUseError(f"cannot {doing} {out}: another WorldPager process ({_holder(path)}) "
                                   f"is writing it (lock {path}); wait for it to end, or choose another output")
        if _holds(fd, path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return OutputClaim(out, fd)
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
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
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
