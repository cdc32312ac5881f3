"""One batch worker: runs jobs one after another in its process, keeping the model loaded between them.

Owns what running a job means, wherever the worker lives (the batch's own process, a worker process,
a Ray actor). A job owns its MP4 while it runs (``engine.session.ownership.claim_output``): a
``generate``, ``resume`` or another batch writing the same file makes the job fail with the one-line
error, and the job's files are left alone. Holding it, the worker checks what is at the job's paths
(``engine.batch.ownership``): what this batch's manifest does not say the job made is refused — the job
fails with the reason, nothing changed, and is not tried again in this run — unless the batch was given
``--overwrite``, which removes it and starts the job afresh. Then a job marked for resumption continues
from its newest intact save point (``engine.session.resume``; none usable: it starts over, with a note);
a fresh start first removes what an earlier attempt of the job left (its MP4, log, config and save
points). The session writes the attempt's run id into its log, and the result carries what the attempt
left (``made``) for the manifest. The session gets the worker's ``ModelCache``, so only the first job of
a model loads weights, and every job builds its own noise, caches and memory (its frames equal a fresh
``generate`` of the same options). The result says done, failed (with the one-line error) or
interrupted, and carries the figures of the job's log summary. The note that a job makes no save points
is the batch's to give, once (``engine.batch.plan.no_savepoint_warnings``), not each job's.

Errors never escape ``run``: a ``WorldPagerError`` is the job's failure as ``generate`` would print it,
anything else a failure named ``internal error`` with its traceback on stderr, so one bad job never
stops the worker. ``request_stop`` (thread-safe) ends the job in hand after its current chunk.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from engine.batch.ownership import Made, SpillVouch, foreign_outputs, identities, remove_outputs, spill_key
from engine.batch.plan import JobPlan
from engine.config import SessionConfig
from engine.errors import OutputError, WorldPagerError
from engine.files.limits import limit_error
from engine.model.model_cache import ModelCache
from engine.runtime.telemetry import read_log


@dataclass(frozen=True)
class JobRun:
    """A job handed to a worker: resume it from its save points or start it afresh, as attempt ``run``;
    ``made`` and ``spill``: what the manifest says this batch made at its paths (``engine.batch.ownership``);
    ``overwrite``: replace what it did not make."""

    plan: JobPlan
    resume: bool = False
    run: str = ""
    made: Made = Made()
    spill: SpillVouch = SpillVouch()
    overwrite: bool = False


@dataclass
class JobResult:
    name: str
    status: str                        # done | failed | interrupted
    worker: str
    error: str | None = None
    chunks: int = 0
    frames: int = 0                    # the job's video frames in all
    frames_made: int = 0               # made by this attempt (a resumed one starts at its save point)
    wall_s: float = 0.0
    stall_p99_ms: float | None = None
    rss_max_mib: float | None = None
    resumed_at: int | None = None
    model_loads: int = 0               # weight loads this job caused (0: its worker had them)
    model_built: bool = False          # the session got as far as its model
    notes: list[str] = field(default_factory=list)
    made: dict | None = None           # the manifest's record of what the job's attempts made
    refused: bool = False              # its paths hold what the batch did not make: trying again is no use

    @property
    def fps(self) -> float:
        return self.frames_made / self.wall_s if self.wall_s > 0 else 0.0

    def as_entry(self) -> dict:
        """The manifest fields of this result."""
        return {"status": self.status, "error": self.error, "worker": self.worker, "chunks": self.chunks,
                "frames": self.frames, "wall_s": round(self.wall_s, 3), "fps": round(self.fps, 3),
                "stall_p99_ms": self.stall_p99_ms, "rss_max_mib": self.rss_max_mib,
                "resumed_at": self.resumed_at, "model_reused": (self.model_loads == 0) if self.model_built else None,
                "notes": self.notes, **({} if self.made is None else {"made": self.made})}


def node_config(cfg: SessionConfig, device: str | None) -> SessionConfig:
    """The job's config on this worker: its device, and the spill path's ``$VARS`` of this node."""
    spill = cfg.memory.spill
    if spill is not None:
        cfg = replace(cfg, memory=replace(cfg.memory, spill=Path(os.path.expandvars(str(spill)))))
    return cfg if device is None else replace(cfg, device=device)


RETRIED_CLAIM_WAIT_S = 60.0   # see Worker._run: a killed worker's output lock is freed once its process is gone


class Worker:
    """Runs jobs in this process with one ``ModelCache`` (see the module docstring)."""

    def __init__(self, label: str, device: str | None = None):
        self.label, self.device = label, device
        self.models = ModelCache()
        self._lock = threading.RLock()   # request_stop may come from a signal handler on this thread
        self._session = None
        self._stop = threading.Event()

    def request_stop(self) -> None:
        self._stop.set()
        with self._lock:
            if self._session is not None:
                self._session.request_stop()

    def run(self, job: JobRun, on_chunk: Callable[[dict], None] = lambda record: None) -> JobResult:
        result = JobResult(job.plan.name, "failed", self.label, made=job.made.as_json())   # nothing touched yet
        if self._stop.is_set():
            result.status = "interrupted"
            return result
        loads = self.models.loads
        start = time.perf_counter()
        try:
            self._run(job, on_chunk, result)
        except WorldPagerError as exc:
            result.status, result.error = "failed", _one_line(exc)
        except KeyboardInterrupt:
            result.status, result.error = "interrupted", None
        except Exception as exc:   # one job's bug must not stop the others: reported, with its traceback
            limit = limit_error(exc)   # out of memory or descriptors: the environment, one line
            if limit is None:
                traceback.print_exc(file=sys.stderr)
            result.status = "failed"
            result.error = _one_line(limit) if limit else f"internal error: {type(exc).__name__}: {_one_line(exc)}"
        finally:
            with self._lock:
                self._session = None
        result.model_loads = self.models.loads - loads
        result.wall_s = time.perf_counter() - start
        return result

    def _run(self, job: JobRun, on_chunk, result: JobResult) -> None:
        from engine.session.ownership import claim_output
        from engine.session.preflight import check_output_paths

        cfg = node_config(job.plan.cfg, self.device)
        # One writer per output, also against a generate or resume of it. The batch holds its output
        # directory's lock, so a job's lock held here is a worker of this batch that was killed and is
        # still exiting (a retried job): wait for it, at most a minute.
        with claim_output(cfg.out, wait_s=RETRIED_CLAIM_WAIT_S):
            check_output_paths(cfg)   # the job's MP4, log and config: regular files or none, nobody else's
            self._run_owned(job, cfg, on_chunk, result)

    def _run_owned(self, job: JobRun, cfg: SessionConfig, on_chunk, result: JobResult) -> None:
        resume = self._check_paths(job, cfg, result)
        savepoint = None
        if resume:
            cfg, savepoint = self._resume_point(cfg, result)
        runs = (job.made.runs if savepoint is not None else ()) + (job.run,)
        try:
            if savepoint is None:
                remove_outputs(cfg)   # this batch's own earlier attempt (checked above), or --overwrite
            self._render(job, cfg, savepoint, on_chunk, result)
        finally:   # what this attempt left, for the manifest
            result.made = Made(runs, identities(cfg), spill_key(job.plan.cfg)).as_json()

    @staticmethod
    def _check_paths(job: JobRun, cfg: SessionConfig, result: JobResult) -> bool:
        """Refuse what this batch did not make at the job's paths, or (``--overwrite``) note that it is
        replaced; whether the job may be resumed."""
        why = foreign_outputs(cfg, job.made, job.spill)
        if why is None:
            return job.resume
        if not job.overwrite:
            result.refused = True
            raise OutputError(f"refused: {why}; nothing was changed: move them away, or give the batch "
                              "--overwrite to replace them")
        result.notes.append(f"--overwrite: replacing {why}")
        return False

    def _render(self, job: JobRun, cfg: SessionConfig, savepoint, on_chunk, result: JobResult) -> None:
        from engine.session.loop import Session   # the session pulls in torch and the models
        from engine.session.resume import unresumable_note

        with Session(cfg, on_chunk=on_chunk, resume_from=savepoint, models=self.models,
                     batch={"run": job.run, "job": job.plan.name}) as session:   # a failure before run(): no outputs left
            said_once = unresumable_note(cfg)   # the batch says it once for all its jobs
            result.notes.extend(w for w in session.warnings() if w not in said_once)   # e.g. a lagging camera
            with self._lock:
                self._session = session
                if self._stop.is_set():
                    session.request_stop()
            session.load()
            result.model_built = True
            outcome = session.run()
        result.status = outcome.status
        result.resumed_at = None if savepoint is None else savepoint.chunk
        self._figures(cfg, result)
        result.frames_made = result.frames - (0 if savepoint is None else savepoint.facts["frames_total"])

    def _resume_point(self, cfg: SessionConfig, result: JobResult):
        from engine.session.resume import resume_point

        try:
            saved_cfg, sp, notes = resume_point(cfg.out)
        except WorldPagerError as exc:
            result.notes.append(f"not resumed, started over: {_one_line(exc)}")
            return cfg, None
        result.notes.extend(notes)
        return node_config(saved_cfg, self.device), sp

    @staticmethod
    def _figures(cfg: SessionConfig, result: JobResult) -> None:
        records = read_log(cfg.log_path)
        chunk_records = [r for r in records if r.get("type") == "chunk"]
        result.chunks = len(chunk_records)
        result.frames = chunk_records[-1]["frames_total"] if chunk_records else 0
        summary = records[-1] if records and records[-1].get("type") == "summary" else {}
        result.stall_p99_ms = (summary.get("stall_ms") or {}).get("p99")
        rss = (summary.get("rss_bytes") or {}).get("max")
        result.rss_max_mib = None if rss is None else round(rss / 2 ** 20, 1)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
