"""What a batch may replace: only what its own manifest says one of its jobs made.

Owns the record the manifest keeps of what a job made (its entry's ``made``) and the check a worker
makes, holding the job's output lock, before it resumes a job or starts it over. A job's outputs are its
MP4, its log, its resolved config, its save points (``NAME.mp4.save/``) and, when its store keeps memory
on a drive, its spill directory.

The record, ``made``:

* ``runs`` — the run ids of the attempts whose writes the files hold. Every attempt gets a fresh random
  id, put in the manifest before the job is handed to a worker; the session writes it into its log
  (the header's ``batch`` field, or the ``resume`` record's when it resumes);
* ``files`` — when the last attempt ended: ``[size, mtime_ns]`` of the MP4, the log, the config, the
  save-point directory and the spill index (null: absent). Null while an attempt runs and after one
  was cut short (a killed batch, a lost worker): then the files themselves are read;
* ``spill`` — the job's spill directory as planned (null: none), so that jobs of one batch sharing a
  spill directory (one worker) vouch for each other's memory there.

A job's files may be replaced (a redo, a resume) without ``--overwrite`` only when:

* nothing is at its paths; or
* the last attempt's ``files`` are recorded and every path is exactly as it left it (size and mtime);
* or that attempt was cut short, and the log is this job's (its header and every ``resume`` record carry
  one of its ``runs``; no ``fork`` record), the MP4 starts with the header this job's writer writes and
  holds at most two chunks more than the log records (muxed, not yet logged: the chunk in hand and,
  with ``decode_overlap``, the one before), and the config is the one the log's header holds.

Never started by this manifest (no ``runs``: a ``generate``, ``resume``, ``fork`` or ``play`` output,
another batch's, a user's file, or a job of a manifest that was deleted or replaced): anything at its
paths is refused. A spill directory that holds memory (an index) must be one whose index a job of this
manifest left as it is now, or one a cut-short job of this manifest used. The reason names the paths
and who made them, as far as their log tells.
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.files.bounded_json import read_json_file
from engine.config import SessionConfig
from engine.errors import InputError, OutputError
from engine.files.input_files import open_input, shown
from engine.session.preflight import TIERED_STORES
from engine.runtime.telemetry import read_log

FILE_KEYS = ("out", "log", "config", "save", "spill")
MAX_CONFIG_BYTES = 16 << 20   # a resolved config is a few KiB
MAX_RUNS = 64   # a job resumed more often than this keeps its newest runs (its header's is the first)


def new_run() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True)
class Made:
    """A job's ``made`` record (see the module docstring)."""

    runs: tuple[str, ...] = ()
    files: dict[str, list[int] | None] | None = field(default=None, hash=False)
    spill: str | None = None

    @classmethod
    def of(cls, entry: dict[str, Any] | None) -> "Made":
        made = (entry or {}).get("made") or {}
        return cls(tuple(made.get("runs", ())), made.get("files"), made.get("spill"))

    def as_json(self) -> dict[str, Any]:
        return {"runs": list(self.runs[-MAX_RUNS:]), "files": self.files, "spill": self.spill}


