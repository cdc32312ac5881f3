"""Naming overlaid logs from their configs: "prefetch int4" against "on-demand int4".

Owns one rule: a log's label is the config settings in which the logs differ, in a fixed order of
importance (model, store, KV format, pool, drive, ...), each written the way users say it; one log on
its own is named by its model, store and KV format. Settings that name files (out, log) never count;
logs that differ in nothing else are told apart by their file names.
"""
from __future__ import annotations

from engine.report.read import SessionRecords

IGNORED = {"out", "log", "image", "checkpoint", "arena_weights", "spill", "save_every", "save_interval_s", "keep_savepoints"}
ORDER = ("model", "memory.store", "memory.kv_bits", "memory.retrieve_k", "memory.pool_slots",
         "memory.host_mem_gib", "memory.drive_bw", "memory.writeback", "memory.sink", "positions")
LONE = ("model", "memory.store", "memory.kv_bits")


def flat_config(session: SessionRecords) -> dict[str, object]:
    """The header's config as dotted keys (the model's name from the model facts when they have it)."""
    flat: dict[str, object] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}{key}.", inner)
        else:
            flat[prefix[:-1]] = value
    walk("", session.config)
    return flat


def _phrase(key: str, value: object, session: SessionRecords) -> str:
    name = key.rsplit(".", 1)[-1]
    if key == "memory.kv_bits":
        if value == 16:
            return "bf16" if session.header.get("dtype") == "bfloat16" else "unquantised"
        return f"int{value}"
    if key in ("model", "memory.store", "positions"):
        return str(value)
    if key == "memory.writeback":
        return f"write-back {value}"
    if key == "memory.drive_bw":
        return "real drive" if value is None else f"drive {value} GB/s"
    if key == "memory.sink":
        return "sink" if value else "no sink"
    return f"{name.replace('_', '-')} {value}"


def session_labels(sessions: list[SessionRecords]) -> list[str]:
    """One distinct label per session, in the given order."""
    flats = [flat_config(s) for s in sessions]
    if len(sessions) == 1:
        keys = [k for k in LONE if k in flats[0]]
    else:
        keys = sorted({k for f in flats for k in f if k.rsplit(".", 1)[-1] not in IGNORED and _differs(flats, k)},
                      key=lambda k: (ORDER.index(k) if k in ORDER else len(ORDER), k))
    labels = [" ".join(_phrase(k, f.get(k), s) for k in keys if k in f) for f, s in zip(flats, sessions)]
    if len(set(labels)) < len(labels) or not all(labels):
        labels = [f"{label} ({s.path.name})".strip() for label, s in zip(labels, sessions)]
    return labels


def _differs(flats: list[dict], key: str) -> bool:
    return len({repr(f.get(key)) for f in flats}) > 1
