"""The report's views: session records in, one ``engine.report.plots.Figure`` per view out.

Owns which series each view shows and in what unit. Every view overlays the sessions on the same
axes (labelled by ``labels``), except the chunk-time breakdown, whose stacked parts need one panel
per session (the panels share their scale). Chunk records lacking a field (a store mode with no pool,
no disk) are left out of that series and the panel says so.

Every panel whose sessions have nothing to show (no series, or every value 0) says so across its
axes (``Panel.empty_text``: "no stalls (40 chunks)", "no disk tier", "no retrievals"), so an empty plot
never looks like a broken one. The figures are drawn for a page that heads each one with its title
(``draw_title=False``): 10 inches wide at 100 dpi, text larger than the plotting default.

Views: ``stall`` (stall per chunk, P50 and P99 of each session marked), ``chunk_time`` (memory /
denoise / store / decode per chunk), ``host_rss`` (RSS over chunks, the ``--host-mem`` budget and the
RSS the pool was sized from), ``pool`` (pool bytes in use, its capacity), ``writeback`` (write-back
queue depth), ``drive`` (bytes read and written, cumulative), ``retrieval`` (hits, misses, stale and
corrupt blocks, cumulative).
"""
from __future__ import annotations

from itertools import accumulate

from engine.report.plots import Figure, Panel, RefLine, Series
from engine.report.read import SessionRecords
from engine.runtime.telemetry import percentile

MiB, GiB = float(1 << 20), float(1 << 30)
CHUNK_PARTS = (("memory_ms", "memory"), ("compute_ms", "denoise"), ("store_ms", "store"), ("decode_ms", "decode"))
VIEW_TITLES = {
    "stall": "Stall per chunk (time the loop waited on memory)",
    "chunk_time": "Chunk time by step",
    "host_rss": "Host memory (process RSS) over chunks",
    "pool": "Host pool in use",
    "writeback": "Write-back queue",
    "drive": "Drive traffic (spill directory)",
    "retrieval": "Retrieval: hits, misses, stale; corrupt disk blocks",
    "disk_use": "Disk use of the spill directory against its quota (--spill-max)",
}


def _series(label: str, chunks: list[dict], key: str, scale: float = 1.0, cumulative: bool = False) -> Series:
    rows = [r for r in chunks if key in r and "chunk" in r]
    y = [r[key] / scale for r in rows]
    return Series(label, [r["chunk"] for r in rows], list(accumulate(y)) if cumulative else y)


def _note(series: list[Series], what: str) -> str:
    missing = [s.label for s in series if not s.y]
    return f"no {what} in: {', '.join(missing)}" if missing else ""


def _empty_text(sessions, series: list[Series], none: str, zero: str) -> str:
    """What an empty panel says: ``none`` when no session logs the field, else ``zero`` and the chunks
    (a ``zero`` that already explains itself in brackets is said as it is)."""
    if not any(s.y for s in series):
        return none
    if "(" in zero:
        return zero
    chunks = max(len(s.chunks) for s in sessions)
    return f"{zero} ({chunks} chunk{'s' if chunks != 1 else ''})"


def _overlay(sessions, labels, key, title, ylabel, *, scale=1.0, cumulative=False, kind="line",
             refs=(), what="", none="", zero="") -> Panel:
    series = [_series(lab, s.chunks, key, scale, cumulative) for s, lab in zip(sessions, labels)]
    empty = _empty_text(sessions, series, none or f"no {what or key}", zero or f"no {what or key}")
    return Panel(title, tuple(series), "chunk", ylabel, kind, tuple(refs), _note(series, what or key),
                 empty_text=empty)


def stall_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    refs = []
    for s, label in zip(sessions, labels):
        stalls = [r["stall_ms"] for r in s.chunks if "stall_ms" in r]
        refs += [RefLine(percentile(stalls, 50), _of("P50", label, labels), "dashed", label),
                 RefLine(percentile(stalls, 99), _of("P99", label, labels), "dotted", label)]
    return [_overlay(sessions, labels, "stall_ms", "stall", "ms", refs=refs, what="stall", zero="no stalls")]


def chunk_time_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    panels = []
    for s, label in zip(sessions, labels):
        rows = [r for r in s.chunks if "chunk" in r]
        parts = tuple(Series(name, [r["chunk"] for r in rows], [float(r.get(key, 0.0)) for r in rows])
                      for key, name in CHUNK_PARTS)
        wall = [r.get("wall_ms", 0.0) for r in rows]
        refs = (RefLine(percentile(wall, 50), "P50 of the whole chunk", "dashed"),)
        panels.append(Panel(label, parts, "chunk", "ms", "stacked", refs, empty_text="no chunks yet"))
    return panels


def _of(text: str, label: str, labels: list[str]) -> str:
    """A reference line's legend entry, naming its session when there are several."""
    return f"{text}, {label}" if len(labels) > 1 else text


