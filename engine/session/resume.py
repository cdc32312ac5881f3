"""Resuming a generation session from its save points: ``worldpager resume OUT.mp4``.

Owns finding what a resumed run needs beside the MP4: the resolved config written at the start
(``<out>.config.json``), the newest intact save point in ``<out>.save/`` (a damaged newest one falls
back to the one before, with a note), and the checks that they belong together (the config digest the
save point recorded; a finished log is not resumed). The session does the rest (``Session(...,
resume_from=...)``): the MP4 is cut back to the save point's frames and continued, the log keeps its
records before the save point and goes on after a ``resume`` record, the memory reopens its spill
directory.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.config import SessionConfig
from engine.errors import InputError
from engine.overlay import resolve_session_config
from engine.memory.disk import INDEX_NAME, index_document
from engine.memory.types import SpillIndexError
from engine.session.savepoint import SavePoint, latest_savepoint, savepoint_name
from engine.session.save import config_digest, savepoint_dir
from engine.telemetry import read_log


def run_config(out: Path, doing: str = "resume") -> SessionConfig:
    """The resolved config of the run that writes ``out`` (``doing``: what the errors say cannot be done)."""
    path = Path(out).with_suffix(".config.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"cannot {doing} {out}: its config {path} is missing (was it made by worldpager generate?)") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot {doing} {out}: unreadable config {path} ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"cannot {doing} {out}: {path} is not a config")
    data["out"] = str(out)
    return resolve_session_config(None, data)


def finished(cfg: SessionConfig) -> bool:
    try:
        records = read_log(cfg.log_path)
    except (OSError, ValueError):
        return False
    return any(r.get("type") == "summary" and r.get("status") == "done" for r in records[-1:])


def resume_point(out: Path) -> tuple[SessionConfig, SavePoint, list[str]]:
    """Config, newest intact save point and notes on skipped ones, for resuming ``out``."""
    cfg = run_config(out)
    if finished(cfg):
        raise InputError(f"cannot resume {out}: the run finished (its log {cfg.log_path} ends with status done)")
    directory = savepoint_dir(out)
    sp, notes = latest_savepoint(directory)
    if sp is None:
        raise InputError(f"cannot resume {out}: no save point in {directory}"
                         + (f" ({'; '.join(notes)})" if notes else " (the run stopped before its first one)"))
    if sp.facts.get("config_digest") != config_digest(cfg):
        raise InputError(f"cannot resume {out}: save point {sp.chunk} was made with another config than {out.with_suffix('.config.json')}")
    check_spill_index(cfg, out, directory / savepoint_name(sp.chunk))
    return cfg, sp, notes


def check_spill_index(cfg: SessionConfig, out: Path, savepoint: Path) -> None:
    """The spill directory's index must be an index before anything is cut (a damaged block entry is
    only a miss, found when the memory opens)."""
    if cfg.memory.spill is None or cfg.memory.store in ("window", "dram-only", "device-only"):
        return
    try:
        index_document(Path(cfg.memory.spill) / INDEX_NAME)
    except SpillIndexError as exc:
        raise InputError(f"cannot resume {out} from save point {savepoint}: {exc}; nothing was changed "
                         "(restore the index from a backup, or generate again)") from None
