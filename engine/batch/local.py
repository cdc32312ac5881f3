"""Batch backends on one machine: the batch's own process, or one worker process per device.

Owns starting, feeding and stopping local workers. ``InlineBackend`` runs one ``Worker`` in this
process (one device: no process to start, nothing to pickle). ``ProcessBackend`` starts one process per
device (``spawn``: a fresh interpreter, no inherited threads or CUDA state), each with its own
``Worker`` and so its own loaded model; jobs go to a free worker's task queue, events come back on one
queue. A worker process dies with the batch (``PR_SET_PDEATHSIG``, and a watch on its parent), so a
killed batch leaves no worker rendering on; a worker that dies is reported ``lost`` with its job.
Worker processes ignore Ctrl-C themselves: the batch decides, and tells them through a shared event.

CPU workers split the machine's cores between them (``torch.set_num_threads``), so that N workers do
not oversubscribe the CPU N times over.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Callable

from engine.batch.driver import Event, PooledBackend
from engine.batch.worker import JobRun, Worker

POLL_S = 0.2


def cpu_threads(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


class InlineBackend:
    """One worker, in this process."""

    kind = "local"
    workers = 1

    def __init__(self, device: str | None = None, label: str = "local-0"):
        self.worker = Worker(label, device)

    def stop(self) -> None:
        self.worker.request_stop()

    def run(self, take, emit, stopping) -> None:
        label = self.worker.label
        while not stopping() and (job := take()) is not None:
            name = job.plan.name
            emit(Event("started", name, label))
            result = self.worker.run(job, on_chunk=lambda record: emit(Event("chunk", name, label, record=record)))
            emit(Event("finished", name, label, result=result))


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when the batch dies; elsewhere (and for the race before the
    call) a thread watches the parent."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            threading.Event().wait(1.0)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _worker_main(label: str, device: str, threads: int | None, parent: int, tasks, events, stop) -> None:
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    worker = Worker(label, device)
    threading.Thread(target=lambda: (stop.wait(), worker.request_stop()), daemon=True, name="stop").start()
    while (job := tasks.get()) is not None:
        name = job.plan.name
        events.put(Event("started", name, label))
        result = worker.run(job, on_chunk=lambda record: events.put(Event("chunk", name, label, record=record)))
        events.put(Event("finished", name, label, result=result))


@dataclass
class _Proc:
    label: str
    process: mp.process.BaseProcess
    tasks: object
    job: JobRun | None = None
    alive: bool = True


class ProcessBackend(PooledBackend):
    """One worker process per device (``devices``: e.g. ``["cpu", "cpu"]`` or ``["cuda:0", "cuda:1"]``)."""

    kind = "local"

    def __init__(self, devices: list[str]):
        self.devices = devices
        self.workers = len(devices)
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        self._events = self._ctx.Queue()
        self._procs: list[_Proc] = []

    def stop(self) -> None:
        self._stop.set()

    def _start(self) -> None:
        threads = cpu_threads(self.workers)
        for i, device in enumerate(self.devices):
            label = f"local-{i}"
            tasks = self._ctx.Queue()
            process = self._ctx.Process(
                target=_worker_main, name=f"worldpager-batch-{label}", daemon=True,
                args=(label, device, threads if device == "cpu" else None, os.getpid(), tasks, self._events,
                      self._stop))
            process.start()
            self._procs.append(_Proc(label, process, tasks))

    def _loop(self, take, emit, stopping) -> None:
        by_label = {p.label: p for p in self._procs}
        while any(p.alive for p in self._procs):   # all gone: what is left stays pending in the manifest
            for proc in self._procs:
                if proc.alive and proc.job is None and not stopping() and (job := take()) is not None:
                    proc.job = job
                    proc.tasks.put(job)
            if not any(p.job is not None for p in self._procs):
                return
            try:
                event = self._events.get(timeout=POLL_S)
            except queue.Empty:
                self._check_alive(emit)
                continue
            if event.kind == "finished":
                by_label[event.worker].job = None
            emit(event)

    def _check_alive(self, emit: Callable[[Event], None]) -> None:
        for proc in self._procs:
            if proc.alive and not proc.process.is_alive():
                proc.alive = False
                if proc.job is not None:
                    job, proc.job = proc.job, None
                    emit(Event("lost", job.plan.name, proc.label,
                               error=f"worker process {proc.process.pid} exited with {proc.process.exitcode}"))

    def _close(self) -> None:
        for proc in self._procs:
            if proc.alive and proc.process.is_alive():
                proc.tasks.put(None)
        for proc in self._procs:
            proc.process.join(timeout=30)
            if proc.process.is_alive():
                print(f"worldpager: batch worker {proc.label} did not exit; terminating it", file=sys.stderr)
                proc.process.terminate()
                proc.process.join(timeout=10)
