"""From jobs to the session configs a set of workers runs, with every check made before anything starts.

Owns what ``generate`` would make of a job's options (the same overlay and length rules), where each
job's files go (``out`` relative to the output directory, default ``OUT_DIR/NAME.mp4``; log and config
beside it, as ``generate`` writes them), the spill template (``{job}`` is the job's name; ``~`` and
``$VARS`` are expanded by the worker, on its own node), and the refusals that must come before a
single job runs: an option value ``generate`` would refuse, two jobs writing one file, two workers
given one spill directory, a host memory share too small for a job (``engine.session.preflight``).
``no_savepoint_warnings`` is the batch's one warning for its jobs that make no save points (a session
gives it per run; a batch once, naming the jobs, per reason).

The host budget (``--host-mem`` for the whole batch, or the memory available now) is divided equally
between the workers; a job that sets its own ``host_mem`` must fit in its worker's share. One worker
without ``--host-mem`` sizes its pool as ``generate`` does.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.batch.jobs import Job
from engine.config import SessionConfig
from engine.errors import ConfigError, InputError, WorldPagerError
from engine.settings.options import check_input_options, overlay
from engine.model.registry import model_kv_layout, model_spec
from engine.settings.overlay import resolve_session_config, with_user_config
from engine.session.preflight import check_memory, host_budget

GiB = 2 ** 30
LENGTH_KEYS = ("chunks", "seconds", "minutes")


@dataclass(frozen=True)
class JobPlan:
    """A job ready to run: its resolved config (device and host share filled in) and its fingerprint."""

    name: str
    cfg: SessionConfig
    fingerprint: str      # the job's options as given: a changed job is a new job
    where: str


def overlay_of(options: dict[str, Any], out_dir: Path, name: str) -> dict[str, Any]:
    """``generate``'s config overlay for a job's options (``engine.settings.options.overlay``, the rule ``generate``
    uses), with the outputs under ``out_dir`` and the spill template filled."""
    values = {**options, "out": out_dir / options.get("out", f"{name}.mp4")}
    if "log" in options:
        values["log"] = out_dir / options["log"]
    if "spill" in options:
        values["spill"] = options["spill"].replace("{job}", name)
    check_input_options(values)
    return overlay(values)


def length_chunks(options: dict[str, Any], cfg: SessionConfig) -> int | None:
    """Chunks for the job's length option (None: none given), by ``generate``'s rule."""
    given = [k for k in LENGTH_KEYS if k in options]
    if len(given) > 1:
        raise ConfigError(f"give only one of chunks, seconds, minutes (got {', '.join(given)})")
    if not given:
        return None
    if given[0] == "chunks":
        if options["chunks"] < 1:
            raise ConfigError(f"chunks must be at least 1, got {options['chunks']}")
        return options["chunks"]
    seconds = options["seconds"] if "seconds" in options else options["minutes"] * 60
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"length must be a positive number of seconds, got {seconds}")
    grid = model_spec(cfg).grid
    frames = math.ceil(seconds * grid.fps)
    return 1 + max(0, math.ceil((frames - grid.first_frames) / grid.frames_per_chunk))


def job_config(job: Job, out_dir: Path) -> SessionConfig:
    """The session config ``generate`` would resolve for the job (one-line errors prefixed by its line)."""
    try:
        flags = overlay_of(job.options, out_dir, job.name)
        preset = job.options.get("preset")
        base = with_user_config()
        cfg = resolve_session_config(preset, flags, base)
        n = length_chunks(job.options, cfg)
        return cfg if n is None else resolve_session_config(preset, {**flags, "chunks": n}, base)
    except WorldPagerError as exc:
        raise type(exc)(f"{job.where}: {exc}") from None


# Options that change how a job runs, not the video it makes (the save point's config digest leaves them
# out too, engine.session.save): a batch run again with other values of them resumes its stopped jobs.
NOT_FINGERPRINTED = frozenset({"decode_overlap", "threads", "keep_savepoints"})


def fingerprint(job: Job) -> str:
    return repr(sorted((k, str(v)) for k, v in job.options.items() if k not in NOT_FINGERPRINTED))


def plan_jobs(jobs: list[Job], out_dir: Path, workers: int, device: str, host_mem_gib: float | None,
              available_bytes: int, rss_bytes: int) -> list[JobPlan]:
    """Checked configs of every job for ``workers`` workers of ``device``'s kind (see the module docstring)."""
    share = _share(host_mem_gib, available_bytes, workers)
    plans = [JobPlan(job.name, _with_share(replace(job_config(job, out_dir), device=device), job, share, workers,
                                           host_mem_gib), fingerprint(job), job.where) for job in jobs]
    check_distinct_outputs(plans)
    if workers > 1:
        check_distinct_spills(plans, workers)
    whole = "the memory available" if host_mem_gib is None else f"--host-mem {host_mem_gib:g} GiB"
    for plan in plans:   # last: the only check that depends on what the machine has now
        where = plan.where if share is None else (
            f"{plan.where} (its worker's share: {share:g} GiB of {whole}, {workers} workers)")
        _check_fits(plan.cfg, where, rss_bytes, available_bytes // workers)
    return plans


def _share(host_mem_gib: float | None, available_bytes: int, workers: int) -> float | None:
    """A worker's host budget in GiB; None: one worker, which sizes its pool as ``generate`` does."""
    if host_mem_gib is None:
        return None if workers == 1 else math.floor(available_bytes / workers / GiB * 100) / 100
    if not math.isfinite(host_mem_gib) or host_mem_gib <= 0:
        raise ConfigError(f"--host-mem must be a positive number of GiB, got {host_mem_gib}")
    return math.floor(host_mem_gib / workers * 100) / 100


def _with_share(cfg: SessionConfig, job: Job, share: float | None, workers: int,
                host_mem_gib: float | None) -> SessionConfig:
    own = job.options.get("host_mem")
    if own is not None and share is not None and own > share * (1 + 1e-9):
        whole = "the memory available" if host_mem_gib is None else f"--host-mem {host_mem_gib:g} GiB"
        raise ConfigError(f"{job.where}: host_mem {own:g} GiB is more than a worker's share of {whole} "
                          f"({workers} workers: {share:.2f} GiB each)")
    if own is None and share is not None:
        cfg = replace(cfg, memory=replace(cfg.memory, host_mem_gib=share))
    return cfg


def _check_fits(cfg: SessionConfig, where: str, rss_bytes: int, available_share: int) -> None:
    """The job's settings against its worker's host share (as ``Session`` checks at start, but now)."""
    dtype_bytes, dtype_name = (2, "bfloat16") if cfg.device.startswith("cuda") else (4, "float32")
    try:
        check_memory(cfg, model_spec(cfg).grid, model_kv_layout(cfg), dtype_bytes=dtype_bytes,
                     dtype_name=dtype_name, host=host_budget(cfg, rss_bytes, available_share))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_distinct_outputs(plans: list[JobPlan]) -> None:
    """No two jobs may write the same file (video, log, resolved config or save-point directory)."""
    owner: dict[Path, tuple[JobPlan, str]] = {}
    for p in plans:
        for what, path in (("out", p.cfg.out), ("log", p.cfg.log_path), ("config", p.cfg.config_path)):
            key = Path(os.path.abspath(path))
            if key in owner:
                other, other_what = owner[key]
                raise InputError(f"{p.where}: job {p.name!r} would write its {what} to {key}, which is job "
                                 f"{other.name!r}'s {other_what} ({other.where}); give each job its own out")
            owner[key] = (p, what)


def check_distinct_spills(plans: list[JobPlan], workers: int) -> None:
    """With several workers, jobs run at once: each needs its own spill directory."""
    owner: dict[str, JobPlan] = {}
    for p in plans:
        spill = p.cfg.memory.spill
        if spill is None:
            continue
        key = os.path.abspath(os.path.expandvars(os.path.expanduser(str(spill))))
        if key in owner:
            raise InputError(f"{p.where}: jobs {owner[key].name!r} and {p.name!r} share the spill directory "
                             f"{key}, and {workers} workers would use it at once; put {{job}} in --spill "
                             f"(e.g. --spill {Path(key).parent / '{job}'}) or give each job its own")
        owner[key] = p


def no_savepoint_warnings(plans: list[JobPlan]) -> list[str]:
    """One warning per reason for the jobs that make no save points (so cannot be resumed or forked)."""
    from engine.session.resume import unresumable_note, why_no_savepoints

    by_reason: dict[str, list[str]] = {}
    for plan in plans:
        if unresumable_note(plan.cfg):
            by_reason.setdefault(why_no_savepoints(plan.cfg), []).append(plan.name)
    warnings = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:8]) + (f", … ({len(names)} jobs)" if len(names) > 8 else "")
        who, verb, them = (f"job {shown}", "makes", "it") if len(names) == 1 else (f"jobs {shown}", "make", "they")
        warnings.append(f"{who} {verb} no save points, so {them} cannot be resumed or forked "
                        f"({why.removeprefix('it ran ')}); give --spill DIR for that")
    return warnings
