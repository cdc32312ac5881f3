"""The summary table of a report: one row per figure, one column per session.

Owns which summary figures are shown and how they are written. A finished log's figures come from its
summary line; a log with none (running, killed, cut) is summarised from the chunk records it has, with
the status ``unfinished``.
"""
from __future__ import annotations

from engine.report.read import SessionRecords
from engine.runtime.telemetry import RunningSummary

MiB, GiB = 1 << 20, 1 << 30


def session_summary(session: SessionRecords) -> dict:
    if session.summary is not None:
        return session.summary
    running = RunningSummary()
    for record in session.chunks:
        running.add(record)
    return {"status": "unfinished", **running.as_record(),
            "disk": {"bytes_read": sum(r.get("disk_bytes_read", 0) for r in session.chunks),
                     "bytes_written": sum(r.get("disk_bytes_written", 0) for r in session.chunks)},
            "corrupt_blocks": sum(r.get("corrupt_blocks", 0) for r in session.chunks)}


def _get(record: dict, *keys: str):
    for key in keys:
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "–"
    if unit == "MiB":
        return f"{value / MiB:,.1f} MiB"
    if unit == "GiB":
        return f"{value / GiB:.3f} GiB"
    if isinstance(value, float):
        return f"{value:,.1f}" + (f" {unit}" if unit else "")
    return f"{value}" + (f" {unit}" if unit else "")


ROWS = (  # (row name, where in the summary, unit)
    ("status", ("status",), ""), ("chunks", ("chunks",), ""), ("frames", ("frames",), ""),
    ("wall time", ("wall_s",), "s"),
    ("stall P50", ("stall_ms", "p50"), "ms"), ("stall P99", ("stall_ms", "p99"), "ms"),
    ("stall max", ("stall_ms", "max"), "ms"),
    ("chunk P50", ("wall_ms", "p50"), "ms"), ("chunk P99", ("wall_ms", "p99"), "ms"),
    ("RSS min", ("rss_bytes", "min"), "GiB"), ("RSS max", ("rss_bytes", "max"), "GiB"),
    ("hits", ("retrieval", "hits"), ""), ("misses", ("retrieval", "misses"), ""),
    ("stale", ("retrieval", "stale"), ""),
    ("drive read", ("disk", "bytes_read"), "MiB"), ("drive written", ("disk", "bytes_written"), "MiB"),
    ("drive I/O", ("disk", "io_mode"), ""), ("corrupt blocks", ("corrupt_blocks",), ""),
    ("host pool", ("pool_bytes",), "MiB"),
    ("spill quota", ("quota", "quota_bytes"), "MiB"), ("spill at end", ("quota", "disk_alloc_bytes"), "MiB"),
    ("chunks dropped", ("quota", "dropped"), ""), ("first choice kept", ("quota", "first_choice_rate"), ""),
)


def summary_rows(sessions: list[SessionRecords]) -> list[tuple[str, list[str]]]:
    """(row name, one cell per session): the model and device first, then the summary's figures."""
    summaries = [session_summary(s) for s in sessions]
    rows = [("model", [str(s.config.get("model", "?")) for s in sessions]),
            ("device", [f"{s.header.get('device', '?')} {s.header.get('dtype', '')}".strip() for s in sessions]),
            ("store", [str(_get(s.config, "memory", "store")) for s in sessions]),
            ("KV bits", [str(_get(s.config, "memory", "kv_bits")) for s in sessions]),
            ("weights", [weights_cell(s) for s in sessions])]
    rows += [(name, [_fmt(_get(summary, *where), unit) for summary in summaries]) for name, where, unit in ROWS]
    return rows + kv_paging_rows(sessions)


def weights_cell(session: SessionRecords) -> str:
    """The DiT's weights: format, resident/all blocks, device bytes, and the bytes streamed in all
    (``weight_plan`` of the header, ``weight_bytes_streamed`` of the chunks); "–" for a log without them."""
    plan = session.header.get("weight_plan") if isinstance(session.header, dict) else None
    if not isinstance(plan, dict):
        return "–"
    streamed = sum(r.get("weight_bytes_streamed", 0) for r in session.chunks
                   if isinstance(r.get("weight_bytes_streamed", 0), (int, float)))
    return (f"{plan.get('format', '?')}, {plan.get('resident_blocks', '?')}/{plan.get('blocks', '?')} blocks resident, "
            f"{_fmt(plan.get('device_weight_bytes'), 'MiB')} on the device, {_fmt(streamed, 'MiB')} streamed")


def kv_paging_rows(sessions: list[SessionRecords]) -> list[tuple[str, list[str]]]:
    """``--kv-paging``: one row, when a session paged per layer: the mode, the context K/V copied to the
    device over the run (all layers) and the most the device held (the chunk records' ``kv_*`` fields)."""
    def paging(s) -> str:
        return str(_get(s.config, "memory", "kv_paging") or "chunk")

    def total(s, key, fold):
        values = [r[key] for r in s.chunks if isinstance(r.get(key), (int, float))]
        return fold(values) if values else None
    if all(paging(s) == "chunk" for s in sessions):
        return []
    return [("KV paging", [f"{paging(s)}: {_fmt(total(s, 'kv_bytes_to_device', sum), 'MiB')} to the device, "
                           f"{_fmt(total(s, 'kv_device_bytes', max), 'MiB')} held" for s in sessions])]
