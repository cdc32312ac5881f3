"""Resuming a generation session from its save points: ``worldpager resume OUT.mp4``.

Owns finding what a resumed run needs beside the MP4, and checking all of it before anything is cut,
copied or reopened: the resolved config written at the start (``<out>.config.json``; ``generate``
writes it with absolute paths, ``with_absolute_paths``, so a run is resumed from any directory), the
video and the log (``check_present``; a finished log is not resumed), the newest intact save point
whose frames the video holds whole (``fitting_savepoint``: a damaged one, or one newer than the video
reaches, falls back to the one before, with a note; the config digest the save point recorded must
match), and the spill directories that hold the chunks its memory is refilled from (``check_spill``:
the own one and a branch's read-only ones, each index listing them). A missing piece is one line
saying what is missing and where it was expected. The session does the rest (``Session(...,
resume_from=...)``): the MP4 is cut back to the save point's frames and continued, the log keeps its
records before the save point and goes on after a ``resume`` record, the memory reopens its spill
directory.

Every look at the run's files goes through ``engine.files.probe``: a drive that fails (EIO, ENOMEM, EACCES)
is one line naming the path, the errno and the fix, and every file of the spill directory is looked at
(its blocks opened) before the MP4 is cut. ``resume_point(out, spill=DIR)`` moves the run's spill
directory first (``engine.session.spill_move``). A log that records save points beside a missing
``<out>.save/`` (the video copied without it) is told as such.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from engine.files import probe
from engine.config import SessionConfig
from engine.files.bounded_json import read_json_file
from engine.errors import InputError, SavePointError
from engine.files.input_files import check_input_file, open_input
from engine.io.mp4_segments import cut_points
from engine.memory.disk import DATA_NAME, INDEX_NAME, index_document
from engine.memory.types import SpillIndexError
from engine.settings.overlay import resolve_session_config
from engine.session.preflight import TIERED_STORES
from engine.session.savepoint import SavePoint, read_savepoint, savepoint_name, savepoint_paths
from engine.session.save import config_digest, savepoint_dir
from engine.runtime.telemetry import MAX_LINE_BYTES, line_problem, read_log

MAX_CONFIG_BYTES = 16 << 20   # a resolved config is a few KiB


def run_config(out: Path, doing: str = "resume") -> SessionConfig:
    """The resolved config of the run that writes ``out`` (``doing``: what the errors say cannot be done)."""
    path = Path(out).with_suffix(".config.json")
    if not os.path.lexists(path):
        raise InputError(f"cannot {doing} {out}: its config {path} is missing (was it made by worldpager generate?)")
    try:   # the gate (a FIFO is refused, never waited on) and the bounded reader (size, depth, encoding)
        data = read_json_file(path, "its config", MAX_CONFIG_BYTES)
    except InputError as exc:
        raise InputError(f"cannot {doing} {out}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"cannot {doing} {out}: {path} is not a config")
    data["out"] = str(out)
    data.setdefault("look_around", 0)   # a run from before the look around (engine.session.look_around) had none
    return resolve_session_config(None, data)


def with_absolute_paths(cfg: SessionConfig) -> SessionConfig:
    """``cfg`` with the files and directories it names made absolute (the video's aside), as the config
    file and the log's header record them: a run resumed or forked from another directory finds them.
    The spill directory and the log always (they are made); an input only where it exists here (a
    missing one is reported as the user gave it; ``--checkpoint`` may be a hub repo id)."""
    def absolute(path):
        return None if path is None else Path(path).absolute()

    def existing(name):
        path = getattr(cfg, name)
        flag = "--" + name.replace("_", "-")
        return path if path is None or not probe.exists(path, flag) else Path(path).absolute()

    memory = dataclasses.replace(cfg.memory, spill=absolute(cfg.memory.spill))
    inputs = ("image", "trajectory", "observe", "observe_poses", "checkpoint", "arena_weights")
    return dataclasses.replace(cfg, **{name: existing(name) for name in inputs}, log=absolute(cfg.log),
                               memory=memory)


def finished(cfg: SessionConfig) -> bool:
    try:
        records = read_log(cfg.log_path)
    except (OSError, ValueError):
        return False
    return any(r.get("type") == "summary" and r.get("status") == "done" for r in records[-1:])


def resume_point(out: Path, spill: Path | None = None,
                 weights: str | None = None) -> tuple[SessionConfig, SavePoint, list[str]]:
    """Config, newest save point the MP4 can be continued from, and notes on skipped ones, for
    resuming ``out``; every piece the resumed run needs is checked here, before anything is changed.
    ``spill``: go on with the spill directory there (``engine.session.spill_move``; the config then
    records it). ``weights``: the ``--weights`` given (it must be the save point's)."""
    out = Path(out)
    cfg = run_config(out)
    check_present(out, cfg, "resume")
    if finished(cfg):
        raise InputError(f"cannot resume {out}: the run finished (its log {cfg.log_path} ends with status done)")
    sp, notes = fitting_savepoint(out, cfg, "resume")
    check_weight_format(out, sp, weights or cfg.weights, "resume")
    if spill is not None:
        cfg, moved = _move_spill(out, cfg, sp, Path(spill))
        notes = notes + moved
    check_spill(out, cfg, sp, "resume")
    return cfg, sp, notes


def _move_spill(out: Path, cfg: SessionConfig, sp: SavePoint, spill: Path) -> tuple[SessionConfig, list[str]]:
    """``resume --spill DIR``: the run's own spill directory moves to ``spill`` (checked or copied)."""
    from engine.session.spill_move import move_spill

    if not _has_disk_tier(cfg):
        why = ("--store window keeps no retrieval memory" if cfg.memory.store == "window" else
               "its memory was only in RAM" if cfg.memory.spill is None else f"--store {cfg.memory.store} keeps none")
        raise InputError(f"cannot resume {out} with --spill {spill}: its run has no spill directory to move "
                         f"({why}); resume it without --spill")
    memory = sp.facts.get("memory", {})
    bases = [(_stored_chunks(out, Path(layer["spill"]), "resume", sp.chunk, flag="the parent's spill"),
              int(layer["before"])) for layer in memory.get("base", [])]
    own = [c for c in slot_chunks(cfg, sp) if not any(c in chunks and c < before for chunks, before in bases)]
    return move_spill(out, cfg, sp, spill, own)


def _has_disk_tier(cfg: SessionConfig) -> bool:
    return cfg.memory.spill is not None and cfg.memory.store in TIERED_STORES and cfg.memory.store != "dram-only"


def slot_chunks(cfg: SessionConfig, sp: SavePoint) -> list[int]:
    """The stored chunks the save point's memory slots are refilled with (the sink is in the save point)."""
    slots = sp.facts.get("memory", {}).get("slots", [])
    sink = len(slots) - 1 if cfg.memory.sink and slots else None
    return sorted({int(c) for j, c in enumerate(slots) if c is not None and j != sink})


def check_present(out: Path, cfg: SessionConfig, doing: str) -> None:
    """The video and the log of the run are there (a resume keeps the log's records before its save point)."""
    for path, what in ((out, "video"), (cfg.log_path, "log")):
        path = Path(path)
        name = f"cannot {doing} {out}: its {what}"
        if not probe.exists(path, name):
            where = f"{path} ({path.absolute()})" if not path.is_absolute() else str(path)
            raise InputError(f"{name} {where} is missing")
        # A FIFO, a directory, a device or a file under /proc: one line saying what it is, never a wait.
        check_input_file(path, name, fix=f"{doing} a run whose MP4 and log are regular files")


def why_no_savepoints(cfg: SessionConfig) -> str | None:
    """Why a run of ``cfg`` makes no save points at all, or None when it makes them."""
    if cfg.save_every == 0:
        return "it ran with --save-every 0"
    if cfg.memory.spill is None and cfg.memory.store != "window":
        return (f"it ran without --spill: its memory (--store {cfg.memory.store}) was only in RAM, "
                "and a save point needs it on a drive")
    return None


def unresumable_note(cfg: SessionConfig) -> list[str]:
    """The warning given before a run that will make no save points (so cannot be resumed or forked)."""
    why = why_no_savepoints(cfg)
    if why is None or cfg.save_every == 0:   # --save-every 0 is the user's own choice: nothing to say
        return []
    return [f"this run makes no save points, so it cannot be resumed or forked ({why.removeprefix('it ran ')}); "
            "give --spill DIR for that"]


def check_key_convention(out: Path, sp: SavePoint, cfg: SessionConfig, doing: str) -> None:
    """The keys the save point's spill holds (before or after the rotation, ``--kv-keys``) are the ones
    the config asks for: the convention is part of the spill's format (a save point from before the
    setting existed stored them post-rope)."""
    memory = sp.facts.get("memory") or {}
    saved = memory.get("keys", "post-rope")
    if memory.get("mode", "window") != "window" and saved != cfg.memory.keys:
        raise InputError(f"cannot {doing} {out}: save point {sp.chunk}'s memory stores keys {saved}, the config "
                         f"asks for --kv-keys {cfg.memory.keys}")


def check_weight_format(out: Path, sp: SavePoint, weights: str, doing: str) -> None:
    """The run goes on with the weight format its save point was made with (``--weights``): another
    format computes other frames (a save point from before the setting existed: bf16)."""
    saved = sp.facts.get("weights", "bf16")
    if saved != weights:
        raise InputError(f"cannot {doing} {out}: save point {sp.chunk} was made with --weights {saved}, this run "
                         f"asks for --weights {weights} (the frames would differ); use --weights {saved}")


def fitting_savepoint(out: Path, cfg: SessionConfig, doing: str, at: int | None = None) -> tuple[SavePoint, list[str]]:
    """The newest intact save point (or the one at chunk ``at``) whose frames ``out`` holds whole;
    a newer one the video is too short for is skipped with a note."""
    directory = savepoint_dir(out)
    paths = savepoint_paths(directory)
    if at is not None:
        paths = [p for p in paths if p.name == savepoint_name(at)]
    frames, keys = cut_points(out)
    digests = _digests(cfg)
    notes: list[str] = []
    too_short = False
    for path in paths:
        try:
            sp = read_savepoint(path)
        except SavePointError as exc:
            notes.append(f"{path.name}: {exc.reason} (skipped)")
            continue
        check_key_convention(out, sp, cfg, doing)
        check_weight_format(out, sp, cfg.weights, doing)
        if sp.facts.get("config_digest") not in digests:
            raise InputError(f"cannot {doing} {out}: save point {sp.chunk} was made with another config than "
                             f"{out.with_suffix('.config.json')}")
        need = sp.facts["frames_total"]
        if need == frames or (need < frames and need in keys):
            return sp, notes
        too_short = True
        notes.append(f"{path.name}: needs the video's first {need} frames, {out} holds {frames} (skipped)")
    if not too_short:
        if not notes and not probe.exists(directory, f"cannot {doing} {out}: its save-point directory"):
            _refuse_left_behind(out, cfg, directory, doing)
        why = "; ".join(notes) if notes else (why_no_savepoints(cfg) or "the run stopped before its first one")
        raise InputError(f"cannot {doing} {out}: no save point in {directory} ({why})")
    raise InputError(f"cannot {doing} {out}: no save point fits its video ({'; '.join(notes)})")


def _refuse_left_behind(out: Path, cfg: SessionConfig, directory: Path, doing: str) -> None:
    """The save-point directory is missing although the log records save points: the video (and its log)
    were copied or moved without it."""
    try:
        records = read_log(cfg.log_path)
    except (OSError, ValueError):
        return
    made = [r for r in records if r.get("type") == "savepoint" and r.get("path") and isinstance(r.get("chunk"), int)]
    if made:
        raise InputError(f"cannot {doing} {out}: its log records save points (the newest before chunk "
                         f"{made[-1]['chunk']}), but {directory} is missing: the save points are not beside the "
                         f"video; copy the run's {directory.name}/ beside it too, or {doing} the original")


def _digests(cfg: SessionConfig) -> set[str]:
    """The config digests a save point of this run may carry: today's (without the spill directory's
    place) and, for one written before the place was left out, the digest with it — the place as the
    config has it and as the log's header recorded it at the start (before a ``resume --spill`` moved it)."""
    digests = {config_digest(cfg, with_spill=spill, with_paging=paging)
               for spill in (False, True) for paging in (False, True)}
    try:
        with open_input(cfg.log_path, "log") as f:
            header, _ = line_problem(f.readline(MAX_LINE_BYTES + 2))
        spill = header.get("config", {}).get("memory", {}).get("spill")
    except (OSError, InputError, AttributeError):
        spill = None
    if isinstance(spill, str) and spill:
        moved = dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, spill=Path(spill)))
        digests.add(config_digest(moved, with_spill=True))
    return digests


