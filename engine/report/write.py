"""``write_report``: session logs in, a directory of figures and one HTML page out.

Owns the report's files: ``DIR/<view>.png`` for each view (``views.VIEWS``), ``DIR/report.html`` (the
first screen's three answers, the summary table and every figure embedded) and nothing else. Every log is read before anything is
written (a log that is not ours fails first); an output directory that cannot be made or written, or
that holds something other than a regular file at one of the report's names (a FIFO, a socket, a device,
a directory: ``engine.files.output_files``), is a one-line ``OutputError`` before anything is written. Each file is written beside its name and renamed over it, so a browser or an
image viewer refreshing during a live report never reads half a file.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InputError, OutputError
from engine.files.output_files import check_output_dir
from engine.report.plots import png_bytes, shown_empty
from engine.report.answers import session_answers
from engine.report.labels import session_labels
from engine.report.page import render_page
from engine.report.read import SessionRecords, read_session
from engine.report.summary import summary_rows
from engine.report.views import VIEW_TITLES, VIEWS, build_views

PAGE = "report.html"


@dataclass(frozen=True)
class Report:
    out: Path
    figures: dict[str, Path]      # view name -> PNG
    page: Path
    labels: list[str]
    notes: list[str]
    chunks: list[int]             # chunk records plotted, per log


def write_report(logs: list[Path], out: Path, title: str | None = None, views: list[str] | None = None) -> Report:
    """Read ``logs`` (overlaid in this order) and write their report into ``out`` (every view, or ``views``)."""
    if not logs:
        raise InputError("give at least one session log (NAME.log.jsonl)")
    unknown = sorted(set(views or ()) - set(VIEWS))
    if unknown:
        raise InputError(f"unknown view {unknown[0]!r} (choose from {', '.join(VIEWS)})")
    sessions = [read_session(Path(p)) for p in logs]
    return write_sessions(sessions, Path(out), title, views)


def write_sessions(sessions: list[SessionRecords], out: Path, title: str | None = None,
                   views: list[str] | None = None) -> Report:
    prepare_out(out)
    labels = session_labels(sessions)
    notes = [n for s in sessions for n in s.notes]
    figures, embedded = {}, []
    for name, figure in build_views(sessions, labels, views).items():
        png = png_bytes(figure)
        figures[name] = _replace(out / f"{name}.png", png)
        empty = list(dict.fromkeys(p.empty_text for p in figure.panels if shown_empty(p)))
        embedded.append((name, VIEW_TITLES[name], png, empty))
    title = title or "WorldPager session report: " + " vs ".join(labels)
    html = render_page(title, labels, notes, summary_rows(sessions), embedded,
                       [session_answers(s) for s in sessions])
    page = _replace(out / PAGE, html.encode("utf-8"))
    return Report(out, figures, page, labels, notes, [len(s.chunks) for s in sessions])


def report_files() -> tuple[str, ...]:
    """The names the report writes in its directory, with the temporary names they are written under."""
    names = (PAGE, *(f"{view}.png" for view in VIEWS))
    return (*names, *(f".{name}.tmp" for name in names))


def prepare_out(out: Path) -> None:
    """``out`` exists as a writable directory afterwards, or a one-line OutputError says why not."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a directory: choose a directory for the report")
    check_output_dir(out, "--out", report_files(), fix="choose another --out for the report")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".probe-"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write the report into --out {out}: {exc.strerror or exc}; "
                          "choose a writable directory") from None


def _replace(path: Path, data: bytes) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
