"""Reading a session log for a report: everything up to where it is cut.

Owns the difference between a log that is not ours (a one-line ``InputError``: missing, not a regular
file — a FIFO, a directory, a file under /proc: refused before it is opened —, not text, or a first line that is not a session header), a log that is ours but cut short — a last
line cut mid-line (the session is writing it, was killed while writing it, or the file was copied or
truncated there), or no summary yet — and a damaged log. A cut log is read up to its last whole
record and carries a ``note`` saying where and why, so the report plots what there is and says so. A
damaged line with whole lines after it was not cut but changed (the writer only appends whole lines):
a one-line ``InputError`` naming the line, as ``tail`` says it. A log cut inside its first line holds
no record to plot: a one-line ``InputError`` saying so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import os

from engine.errors import InputError
from engine.files.input_files import read_input_bytes, shown
from engine.runtime.telemetry import LOG_FIX, check_record, line_problem

MAX_LOG_BYTES = 4 << 30   # read whole into memory: a week-long session's log is well under this

NOT_OURS = "is not a session log"
PARTIAL = "a partial line"


@dataclass
class SessionRecords:
    """One log's records by kind; ``notes`` say what is missing or cut."""

    path: Path
    header: dict
    chunks: list[dict] = field(default_factory=list)
    summary: dict | None = None
    events: list[dict] = field(default_factory=list)   # save points, resumes, forks, notes
    notes: list[str] = field(default_factory=list)

    @property
    def config(self) -> dict:
        return self.header.get("config", {})


def read_session(path: Path) -> SessionRecords:
    """The records of the log at ``path``, up to its last whole record."""
    path = Path(path)
    lines = _lines(path)
    header = _header(path, lines)
    session = SessionRecords(path, header)
    for number, raw in enumerate(lines[1:], start=2):
        record, problem = _parse(raw)
        if problem == PARTIAL:
            session.notes.append(f"{path.name} is cut at line {number} (it ends in a partial line: the session "
                                 f"is writing it or was killed mid-line): plotted up to line {number - 1}")
            break
        if problem is not None:
            raise InputError(f"{shown(path)} line {number} is damaged: {problem}; a whole line that is not a record "
                             "is not a cut (the file was changed after it was written)")
        _add(session, record)
    if session.summary is None and not session.notes:
        session.notes.append(f"{path.name} has no summary line: the session is running or did not finish")
    return session


def _lines(path: Path) -> list[bytes]:
    if not os.path.lexists(path):
        raise InputError(f"log not found: {shown(path)} (a session writes NAME.log.jsonl beside its MP4)")
    data = read_input_bytes(path, "log", MAX_LOG_BYTES, fix=LOG_FIX)   # a FIFO or /proc file: refused, not waited on
    *complete, last = data.split(b"\n")   # ``last`` is b"" when the last line is complete
    # A log truncated while its writer went on holds a run of NUL bytes where the writer's offset was:
    # skipped, so that the records after it are read.
    lines = [line for line in (raw.lstrip(b"\0") for raw in complete) if line]
    last = last.lstrip(b"\0")
    if last:
        lines.append(last + b"\0")  # a partial last line: never a complete record
    return lines


def _header(path: Path, lines: list[bytes]) -> dict:
    if not lines:
        raise InputError(f"{shown(path)} is empty: no session header yet (is the session still loading?)")
    record, problem = _parse(lines[0])
    if problem == PARTIAL and _starts_like_a_header(lines[0][:-1]):
        raise InputError(f"{shown(path)} is cut inside its first line, the session's header: no record to plot yet "
                         "(the session is starting, or the log was cut while its header was written)")
    if problem is not None or record.get("type") != "header":
        why = problem or f"its first record is a {record.get('type')!r}, not a header"
        raise InputError(f"{shown(path)} {NOT_OURS}: line 1 {why} (give the .log.jsonl beside the MP4)")
    return record


def _starts_like_a_header(partial: bytes) -> bool:
    """Whether a cut first line is the beginning of a header as the session's log writes it."""
    start = b'{"type":"header"'
    return partial.startswith(start) or start.startswith(partial)


def _parse(raw: bytes) -> tuple[dict, str | None]:
    if raw.endswith(b"\0"):
        return {}, PARTIAL
    record, problem = line_problem(raw)
    if problem is not None:
        return {}, problem
    problem = check_record(record)
    return (record, None) if problem is None else ({}, problem)


def _add(session: SessionRecords, record: dict) -> None:
    kind = record["type"]
    if kind == "chunk":
        session.chunks.append(record)
    elif kind == "summary":
        session.summary = record
    elif kind != "header":
        session.events.append(record)