def check_spill(out: Path, cfg: SessionConfig, sp: SavePoint, doing: str) -> None:
    """The spill directories the save point's memory is refilled from hold its chunks."""
    memory = sp.facts.get("memory", {})
    spill = cfg.memory.spill
    if not _has_disk_tier(cfg):
        return
    needed = slot_chunks(cfg, sp)
    own = _stored_chunks(out, Path(spill), doing, sp.chunk, flag="--spill")
    layers = [(Path(layer["spill"]), int(layer["before"])) for layer in memory.get("base", [])]
    bases = [(_stored_chunks(out, d, doing, sp.chunk, flag="the parent's spill"), before) for d, before in layers]
    missing = [c for c in needed if c not in own and not any(c in chunks and c < before for chunks, before in bases)]
    # Some chunks gone is damage: each is a counted miss when the memory opens, and the run goes on. None
    # of them there is another run's directory (or an emptied one): nothing of this run's memory to refill.
    if needed and len(missing) == len(needed):
        raise InputError(f"cannot {doing} {out}: its spill directory {Path(spill).absolute()} holds none of the "
                         f"chunks {', '.join(map(str, missing))} its save point at chunk {sp.chunk} needs "
                         "(another run's directory?); nothing was changed")


def _check_readable(directory: Path, what: str, fix: str) -> None:
    """Every file of the spill directory can be looked at and its blocks opened: the session opens them
    only once the MP4 is cut back, and a failing drive must be told before that."""
    probe.look_inside(directory, what, fix)
    with probe.probing(directory, what, fix):
        try:
            os.close(os.open(directory / DATA_NAME, os.O_RDONLY))
        except FileNotFoundError:   # no blocks: each chunk is a miss (damage, reported when the memory opens)
            pass


