"""The batch manifest: ``OUT_DIR/batch-manifest.json``, what became of every job of a batch.

Owns the file and its updates. It is one JSON object ``{"version": 1, "jobs": {NAME: ENTRY}}``; each
entry holds the job's ``status`` — ``pending``, ``running``, ``done``, ``failed`` (with ``error``, the
job's one-line error) or ``interrupted`` — its ``out``, ``attempts``, the ``fingerprint`` of its options,
and once it ran: ``worker``, ``chunks``, ``frames``, ``fps`` (video frames made per second of wall
time), ``stall_p99_ms``, ``rss_max_mib``, ``wall_s``, ``resumed_at`` (the save point's chunk, when it
was resumed), ``model_reused`` (whether its worker had the model loaded already) and ``made``, what
the job's attempts made (``engine.batch.ownership``: the only outputs a batch replaces without
``--overwrite``). Every update rewrites the file atomically (a temporary file, fsync, rename, directory
fsync), so a batch killed at any moment leaves the manifest before or after an update, never a torn one.

A batch holds ``OUT_DIR/batch.lock`` (``flock``) while it runs: a second batch on the same directory
is refused with one line. The batch removes the file when it ends (while it still holds it; a batch
that opened it just before locks the new one instead, ``engine.files.file_lock.try_lock_at``); a killed batch
leaves it, unlocked. A job found ``running`` when the lock is free was cut short by a killed batch: it
counts as interrupted.

The manifest is read through the input gate and the bounded JSON reader (``engine.files.input_files``,
``engine.files.bounded_json``): a FIFO, a directory or a device at its name is refused before the lock is taken
(never waited on, so Ctrl-C is never stuck behind it); a damaged one (too deep, not UTF-8, not JSON, a
field of the wrong kind) is one line, and the lock is given back.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from engine.files.bounded_json import read_json_file
from engine.files.durable import fsync_directory
from engine.batch.ownership import made_problem
from engine.files.file_lock import release_and_remove, try_lock_at
from engine.errors import InputError, OutputError
from engine.files.input_files import check_input_file, shown

MANIFEST_NAME, LOCK_NAME = "batch-manifest.json", "batch.lock"
STATUSES = ("pending", "running", "done", "failed", "interrupted")
MAX_MANIFEST_BYTES = 256 << 20   # ~1 KiB an entry: far more jobs than a batch runs
_AFRESH = "move it away to start the batch afresh"


# An entry's fields and what each may hold (a number field: int or float, never a bool).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "attempts": (int,), "chunks": (int,), "frames": (int,), "resumed_at": (int, type(None)),
    "fps": (int, float, type(None)), "stall_p99_ms": (int, float, type(None)),
    "rss_max_mib": (int, float, type(None)), "wall_s": (int, float, type(None)),
    "out": (str,), "fingerprint": (str,), "error": (str, type(None)), "worker": (str, int, type(None)),
    "model_reused": (bool, type(None)), "started": (int, float), "finished": (int, float),
}
_KIND = {int: "a whole number", float: "a number", str: "text", bool: "true or false", type(None): "null"}


def entry_problem(entry: Any) -> str | None:
    """Why a manifest entry cannot be used (one phrase naming the field and its value), or None."""
    if not isinstance(entry, dict):
        return f"the entry is a JSON {type(entry).__name__}, not an object"
    if entry.get("status", "pending") not in STATUSES:
        return f"'status' is {str(entry.get('status'))[:40]!r}, not one of {', '.join(STATUSES)}"
    for field, types in _FIELD_TYPES.items():
        if field not in entry:
            continue
        value = entry[field]
        bad = isinstance(value, bool) and bool not in types or not isinstance(value, types)
        if not bad and field in ("attempts", "chunks", "frames") and value < 0:
            bad = True
        if bad:
            kinds = " or ".join(_KIND[t] for t in types if not (t is int and float in types))
            return f"{field!r} is {json.dumps(value)[:40]}, not {kinds}"
    return made_problem(entry["made"]) if "made" in entry else None


class Manifest:
    """The jobs' entries, kept in memory and written through on every change."""

    def __init__(self, out_dir: Path):
        self.dir = Path(out_dir)
        self.path = self.dir / MANIFEST_NAME
        self._lock_fd = -1
        self.jobs: dict[str, dict[str, Any]] = {}

    # ---- the lock and the file -------------------------------------------------------------------

    def open(self) -> "Manifest":
        """Take the directory's lock and read the manifest (none yet: empty)."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create the output directory {self.dir}: {exc.strerror}") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise OutputError(f"output directory {self.dir} is not writable")
        if os.path.lexists(self.path):   # a FIFO or directory there is refused before the lock is taken
            check_input_file(self.path, "batch manifest", fix=_AFRESH)
        fd = try_lock_at(self.dir / LOCK_NAME, 0o644)
        if fd is None:
            raise OutputError(f"another batch is running in {self.dir} (lock {self.dir / LOCK_NAME} is held); "
                              "wait for it or choose another --out-dir")
        self._lock_fd = fd
        try:
            self.jobs = self._read()
        except BaseException:   # a damaged manifest (or Ctrl-C while reading it): the directory is given back
            self.close()
            raise
        return self

    def close(self) -> None:
        """Give the directory back: the lock file is removed while still held, then released."""
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            release_and_remove(fd, self.dir / LOCK_NAME)

    def __enter__(self) -> "Manifest":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self) -> dict[str, dict[str, Any]]:
        if not os.path.lexists(self.path):
            return {}
        try:
            data = read_json_file(self.path, "batch manifest", MAX_MANIFEST_BYTES)
        except InputError as exc:
            raise InputError(f"{exc}; {_AFRESH}") from None
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
            raise InputError(f"{shown(self.path)} is not a batch manifest; move it away or choose another --out-dir")
        jobs = {}
        for name, entry in data["jobs"].items():
            problem = entry_problem(entry)
            if problem is not None:
                raise InputError(f"batch manifest {self.path}: job {name[:40]!r}: {problem}; move it away to "
                                 "start the batch afresh")
            jobs[name] = {"status": "pending", "attempts": 0} | entry
        for entry in jobs.values():
            if entry.get("status") == "running":   # its batch was killed (we hold the lock now)
                entry["status"] = "interrupted"
        return jobs

    def _write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        text = json.dumps({"version": 1, "jobs": self.jobs}, indent=1, sort_keys=True) + "\n"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:   # the manifest on the drive stays the last whole one
            tmp.unlink(missing_ok=True)
            raise OutputError(f"cannot update the batch manifest {self.path}: {exc.strerror or exc}; free space "
                              f"in {self.dir}, then run the batch again: it goes on where it stopped "
                              "(a job left running there is resumed)") from None
        fsync_directory(self.dir, required=False)

    # ---- the entries -----------------------------------------------------------------------------

    def entry(self, name: str) -> dict[str, Any] | None:
        return self.jobs.get(name)

    def update(self, name: str, **fields: Any) -> dict[str, Any]:
        entry = self.jobs.setdefault(name, {"status": "pending", "attempts": 0})
        assert fields.get("status", entry["status"]) in STATUSES, fields
        entry.update(fields)
        self._write()
        return entry

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for entry in self.jobs.values():
            out[entry.get("status", "pending")] += 1
        return out
