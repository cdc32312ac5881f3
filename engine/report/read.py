"""Reading a session log for a report: everything up to where it is cut.

Owns the difference between a log that is not ours (a one-line ``InputError``: missing, a directory,
not text, or a first line that is not a session header) and a log that is ours but cut short — a
killed run's partial last line, a damaged line, or no summary yet. A cut log is read up to the cut
and carries a ``note`` saying where and why, so the report plots what there is and says so.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import InputError
from engine.telemetry import check_record

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
    """The records of the log at ``path``, up to its first damaged or partial line."""
    path = Path(path)
    lines = _lines(path)
    header = _header(path, lines)
    session = SessionRecords(path, header)
    for number, raw in enumerate(lines[1:], start=2):
        record, problem = _parse(raw)
        if problem is not None:
            why = ("ends in a partial line: the session is running or was killed mid-line"
                   if problem == PARTIAL else problem)
            session.notes.append(f"{path.name} is cut at line {number} ({why}): plotted up to line {number - 1}")
            break
        _add(session, record)
    if session.summary is None and not session.notes:
        session.notes.append(f"{path.name} has no summary line: the session is running or did not finish")
    return session


def _lines(path: Path) -> list[bytes]:
    if not path.exists():
        raise InputError(f"log not found: {path} (a session writes NAME.log.jsonl beside its MP4)")
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a session log (give the .log.jsonl file)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read log {path}: {exc.strerror or exc}") from None
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
        raise InputError(f"{path} is empty: no session header yet (is the session still loading?)")
    record, problem = _parse(lines[0])
    if problem is not None or record.get("type") != "header":
        why = problem or f"its first record is a {record.get('type')!r}, not a header"
        raise InputError(f"{path} {NOT_OURS}: line 1 {why} (give the .log.jsonl beside the MP4)")
    return record


def _parse(raw: bytes) -> tuple[dict, str | None]:
    if raw.endswith(b"\0"):
        return {}, PARTIAL
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return {}, "not text"
    except json.JSONDecodeError as exc:
        return {}, f"not valid JSON: {exc.msg}"
    except RecursionError:
        return {}, "JSON nested too deeply"
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
