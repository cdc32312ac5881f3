"""Reading a batch's jobs: a JSONL, CSV or YAML job list, or a glob of trajectory files.

Owns the job-list formats and the options a job may set — the ``generate`` flags, spelled as in the
CLI without the dashes (``host-mem`` and ``host_mem`` both work), plus ``name`` — and their types.
Every problem is a one-line ``InputError`` naming the file and the line (a malformed line, an option
that does not exist or has a value of the wrong type, a duplicate name); nothing here touches an
output. The list is read through the input gate (``engine.files.input_files``: a FIFO, a directory or a file
under /proc is refused before it is opened) and each JSONL line through the bounded JSON reader. Relative input paths are taken from the current directory, as ``generate`` takes them.

* JSONL (``.jsonl``, ``.ndjson``, ``.json``): one JSON object a line; blank lines and ``#`` lines skipped.
* CSV (``.csv``): a header row of option names, then one job a row; an empty cell is not given.
* YAML (``.yaml``, ``.yml``): a list of mappings, or a mapping whose ``jobs`` key holds one.
* A glob (``'trajectories/*.yaml'``, quoted): one job per matching trajectory file, named by its stem.

Shared options (the ``batch`` command's flags) apply to every job; a job's own value wins.
"""
from __future__ import annotations

import csv
import glob
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from engine.files.bounded_json import JsonInputError, parse_json
from engine.errors import InputError
from engine.files.input_files import check_input_file, read_input_bytes
from engine.settings.options import job_parsers


PATH_OPTIONS = ("image", "trajectory", "out", "log", "checkpoint", "arena_weights", "spill", "preset", "observe",
                "observe_poses")
MAX_JOB_LIST_BYTES = 64 << 20   # a few hundred bytes a job
OPTION_TYPES: dict[str, Callable[[Any], Any]] = job_parsers()   # the generate flags' table, less --device
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Job:
    """One job: its name, the generate options it sets (typed; paths as given) and where it was read."""

    name: str
    options: dict[str, Any] = field(hash=False)
    where: str                       # "FILE line N", for messages


def option_key(raw: str) -> str:
    return str(raw).strip().lstrip("-").replace("-", "_")


def typed_options(raw: dict, where: str) -> dict[str, Any]:
    """``raw``'s options with normalised names and checked types (``where`` prefixes every error)."""
    options: dict[str, Any] = {}
    for key, value in raw.items():
        name = option_key(key)
        if name == "device":
            raise InputError(f"{where}: a job cannot choose its device; the batch's --devices / --workers do")
        if name not in OPTION_TYPES:
            raise InputError(f"{where}: unknown job option {str(key)!r} (known: {', '.join(sorted(OPTION_TYPES))})")
        if value is None or value == "":
            continue
        try:
            options[name] = OPTION_TYPES[name](value)
        except ValueError as exc:
            raise InputError(f"{where}: option {name!r}: {value!r} is {exc}") from None
    return options


# ---- the formats --------------------------------------------------------------------------------

def _jsonl_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:   # bounded: a line nested thousands deep is one line of error, not a RecursionError
            row = parse_json(line, "the line", MAX_JOB_LIST_BYTES)
        except JsonInputError as exc:
            why = str(exc).removeprefix("the line ").removeprefix("is ")
            syntax = re.fullmatch(r"not JSON: (.*) at line \d+ (column \d+)", why)
            why = f"not valid JSON ({syntax[1]} at {syntax[2]})" if syntax else why
            raise InputError(f"{path} line {number}: {why}") from None
        if not isinstance(row, dict):
            raise InputError(f"{path} line {number}: a job is a JSON object of options, got {type(row).__name__}")
        rows.append((number, row))
    return rows


def _csv_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        return []
    except csv.Error as exc:
        raise InputError(f"{path} line 1: not CSV ({exc})") from None
    rows = []
    try:
        for cells in reader:
            number = reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise InputError(f"{path} line {number}: {len(cells)} cells, the header has {len(header)}")
            rows.append((number, dict(zip(header, cells))))
    except csv.Error as exc:
        raise InputError(f"{path} line {reader.line_num}: not CSV ({exc})") from None
    return rows


