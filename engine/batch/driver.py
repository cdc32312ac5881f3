"""The batch's bookkeeping loop: which jobs to run, handing them to a backend, recording what comes back.

Owns the policy, not the execution (the backends: ``engine.batch.local``, ``engine.batch.ray_backend``).
From the manifest: a job ``done`` with the same options is skipped; ``interrupted`` (or ``running``
when its batch was killed) is resumed from its save points; ``failed`` starts over; a job whose
options changed since is a new job. Within one batch a failed job is tried again up to ``retries``
times (not one refused because its paths hold what this batch did not make: that stays so); a job whose
worker died (a killed process, a lost Ray node) is resumed on another worker, up to ``MAX_LOSSES`` times.
Every change reaches the manifest before the next event is handled. Each attempt gets a run id, put in
the manifest's ``made`` before the job is handed out, so that a batch killed at any moment knows the
files its attempt left as its own (``engine.batch.ownership``); the attempt's result brings ``made`` up
to date.

A backend runs ``backend.run(take, emit, stopping)``: it calls ``take()`` for a job whenever one of its
workers is free (None: nothing left for now) until ``take()`` gives None with every worker idle, never
takes while ``stopping()``, and reports each ``Event`` through ``emit`` from the calling thread.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from engine.batch.manifest import Manifest
from engine.batch.ownership import Made, SpillVouch, new_run, spill_key
from engine.batch.plan import JobPlan
from engine.batch.worker import JobResult, JobRun

MAX_LOSSES = 2


@dataclass
class Event:
    kind: str                         # started | chunk | finished | lost
    name: str
    worker: str
    record: dict | None = None        # chunk: the session's chunk record
    result: JobResult | None = None   # finished
    error: str | None = None          # lost: why


class Backend(Protocol):
    workers: int

    def run(self, take: Callable[[], JobRun | None], emit: Callable[[Event], None],
            stopping: Callable[[], bool]) -> None: ...

    def stop(self) -> None: ...


class PooledBackend:
    """A backend of several workers: start them, hand out jobs until none are left, then close them
    whatever happened (subclasses give ``_start``, ``_loop`` and ``_close``)."""

    def run(self, take: Callable[[], JobRun | None], emit: Callable[[Event], None],
            stopping: Callable[[], bool]) -> None:
        self._start()
        try:
            self._loop(take, emit, stopping)
        finally:
            self._close()


@dataclass
class BatchResult:
    jobs: list[str]
    skipped: list[str]
    results: dict[str, JobResult] = field(default_factory=dict)
    wall_s: float = 0.0
    status: str = "done"               # done | failed | interrupted

    @property
    def model_loads(self) -> int:
        return sum(r.model_loads for r in self.results.values())


class BatchDriver:
    def __init__(self, plans: list[JobPlan], manifest: Manifest, backend: Backend, retries: int = 0,
                 on_event: Callable[[Event], None] = lambda event: None, overwrite: bool = False,
                 on_todo: Callable[[list[JobPlan]], None] = lambda plans: None):
        """``overwrite``: jobs replace what this batch did not make at their paths; ``on_todo``: told the
        plans of the jobs this run will do, before the first starts."""
        self.plans = {p.name: p for p in plans}
        self.manifest, self.backend, self.on_event = manifest, backend, on_event
        self.retries, self.overwrite, self.on_todo = retries, overwrite, on_todo
        self._queue: deque[JobRun] = deque()
        self._tries: dict[str, int] = {}
        self._losses: dict[str, int] = {}
        self._stop = threading.Event()
        self.result = BatchResult(list(self.plans), [])

    def request_stop(self) -> None:
        """No new jobs; the running ones stop after their current chunk (interrupted, resumable)."""
        self._stop.set()
        self.backend.stop()

    def todo(self) -> list[JobRun]:
        """What this batch runs, by what the manifest says of each job (see the module docstring)."""
        runs = []
        for name, plan in self.plans.items():
            entry = self.manifest.entry(name)
            changed = entry is not None and entry.get("fingerprint") != plan.fingerprint
            status = None if entry is None else entry.get("status")
            if status == "done" and not changed:
                self.result.skipped.append(name)
                continue
            runs.append(JobRun(plan, resume=status == "interrupted" and not changed))
            self.manifest.update(name, status="pending" if changed or status is None else status,
                                 fingerprint=plan.fingerprint, out=str(plan.cfg.out), error=None,
                                 **({"attempts": 0} if changed else {}))
        return runs

    def run(self) -> BatchResult:
        start = time.perf_counter()
        self._queue.extend(self.todo())
        self._tries = {r.plan.name: 1 + self.retries for r in self._queue}
        self.on_todo([r.plan for r in self._queue])
        if self._queue:
            self.backend.run(self._take, self._emit, self._stop.is_set)
        self.result.wall_s = time.perf_counter() - start
        self.result.status = self._status()
        return self.result

    def _status(self) -> str:
        statuses = [self.manifest.entry(n)["status"] for n in self.plans]
        if all(s == "done" for s in statuses):
            return "done"
        return "interrupted" if self._stop.is_set() and "failed" not in statuses else "failed"

    def _take(self) -> JobRun | None:
        if self._stop.is_set() or not self._queue:
            return None
        run = self._queue.popleft()
        self._tries[run.plan.name] -= 1
        return self._attempt(run)

    def _attempt(self, run: JobRun) -> JobRun:
        """The job as handed out: a new run id, in the manifest before any worker can write a byte
        under it, and what the manifest says this batch made at its paths."""
        name, key = run.plan.name, spill_key(run.plan.cfg)
        made = Made.of(self.manifest.entry(name))
        vouch = SpillVouch.of(self.manifest.jobs, key)   # before this attempt's own entry says "in flight"
        attempt = new_run()
        self.manifest.update(name, made=Made(made.runs + (attempt,), None, key).as_json())
        return replace(run, run=attempt, made=made, spill=vouch, overwrite=self.overwrite)

    def _emit(self, event: Event) -> None:
        handler = {"started": self._started, "finished": self._finished, "lost": self._lost}.get(event.kind)
        if handler is not None:
            handler(event)
        self.on_event(event)

    def _started(self, event: Event) -> None:
        entry = self.manifest.entry(event.name)
        self.manifest.update(event.name, status="running", worker=event.worker, started=time.time(),
                             attempts=entry.get("attempts", 0) + 1, error=None)

    def _finished(self, event: Event) -> None:
        result = event.result
        self.result.results[event.name] = result
        self.manifest.update(event.name, **result.as_entry(), finished=time.time())
        if result.status == "failed" and not result.refused and self._tries[event.name] > 0 \
                and not self._stop.is_set():
            self._queue.append(JobRun(self.plans[event.name]))

    def _lost(self, event: Event) -> None:
        """The worker died with the job in hand: resume it on another (its save points are on the drive)."""
        losses = self._losses[event.name] = self._losses.get(event.name, 0) + 1
        if losses > MAX_LOSSES:
            error = f"its worker died {losses} times (last: {event.error})"
            self.result.results[event.name] = JobResult(event.name, "failed", event.worker, error=error)
            self.manifest.update(event.name, status="failed", error=error, finished=time.time())
            return
        self.manifest.update(event.name, status="interrupted", error=f"worker lost: {event.error}")
        if not self._stop.is_set():
            self._tries[event.name] += 1   # the job did not fail: this try does not count
            self._queue.appendleft(JobRun(self.plans[event.name], resume=True))


def summary_row(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The summary table's fields of one job, from its manifest entry."""
    return {k: entry.get(k) for k in ("status", "chunks", "fps", "stall_p99_ms", "rss_max_mib", "wall_s",
                                      "worker", "resumed_at", "error")} | {"name": name}
