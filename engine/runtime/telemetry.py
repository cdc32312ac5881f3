"""The session log: JSON Lines, one record per chunk, flushed as written.

Owns the log's schema, its writer and its reader. Line 1 is ``{"type": "header", ...}`` with the
resolved config, the model facts and the writer (``pid``, ``host``); then one ``{"type": "chunk", ...}``
record per chunk; the last line is ``{"type": "summary", ...}`` with totals and percentiles. Between
them: ``savepoint`` records (a save point made durable: chunk, bytes, write and wait ms), ``note``s,
and, in a resumed run's log, a ``resume`` record naming the chunk it went on from and its writer (in a
branch's log, which starts as a copy of its parent's, a ``fork`` record: parent, chunk, writer). Every line
is flushed when written, so ``worldpager tail`` (and ``tail -f``) sees it at once, and a killed run
loses at most the summary.

``LogFollower`` reads a log as it grows and says why it stopped: the summary arrived, the end of the
file (not following), no new byte for the idle timeout, or the writer's process is gone (no summary
will ever come). A file that is missing, not a regular file (a FIFO, socket, device, directory or a file
under /proc: refused by ``engine.files.input_files`` before it is opened, never waited on) or not a log, and a
damaged line (named by its number: not UTF-8, not JSON, longer than ``MAX_LINE_BYTES``, nested deeper than
the bounded JSON reader allows, a string that is not Unicode, or a field the readers use with the wrong
type — ``check_record``), are one-line ``InputError``s.

Fields of a chunk record: chunk, frames, frames_total, wall_ms, compute_ms, decode_ms, stall_ms,
rss_bytes (process RSS from psutil), device_bytes (allocated device memory, 0 on CPU), plus whatever
the memory tiers add (hits, misses, stale, bytes per tier, pool, write-back queue, corrupt_blocks).
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import psutil

from engine.files.bounded_json import JsonInputError, parse_json
from engine.errors import InputError, OutputError
from engine.files.input_files import open_input, shown
from engine.files.output_files import open_output, write_failure

SCHEMA_VERSION = 1
MAX_LINE_BYTES = 16 << 20   # a header with its config is a few KiB; a longer line is no record of ours
LOG_FIX = "give the .log.jsonl file beside the MP4"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[rank - 1])


def process_rss() -> int:
    return psutil.Process().memory_info().rss


def available_memory() -> int:
    """Host memory available to a new allocation now (psutil's ``available``)."""
    return psutil.virtual_memory().available


@dataclass
class RunningSummary:
    """What the summary line needs, accumulated chunk by chunk (bounded: percentiles keep values)."""

    chunks: int = 0
    frames: int = 0
    stall_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    rss_min: int | None = None
    rss_max: int | None = None
    retrieval: dict = field(default_factory=lambda: {"hits": 0, "misses": 0, "stale": 0})

    def add(self, record: dict[str, Any]) -> None:
        self.chunks += 1
        self.frames = record.get("frames_total", self.frames)
        self.stall_ms.append(float(record.get("stall_ms", 0.0)))
        self.wall_ms.append(float(record.get("wall_ms", 0.0)))
        for key in self.retrieval:
            self.retrieval[key] += int(record.get(key, 0))
        rss = record.get("rss_bytes")
        if rss is not None:
            self.rss_min = rss if self.rss_min is None else min(self.rss_min, rss)
            self.rss_max = rss if self.rss_max is None else max(self.rss_max, rss)

    def as_record(self) -> dict[str, Any]:
        return {
            "chunks": self.chunks,
            "frames": self.frames,
            "stall_ms": {"p50": percentile(self.stall_ms, 50), "p99": percentile(self.stall_ms, 99),
                         "max": max(self.stall_ms, default=0.0)},
            "wall_ms": {"p50": percentile(self.wall_ms, 50), "p99": percentile(self.wall_ms, 99)},
            "rss_bytes": {"min": self.rss_min or 0, "max": self.rss_max or 0},
            "retrieval": dict(self.retrieval),
        }


class SessionLog:
    """Append-only JSON Lines writer for one session; the file is locked for this writer while it is
    open (``engine.files.output_files.open_output``: a second run naming the same log under any spelling is
    refused before it writes a byte)."""

    def __init__(self, path: Path, continue_before: int | None = None):
        """A new log, or (``continue_before`` = c) the log of a run resumed at chunk c: its header and
        the records of chunks before c are kept (rewritten atomically), the rest dropped, and new
        records are appended after them."""
        self.path = Path(path)
        self.summary = RunningSummary()
        kept = [] if continue_before is None else self._kept_records(continue_before)
        # Unbuffered bytes: every line reaches the OS whole, or (a full drive) is cut back off.
        self._file = self._open_kept(kept) if continue_before is not None else self._open(self.path)
        self._size = os.fstat(self._file.fileno()).st_size
        for record in kept:
            if record.get("type") == "chunk":
                self.summary.add(record)
        self._start = time.time()
        self.closed = False

    def _open(self, path: Path):
        try:
            return open(open_output(path, "--log"), "wb", buffering=0)
        except OSError as exc:
            raise OutputError(f"cannot write log {path}: {write_failure(exc)}; choose another --log") from None

    def _open_kept(self, kept: list[dict]):
        """The kept records written beside the log, locked, and renamed over it (the lock goes along)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        file = self._open(tmp)
        view = memoryview("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept).encode("utf-8"))
        try:
            while view:
                view = view[file.write(view):]
            os.replace(tmp, self.path)
        except OSError as exc:
            file.close()
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass   # the write's error is the one to report
            raise OutputError(f"cannot write log {self.path}: {write_failure(exc)}; choose another --log") from None
        return file

    def _kept_records(self, chunk: int) -> list[dict]:
        try:
            records = read_log(self.path)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot continue log {self.path}: {exc}") from None
        if not records or records[0].get("type") != "header":
            raise InputError(f"log {self.path} does not start with a header: cannot continue it")
        def before(r: dict) -> bool:   # a save point at c was made before chunk c began
            c = r.get("chunk")
            if not isinstance(c, int):
                return False
            return c <= chunk if r["type"] == "savepoint" else c < chunk
        return [r for r in records if r.get("type") == "header"
                or (r.get("type") in ("chunk", "savepoint", "resume", "fork") and before(r))]

    def record(self, kind: str, **fields: Any) -> None:
        """A line of another type (``savepoint``, ``note``; ``resume`` and ``fork`` also name their writer)."""
        if kind in ("resume", "fork"):
            fields = {"pid": os.getpid(), "host": socket.gethostname(), **fields}
        self._write({"type": kind, **fields})

    def _write(self, record: dict[str, Any]) -> None:
        """Append one line whole, or not at all (a failed write is cut back: no torn line)."""
        data = (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")
        view = memoryview(data)
        try:
            while view:
                view = view[self._file.write(view):]
        except OSError as exc:
            try:
                os.ftruncate(self._file.fileno(), self._size)
            except OSError:
                pass   # the write's error is the one to report
            raise OutputError(f"cannot write log {self.path}: {write_failure(exc)}") from None
        self._size += len(data)

    def header(self, config: dict[str, Any], facts: dict[str, Any], **extra: Any) -> None:
        self._write({"type": "header", "schema": SCHEMA_VERSION, "started": self._start,
                     "pid": os.getpid(), "host": socket.gethostname(), "config": config, "model": facts,
                     **extra})

    def chunk(self, record: dict[str, Any]) -> None:
        record = {"type": "chunk", **record}
        self._write(record)
        self.summary.add(record)   # after the line is in the file: the summary counts what the log holds

    def close(self, status: str, **extra: Any) -> None:
        """Write the summary line (status: done | interrupted | failed) and close; idempotent. The file
        is closed whatever happens; the summary's write error is the one raised."""
        if self.closed:
            return
        self.closed = True
        try:
            self._write({"type": "summary", "status": status, "wall_s": time.time() - self._start,
                         **self.summary.as_record(), **extra})
        finally:
            try:
                self._file.close()
            except OSError:
                pass   # the bytes were written unbuffered: closing has nothing left to report


# The fields readers (``worldpager tail``, the summary) use, by record type: each may be absent, but when
# present it has this form. "number": an int or float within the float range; "mapping": a JSON object;
# a tuple: a mapping whose listed keys, when present, are numbers.
_FIELDS: dict[str, dict[str, Any]] = {
    "header": {"config": "mapping", "model": "mapping", "pid": "pid", "started": "number"},
    "chunk": {name: "number" for name in (
        "chunk", "frames", "frames_total", "wall_ms", "compute_ms", "memory_ms", "store_ms", "decode_ms",
        "stall_ms", "memory_copy_ms", "put_wait_ms", "hits", "misses", "stale", "rerotated", "disk_bytes_read",
        "disk_bytes_written", "corrupt_blocks", "pool_used_bytes", "pool_free_bytes", "writeback_queue",
        "rss_bytes", "device_bytes", "disk_alloc_bytes", "spill_max_bytes", "dropped_chunks",
        "kv_bytes_to_device", "kv_device_bytes")},
    "summary": {"chunks": "number", "frames": "number", "wall_s": "number", "corrupt_blocks": "number",
                "stall_ms": ("p50", "p99", "max"), "wall_ms": ("p50", "p99"), "rss_bytes": ("min", "max"),
                "retrieval": ("hits", "misses", "stale"),
                "quota": ("quota_bytes", "dropped", "dropped_redundant", "dropped_cold", "disk_alloc_bytes",
                          "early_releases")},
    "drop": {"chunk": "number", "kept": "number"},
}


def _is_number(value: Any) -> bool:
    if isinstance(value, float) or isinstance(value, bool):
        return True
    if not isinstance(value, int):
        return False
    try:
        float(value)
    except OverflowError:   # JSON integers are unbounded; readers do float arithmetic on them
        return False
    return True


def check_record(record: Any) -> str | None:
    """Why a parsed line is not a usable log record (None when it is one)."""
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        return "not a session log record (no \"type\")"
    for name, form in _FIELDS.get(record["type"], {}).items():
        if name not in record:
            continue
        value = record[name]
        if form == "number" and not _is_number(value):
            return f"{name!r} is not a number ({_show(value)})"
        if form == "mapping" and not isinstance(value, dict):
            return f"{name!r} is not a mapping ({_show(value)})"
        if form == "pid" and not (isinstance(value, int) and 0 < value < 2 ** 31):
            return f"{name!r} is not a process id ({_show(value)})"
        if isinstance(form, tuple):
            if not isinstance(value, dict):
                return f"{name!r} is not a mapping ({_show(value)})"
            bad = next((k for k in form if k in value and not _is_number(value[k])), None)
            if bad is not None:
                return f"{name}.{bad!r} is not a number ({_show(value[bad])})"
    return _check_text(record)


def _check_text(record: dict) -> str | None:
    """Every string is Unicode text (JSON can escape half a surrogate pair, which no output can print)."""
    stack: list[Any] = [record]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"a string is not valid Unicode ({_show(value)})"
    return None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def line_problem(line: bytes) -> tuple[Any, str | None]:
    """``(value, None)`` for one whole log line read through the bounded JSON reader, or ``(None, why)``:
    not text, not valid JSON, too long or nested too deeply."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not text"
    try:
        return parse_json(line, "the line", MAX_LINE_BYTES + 2), None
    except JsonInputError as exc:
        why = str(exc).removeprefix("the line ").removeprefix("is ")
        return None, f"not valid JSON ({why[len('not JSON: '):]})" if why.startswith("not JSON: ") else why


def read_log(path: Path) -> list[dict[str, Any]]:
    """All complete records of a log: a trailing partial line (cut mid-line) is ignored, and the NUL
    bytes of a log truncated while written are skipped; a damaged whole line is a ``ValueError``. A path
    that is no regular file (a FIFO, a directory, a file under /proc) is an ``InputError``, never a wait."""
    records = []
    with open_input(path, "log", fix=LOG_FIX) as f:
        number = 0
        while line := f.readline(MAX_LINE_BYTES + 2):
            number += 1
            line = line.lstrip(b"\0")
            if not (line.endswith(b"\n") and line.strip()):
                if len(line) > MAX_LINE_BYTES:
                    raise ValueError(f"{shown(path)} line {number} is longer than {MAX_LINE_BYTES:,} bytes")
                continue
            record, problem = line_problem(line)
            if problem is None and not isinstance(record, dict):
                problem = "not a session log record (no \"type\")"
            if problem is not None:
                raise ValueError(f"{shown(path)} line {number} is damaged: {problem}")
            records.append(record)
    return records


class LogFollower:
    """Records of a session log as they are appended; ``ended`` says why the reading stopped:
    ``summary`` (the session finished, whatever its status), ``eof`` (not following), ``idle`` (no new
    byte for the idle timeout) or ``writer-gone`` (the writing process has exited without a summary).

    A partial last line is held back until its newline arrives; at the end it is dropped and
    ``cut_at`` names its line (a log cut mid-line: read up to the last whole record).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.ended: str | None = None
        self.lines = 0
        self.writer: dict | None = None     # the header's pid, host and start time
        self.cut_at: int | None = None      # the line the log ends inside (cut mid-line), once ended
        _check_log_file(self.path)

    def records(self, follow: bool = True, poll_s: float = 0.2,
                idle_timeout_s: float | None = None) -> Iterator[dict[str, Any]]:
        with open_input(self.path, "log", fix=LOG_FIX) as f:
            pending, idle, last_look = b"", 0.0, False
            while True:
                data = f.readline(MAX_LINE_BYTES + 2)
                if data:
                    pending, idle, last_look = pending + data, 0.0, False
                    if not pending.endswith(b"\n"):
                        if len(pending.lstrip(b"\0")) > MAX_LINE_BYTES:
                            raise InputError(f"{shown(self.path)} line {self.lines + 1} is damaged: longer than "
                                             f"{MAX_LINE_BYTES:,} bytes")
                        continue
                    # NUL bytes: a log truncated while its writer went on (a hole up to the writer's offset)
                    line, pending = pending.lstrip(b"\0"), b""
                    if line == b"\n":
                        continue
                    record = self._parse(line)
                    yield record
                    if record["type"] == "summary":
                        self.ended = "summary"
                        return
                    continue
                self.ended = self._stop_reason(follow, idle, idle_timeout_s)
                if self.ended == "writer-gone" and not last_look:
                    last_look, self.ended = True, None   # read once more: its last line may have just landed
                    continue
                if self.ended is not None:
                    self._check_partial(pending)
                    return
                time.sleep(poll_s)
                idle += poll_s

    def _stop_reason(self, follow: bool, idle: float, idle_timeout_s: float | None) -> str | None:
        if not follow:
            return "eof"
        if idle_timeout_s is not None and idle >= idle_timeout_s:
            return "idle"
        return "writer-gone" if self.writer_gone() else None

    def _check_partial(self, pending: bytes) -> None:
        """A file that ends before its first line does is no session log unless that line could be
        one still being written (JSON text)."""
        line = pending.lstrip(b"\0")
        if line and self.lines:
            self.cut_at = self.lines + 1
        if self.lines or not line:
            return
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or "\0" in text or not text.isprintable():
            raise InputError(f"{self.path} is not a session log: line 1 is not text "
                             "(give the .log.jsonl beside the MP4)")

    def _parse(self, line: bytes) -> dict[str, Any]:
        self.lines += 1
        where = f"{shown(self.path)} line {self.lines}"
        record, problem = line_problem(line)
        if problem == "not text":
            raise InputError(f"{where} is not text: not a session log (give the .log.jsonl beside the MP4)")
        if problem is not None:
            raise InputError(f"{where} is damaged: {problem}")
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise InputError(f"{where} is not a session log record (no \"type\")")
        problem = check_record(record)
        if problem is not None:
            raise InputError(f"{where} is damaged: {problem}")
        if record["type"] in ("header", "resume", "fork"):   # a resumed run or a branch writes on from another process
            self.writer = {k: record.get(k) for k in ("pid", "host", "started")}
        return record

    def writer_gone(self) -> bool:
        """True when the header names a process on this host that no longer runs, or — no header yet (a
        session killed while loading leaves an empty log) — no process holds the log open for writing
        (False if unknown)."""
        w = self.writer
        if w is None and self.lines == 0:
            return held_for_writing(self.path) is False
        if not w or not isinstance(w.get("pid"), int) or w.get("host") != socket.gethostname():
            return False
        try:
            proc = psutil.Process(w["pid"])
            reused = isinstance(w.get("started"), (int, float)) and proc.create_time() > w["started"] + 1
            return reused or proc.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
        except psutil.AccessDenied:
            return False


def held_for_writing(path: Path) -> bool | None:
    """Whether a process of the file's owner holds ``path`` open for writing (Linux ``/proc``); None when
    that cannot be told (no ``/proc``, or the owner's processes cannot be looked into)."""
    proc = Path("/proc")
    try:
        target = os.stat(path)
        pids = [e.name for e in os.scandir(proc) if e.name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            if os.stat(proc / pid).st_uid != target.st_uid:
                continue
            fds = os.listdir(proc / pid / "fd")
        except FileNotFoundError:
            continue   # it exited meanwhile
        except PermissionError:
            return None
        for fd in fds:
            try:
                st = os.stat(proc / pid / "fd" / fd)
                if (st.st_dev, st.st_ino) != (target.st_dev, target.st_ino):
                    continue
                flags = (proc / pid / "fdinfo" / fd).read_text().split("flags:")[1].split()[0]
            except (OSError, IndexError):
                continue
            if int(flags, 8) & os.O_ACCMODE != os.O_RDONLY:
                return True
    return False


def _first_byte(f) -> bytes:
    """The first byte after any NUL bytes (a log truncated while written starts with a hole)."""
    while True:
        block = f.read(1 << 16)
        rest = block.lstrip(b"\0")
        if rest or not block:
            return rest[:1]


def _check_log_file(path: Path) -> None:
    """A one-line InputError unless ``path`` is a regular file that starts like a session log."""
    if not os.path.lexists(path):
        raise InputError(f"log not found: {shown(path)} (a session writes NAME.log.jsonl beside its MP4 when it "
                         "starts)")
    with open_input(path, "log", fix=LOG_FIX) as f:
        try:
            first = _first_byte(f)
        except OSError as exc:
            raise InputError(f"cannot read log {shown(path)}: {exc.strerror or exc}") from None
    if first not in (b"", b"{"):
        raise InputError(f"{path} is not a session log: line 1 is not a JSON record "
                         "(give the .log.jsonl beside the MP4)")


def follow_log(path: Path, follow: bool = True, poll_s: float = 0.2,
               idle_timeout_s: float | None = None) -> Iterator[dict[str, Any]]:
    """The records of ``LogFollower(path)`` (which also tells why the reading stopped)."""
    return LogFollower(path).records(follow, poll_s, idle_timeout_s)