def _yaml_rows(path: Path, text: str) -> list[tuple[int, dict]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    except RecursionError:
        raise InputError(f"{path}: not valid YAML (nested too deeply)") from None
    except (ValueError, OverflowError) as exc:   # a value the YAML resolver matched, e.g. 2001-13-45
        raise InputError(f"{path}: not valid YAML (an invalid value: {str(exc)[:80]})") from None
    if isinstance(data, dict) and "jobs" in data:
        node = next(v for k, v in node.value if k.value == "jobs")
        data = data["jobs"]
    if not isinstance(data, list):
        raise InputError(f"{path}: not a job list (a YAML list of jobs, or a mapping with a 'jobs' list); "
                         "is it a trajectory? give trajectories as a quoted glob, e.g. 'dir/*.yaml'")
    rows = []
    for item, item_node in zip(data, node.value):
        number = item_node.start_mark.line + 1
        if not isinstance(item, dict):
            raise InputError(f"{path} line {number}: a job is a mapping of options, got {type(item).__name__}")
        rows.append((number, item))
    return rows


READERS = {".jsonl": _jsonl_rows, ".ndjson": _jsonl_rows, ".json": _jsonl_rows, ".csv": _csv_rows,
           ".yaml": _yaml_rows, ".yml": _yaml_rows}
GLOB_CHARS = set("*?[")


def read_job_list(path: Path) -> list[tuple[str, dict]]:
    """(where, raw options) of every job in a job-list file."""
    reader = READERS.get(path.suffix.lower())
    if reader is None:
        raise InputError(f"job list {path}: unknown format {path.suffix or '(no suffix)'!r}; "
                         f"use {', '.join(sorted(READERS))}, or a quoted glob of trajectory files")
    data = read_input_bytes(path, "job list", MAX_JOB_LIST_BYTES)   # the gate: a FIFO is refused, not waited on
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"job list {path} is not UTF-8 text") from None
    return [(f"{path} line {number}", row) for number, row in reader(path, text)]


def _glob_jobs(pattern: str) -> list[tuple[str, dict]]:
    files = sorted(p for p in glob.glob(str(Path(pattern).expanduser()), recursive=True) if Path(p).is_file())
    if not files:
        raise InputError(f"no trajectory file matches {pattern!r}")
    return [(f"{pattern} ({f})", {"trajectory": f, "name": Path(f).stem}) for f in files]


def load_jobs(source: str, shared: dict[str, Any]) -> list[Job]:
    """The jobs of ``source`` (a job-list file or a glob of trajectories), each with ``shared`` under it."""
    shared = typed_options(shared, "batch options")
    if "name" in shared:
        raise InputError("batch options: 'name' is per job")
    path = Path(source).expanduser()
    if path.is_file():
        rows = read_job_list(path)
    elif GLOB_CHARS & set(source) and not os.path.lexists(path):
        rows = _glob_jobs(source)
    elif os.path.lexists(path):   # a FIFO, a directory, a device: one line saying what it is
        check_input_file(path, "job list", fix="give a job-list file or a quoted glob of trajectory files")
        rows = read_job_list(path)
    else:
        raise InputError(f"job list not found: {path} (for many trajectories give a quoted glob, e.g. 'dir/*.yaml')")
    if not rows:
        raise InputError(f"{source}: no jobs")
    jobs = [_job(index, where, {**shared, **typed_options(raw, where)}) for index, (where, raw) in enumerate(rows)]
    _check_names(jobs)
    return jobs


def _job(index: int, where: str, options: dict[str, Any]) -> Job:
    name = options.pop("name", None)
    if name is None:
        name = Path(options["out"]).stem if "out" in options else f"job{index + 1:03d}"
    if not NAME_PATTERN.fullmatch(name):
        raise InputError(f"{where}: job name {name!r} must be letters, digits, '.', '_' or '-' "
                         "(it names the job's files)")
    for key in PATH_OPTIONS:   # absolute: workers elsewhere (a Ray node) start in another directory
        if key in options and key not in ("preset", "out", "log") and not options[key].startswith("$"):
            options[key] = os.path.abspath(os.path.expanduser(options[key]))
    return Job(name, options, where)


def _check_names(jobs: list[Job]) -> None:
    seen: dict[str, Job] = {}
    for job in jobs:
        if job.name in seen:
            raise InputError(f"{job.where}: job name {job.name!r} is also {seen[job.name].where}'s; "
                             "give each job its own name (or out)")
        seen[job.name] = job