def made_problem(made: Any) -> str | None:
    """Why a manifest entry's ``made`` cannot be used (a phrase naming the field), or None."""
    if not isinstance(made, dict):
        return f"'made' is {json.dumps(made)[:40]}, not an object"
    runs, files, spill = made.get("runs", []), made.get("files"), made.get("spill")
    if not isinstance(runs, list) or not all(isinstance(r, str) and 0 < len(r) <= 64 for r in runs):
        return f"'made.runs' is {json.dumps(runs)[:40]}, not a list of run ids"
    if spill is not None and not isinstance(spill, str):
        return f"'made.spill' is {json.dumps(spill)[:40]}, not text or null"
    if files is None:
        return None
    if not isinstance(files, dict) or not set(files) <= set(FILE_KEYS):
        return f"'made.files' is {json.dumps(files)[:40]}, not an object of {', '.join(FILE_KEYS)}"
    for key, value in files.items():
        if value is not None and not (isinstance(value, list) and len(value) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
            return f"'made.files.{key}' is {json.dumps(value)[:40]}, not [size, mtime_ns] or null"
    return None


# ---- the paths and what is at them ---------------------------------------------------------------

def spill_key(cfg: SessionConfig) -> str | None:
    """The job's spill directory as planned (``$VARS`` unexpanded), or None when its store keeps no
    memory on a drive."""
    mem = cfg.memory
    if mem.spill is None or mem.store not in TIERED_STORES or mem.store == "dram-only":
        return None
    return str(mem.spill)


def _paths(cfg: SessionConfig) -> dict[str, Path]:
    """The job's outputs on this node (``cfg``: the worker's, its spill path expanded)."""
    from engine.memory.disk import INDEX_NAME   # these pull in torch: not at the manifest's import
    from engine.session.save import savepoint_dir

    paths = {"out": Path(cfg.out), "log": Path(cfg.log_path), "config": Path(cfg.config_path),
             "save": savepoint_dir(cfg.out)}
    if spill_key(cfg) is not None:
        paths["spill"] = Path(cfg.memory.spill) / INDEX_NAME
    return paths


def identity(path: Path) -> list[int] | None:
    """``[size, mtime_ns]`` of what is at ``path``; None when nothing is (or an empty directory)."""
    try:
        st = os.stat(path)
        if path.is_dir() and not any(os.scandir(path)):
            return None
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def identities(cfg: SessionConfig) -> dict[str, list[int] | None]:
    """What is at the job's paths now (the ``files`` an attempt records when it ends)."""
    return {key: identity(path) for key, path in _paths(cfg).items()}


# ---- who wrote a log -----------------------------------------------------------------------------

def _runs_of(records: list[dict]) -> list[tuple[str, str | None]]:
    """(record type, the batch run it names, or None) of the log's header and resume records."""
    out = []
    for r in records:
        if r.get("type") in ("header", "resume"):
            mark = r.get("batch")
            out.append((r["type"], mark.get("run") if isinstance(mark, dict) else None))
    return out


def _origin(records: list[dict] | None, runs: tuple[str, ...]) -> str:
    """Who wrote a log, as far as it tells (``runs``: this job's)."""
    if records is None:
        return "no WorldPager session (the file is not a session log)"
    if not records or records[0].get("type") != "header":
        return "a log without a header"
    if any(r.get("type") == "fork" for r in records):
        return "`worldpager fork`"
    for kind, run in _runs_of(records):
        if run is None:
            return "`worldpager generate` or `play`" if kind == "header" else "`worldpager resume`"
        if run not in runs:
            mark = records[0].get("batch") if kind == "header" else None
            job = mark.get("job") if isinstance(mark, dict) else None
            return f"another batch's job {job!r} (run {run})" if job else f"another batch (run {run})"
    return "this batch"


def _read_records(path: Path) -> list[dict] | None:
    try:
        return read_log(path)
    except (OSError, ValueError, RecursionError):
        return None


# ---- the check -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SpillVouch:
    """What this manifest's jobs say of a spill directory: the index identities they left there, and
    whether one of them was cut short while using it (then whatever is there may be its)."""

    identities: tuple[tuple[int, int], ...] = ()
    cut_short: bool = False

    @classmethod
    def of(cls, entries: dict[str, dict], key: str | None) -> "SpillVouch":
        if key is None:
            return cls()
        seen, cut_short = [], False
        for entry in entries.values():
            made = Made.of(entry)
            if made.spill != key or not made.runs:
                continue
            if made.files is None:
                cut_short = True
            elif made.files.get("spill") is not None:
                seen.append(tuple(made.files["spill"]))
        return cls(tuple(seen), cut_short)


def foreign_outputs(cfg: SessionConfig, made: Made, vouch: SpillVouch) -> str | None:
    """Why the job's paths hold what this batch did not make (one phrase naming them), or None."""
    paths = _paths(cfg)
    spill = paths.pop("spill", None)
    there = {k: p for k, p in paths.items() if identity(p) is not None}
    why = None
    if there:
        why = _outputs_problem(cfg, made, there)
    if why is None and spill is not None:
        why = _spill_problem(spill, vouch)
    return why


def _outputs_problem(cfg: SessionConfig, made: Made, there: dict[str, Path]) -> str | None:
    log = Path(cfg.log_path)
    records = _read_records(log) if log.is_file() else None
    origin = _origin(records, made.runs) if log.is_file() else None
    if not made.runs:
        return _named(there, "{were} not made by this batch (its manifest holds no attempt of the job)",
                      origin)
    if made.files is not None:
        changed = {k: p for k, p in there.items() if identity(p) != made.files.get(k)}
        if changed:
            return _named(changed, "changed after this batch's last attempt of the job ended", origin)
        return None
    return _cut_short_problem(cfg, made, there, records, origin)


def _cut_short_problem(cfg, made: Made, there: dict[str, Path], records, origin) -> str | None:
    """The last attempt was cut short: the files are read (see the module docstring)."""
    if "log" in there:
        if origin != "this batch" and not (records == [] and Path(cfg.log_path).stat().st_size == 0):
            return _named(there, "{are} not this job's", origin)
    elif "save" in there:
        return _named(there, "{are} not this job's (save points without its log)", None)
    header = records[0] if records else None
    if "config" in there and not _same_config(Path(cfg.config_path), cfg, header):
        return _named({"config": there["config"]}, "is not the config this job's log records", origin)
    if "out" in there:
        why = _video_problem(cfg, records or [])
        if why is not None:
            return _named({"out": there["out"]}, why, origin)
    return None


def _same_config(path: Path, cfg: SessionConfig, header: dict | None) -> bool:
    from engine.settings.overlay import config_to_json

    try:   # gated and bounded: a FIFO or a damaged file there is not this job's config
        data = read_json_file(path, "config", MAX_CONFIG_BYTES)
    except InputError:
        return False
    expected = header.get("config") if header is not None else json.loads(json.dumps(config_to_json(cfg)))
    return data == expected


def _video_problem(cfg: SessionConfig, records: list[dict]) -> str | None:
    """Why the MP4 is not the one this job's writer left beside its log (None: it is)."""
    from engine.io.mp4_segments import EncoderSettings, cut_points, mp4_header
    from engine.model.registry import model_spec

    spec = model_spec(cfg)
    height, width = spec.frame_size
    header = mp4_header(EncoderSettings(width + width % 2, height + height % 2, spec.grid.fps, 18,
                                        spec.encoder_preset))[0]
    try:
        with open_input(cfg.out, "video") as f:
            if f.read(len(header)) != header:
                return "is not a video this job's writer made (another size, frame rate or encoder)"
    except InputError as exc:   # a FIFO or a directory there: refused, never waited on
        return f"cannot be read ({str(exc).removeprefix(f'video {shown(cfg.out)} ').split(';')[0]})"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        frames, _ = cut_points(Path(cfg.out))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except InputError:
        frames = 0   # the header alone: killed before its first frame
    chunks = [r["chunk"] for r in records if r.get("type") == "chunk" and isinstance(r.get("chunk"), int)]
    logged = 1 + max(chunks) if chunks else 0
    # muxed, not yet logged: the chunk in hand, and (decode_overlap) the one before it
    most = spec.grid.frames_total(logged + 2)
    if frames > most:
        return f"holds {frames} frames, more than the {logged} chunks the job's log records ({most} at most)"
    return None


def _spill_problem(index: Path, vouch: SpillVouch) -> str | None:
    have = identity(index)
    if have is None or vouch.cut_short or tuple(have) in vouch.identities:
        return None
    return (f"its spill directory {index.parent} holds the memory of a run this batch did not make "
            f"(its {index.name} is not one a job of this batch left there)")


def _named(paths: dict[str, Path], why: str, origin: str | None) -> str:
    """``why`` with ``{were}``/``{are}`` agreeing with the paths, after their names; then who wrote them."""
    many = len(paths) > 1
    names = ", ".join(str(p) for p in paths.values())
    by = "" if origin in (None, "this batch") else f"; the log says they were written by {origin}"
    return f"{names} {why.format(were='were' if many else 'was', are='are' if many else 'is')}{by}"


def remove_outputs(cfg: SessionConfig) -> list[Path]:
    """Remove the job's MP4, log, config and save points before a fresh start (once they are known to
    be this batch's, or with ``--overwrite``); the session starts its spill directory over itself."""
    import shutil

    from engine.session.save import savepoint_dir

    removed = []
    try:
        for path in (Path(cfg.out), Path(cfg.log_path), Path(cfg.config_path)):
            if path.is_file() or path.is_symlink():   # a link goes, never what it points to
                path.unlink()
                removed.append(path)
        save = savepoint_dir(cfg.out)
        if save.is_symlink():
            save.unlink()
            removed.append(save)
        elif save.is_dir():
            shutil.rmtree(save)
            removed.append(save)
    except OSError as exc:
        raise OutputError(f"cannot remove {exc.filename or cfg.out} to start the job afresh: "
                          f"{exc.strerror or exc}") from None
    return removed
