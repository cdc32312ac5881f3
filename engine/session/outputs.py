"""The files a new run makes — its MP4, its log and its resolved config — and when they take their names.

Owns which of them this run created (the only ones it may remove) and the replacement of an earlier
run's files at the same paths (``--overwrite``; ``engine.session.ownership.refuse_existing`` has allowed
it, under the output's claim):

* **Fresh paths.** The MP4, the log and the config are made under their own names.
* **An earlier run there.** The new files are made under hidden staging names beside them
  (``.NAME.new``) and the earlier run's stay as they are, readable and, with their save points,
  resumable, until the new run has its first chunk in its MP4: ``commit()`` then removes the earlier
  run's save points and renames the new files over the old ones (config, log, MP4 last). A run that
  fails, or is stopped, before that leaves the earlier files untouched.
* **Nothing generated.** ``discard()`` closes the MP4 and the log and removes exactly the files this run
  created (never a file that was there before it), when the run fails or is stopped before its first
  chunk is in the file. Clean-up never masks the error that called it: a file that cannot be closed
  or removed is left as it is.

A process killed before ``commit()`` may leave the staging names behind (the earlier run's files are
whole); the next run at those paths writes over them.
"""
from __future__ import annotations

import os
from pathlib import Path

from engine.config import SessionConfig
from engine.files.durable import fsync_directory
from engine.errors import OutputError
from engine.io.video import VideoWriter
from engine.settings.overlay import write_resolved_config
from engine.session.save import savepoint_dir
from engine.session.savepoint import savepoint_paths
from engine.runtime.telemetry import SessionLog


def staging(path: Path) -> Path:
    """Where a replacing run's file ``path`` is made until its first chunk."""
    path = Path(path)
    return path.with_name(f".{path.name}.new")


class NewOutputs:
    """The MP4 writer, the log and the config file of a run that starts from nothing (not a resume or
    a fork: those continue files that are there)."""

    def __init__(self, cfg: SessionConfig, width: int, height: int, fps: int, preset: str):
        self.cfg = cfg
        finals = (Path(cfg.out), Path(cfg.log_path), Path(cfg.config_path))
        self.staged = any(p.is_file() for p in finals)   # an earlier run's files: replaced at the first chunk
        for path in finals if self.staged else ():
            if path.exists() and not path.is_file():   # found now, not when the first chunk is made
                raise OutputError(f"cannot replace {path}: it is not a regular file; move it away or choose "
                                  "another --out")
        video, log, config = (staging(p) for p in finals) if self.staged else finals
        self.created: list[Path] = []
        self.log: SessionLog | None = None
        self.writer = VideoWriter(video, width, height, fps, preset=preset)
        self.created.append(video)
        try:
            self.log = SessionLog(log)
            self.created.append(log)
            write_resolved_config(cfg, config)
            self.created.append(config)
        except BaseException:
            self.discard()
            raise

    def commit(self) -> None:
        """The run's first chunk is in its MP4: its files take their names (idempotent)."""
        if not self.staged:
            return
        for stale in savepoint_paths(savepoint_dir(self.cfg.out)):   # the earlier run's: never resumed into this one
            stale.unlink(missing_ok=True)
        video, log, config = self.created
        try:
            for made, final in ((config, self.cfg.config_path), (log, self.cfg.log_path), (video, self.cfg.out)):
                os.replace(made, final)
        except OSError as exc:
            raise OutputError(f"cannot put the new run's files in place of the earlier run's at {self.cfg.out}: "
                              f"{exc.strerror or exc}") from None
        self.writer.path, self.log.path = Path(self.cfg.out), Path(self.cfg.log_path)
        fsync_directory(Path(self.cfg.out).parent, required=False)
        self.staged = False
        self.created = [Path(self.cfg.out), Path(self.cfg.log_path), Path(self.cfg.config_path)]

    def discard(self, status: str = "failed") -> None:
        """Nothing was generated: close the MP4 and the log, remove the files this run created."""
        for close in (self.writer.close, lambda: self.log is not None and self.log.close(status)):
            try:
                close()
            except (OSError, OutputError):   # the caller's error is the one to report
                pass
        for path in self.created:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        self.created = []