def spill_fix(out: Path, doing: str) -> str:
    """What to do about a spill directory on a drive that fails."""
    if doing == "resume":
        return (f"check or replace the drive; `worldpager resume {out} --spill NEWDIR` goes on from a copy of "
                "it on another drive")
    return "check or replace the drive under it"


def _stored_chunks(out: Path, directory: Path, doing: str, chunk: int, flag: str) -> set[int]:
    """The chunks ``directory``'s index lists; a one-line error naming where it was expected if absent."""
    index = directory / INDEX_NAME
    where = str(directory) if directory.is_absolute() else \
        f"{directory} (relative: taken here as {directory.absolute()})"
    what, fix = f"cannot {doing} {out}: its spill directory", spill_fix(out, doing)
    if not probe.is_dir(directory, what, fix):
        raise InputError(f"cannot {doing} {out}: its spill directory {where} is missing (its save point at chunk "
                         f"{chunk} refills the memory from it; {flag} was moved or deleted?)")
    try:
        doc = index_document(index, fix, f"cannot {doing} {out}: its spill index")
    except SpillIndexError as exc:
        savepoint = savepoint_dir(out) / savepoint_name(chunk)
        raise InputError(f"cannot {doing} {out} from save point {savepoint}: {exc}; nothing was changed "
                         "(restore the index from a backup, or generate again)") from None
    _check_readable(directory, what, fix)
    return {int(c) for c in doc["blocks"] if str(c).isdigit()}