def host_rss_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    refs = []
    for s, label in zip(sessions, labels):
        budget = s.config.get("memory", {}).get("host_mem_gib")
        if isinstance(budget, (int, float)):
            refs.append(RefLine(budget * GiB / MiB, _of(f"budget (--host-mem {budget:g} GiB)", label, labels),
                                "solid", label))
        base = s.header.get("host_baseline_bytes")
        if isinstance(base, (int, float)):
            refs.append(RefLine(base / MiB, _of("RSS before the pool", label, labels), "dotted", label))
    panel = _overlay(sessions, labels, "rss_bytes", "process RSS", "MiB", scale=MiB, refs=refs, what="RSS")
    note = panel.note or ("" if any(r.label.startswith("budget") for r in refs)
                          else "no --host-mem budget: the pool was sized from the memory available")
    return [Panel(panel.title, panel.series, panel.xlabel, panel.ylabel, panel.kind, panel.refs, note,
                  from_zero=False, empty_text="no RSS logged")]


def pool_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    refs = []
    for s, label in zip(sessions, labels):
        last = next((r for r in reversed(s.chunks) if "pool_used_bytes" in r and "pool_free_bytes" in r), None)
        if last is not None:
            refs.append(RefLine((last["pool_used_bytes"] + last["pool_free_bytes"]) / MiB,
                                _of("capacity", label, labels), "dashed", label))
    return [_overlay(sessions, labels, "pool_used_bytes", "pool used", "MiB", scale=MiB, kind="step", refs=refs,
                     what="host pool", zero="host pool empty")]


def _disk_zero(sessions: list[SessionRecords], zero: str) -> str:
    """An empty disk panel of sessions none of which had a spill directory says that, not only "0"."""
    spilled = any(s.config.get("memory", {}).get("spill") for s in sessions)
    return zero if spilled else "no disk tier (no --spill)"


def writeback_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    return [_overlay(sessions, labels, "writeback_queue", "write-back queue", "blocks waiting", kind="step",
                     what="write-back", none="no disk tier",
                     zero=_disk_zero(sessions, "no write-back waiting"))]


def drive_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    return [_overlay(sessions, labels, key, title, "MiB, cumulative", scale=MiB, cumulative=True, what="disk tier",
                     zero=_disk_zero(sessions, zero))
            for key, title, zero in (("disk_bytes_read", "read from the drive", "nothing read from the drive"),
                                     ("disk_bytes_written", "written to the drive", "nothing written to the drive"))]


def retrieval_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    return [_overlay(sessions, labels, key, title, "count, cumulative", cumulative=True, kind="step",
                     what="retrieval", none="no retrievals", zero=zero)
            for key, title, zero in (("hits", "hits", "no hits"), ("misses", "misses", "no misses"),
                                     ("stale", "stale", "nothing stale"),
                                     ("corrupt_blocks", "corrupt disk blocks", "no corrupt disk blocks"))]


def disk_use_view(sessions: list[SessionRecords], labels: list[str]) -> list[Panel]:
    """The spill directory's allocated bytes (block file + index; logged under ``--spill-max``) and the quota."""
    refs = []
    for s, label in zip(sessions, labels):
        quota = next((r["spill_max_bytes"] for r in reversed(s.chunks) if "spill_max_bytes" in r), None)
        if quota is not None:
            refs.append(RefLine(quota / MiB, _of("quota", label, labels), "dashed", label))
    return [_overlay(sessions, labels, "disk_alloc_bytes", "spill directory", "MiB", scale=MiB, kind="step",
                     refs=refs, what="disk use (sessions with --spill-max)"),
            _overlay(sessions, labels, "dropped_chunks", "chunks dropped", "count", kind="step",
                     what="dropped chunks")]


VIEWS = {"stall": stall_view, "chunk_time": chunk_time_view, "host_rss": host_rss_view, "pool": pool_view,
         "writeback": writeback_view, "drive": drive_view, "retrieval": retrieval_view,
         "disk_use": disk_use_view}
COLUMNS = {"chunk_time": 1, "drive": 2, "retrieval": 2, "disk_use": 2}


def build_views(sessions: list[SessionRecords], labels: list[str], only: list[str] | None = None) -> dict[str, Figure]:
    """Every view of the sessions (or those in ``only``), by name; the notes of cut logs go under each title."""
    note = "; ".join(n for s in sessions for n in s.notes)
    return {name: Figure(VIEW_TITLES[name], tuple(view(sessions, labels)), note=note,
                         columns=COLUMNS.get(name, 1), dpi=100, draw_title=False, font_scale=1.25,
                         panel_size=(5.0, 3.2) if COLUMNS.get(name, 1) > 1 else (10.0, 4.0),
                         extra={"view": name, "labels": labels, "logs": [str(s.path) for s in sessions]})
            for name, view in VIEWS.items() if only is None or name in only}
