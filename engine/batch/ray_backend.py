"""The Ray backend: a batch's jobs on actors of a Ray cluster, one per GPU (or CPU actors without GPUs).

Owns connecting (``local``: start a Ray in this process; ``auto``: the cluster ``ray start`` made on
this machine; any other value: ``ray.init(address=...)``; a Ray already initialised in this process is
used as it is), placing the actors and streaming their work back:

* one actor per GPU (``num_gpus=1``; Ray gives it one device, which it sees as ``cuda:0``); on a
  cluster without GPUs one actor per CPU (``num_cpus=1``), or ``workers`` of them; never more than
  there are jobs. Each actor is a ``Worker`` (``engine.batch.worker``) and loads its model once;
* the jobs' paths are the driver's: the output directory must be shared (NFS, a cluster file system;
  on one machine it is); a spill template's ``$VARS`` are expanded on the actor's node;
* progress: each chunk a job makes is put on a Ray queue the driver drains while it waits;
* an actor that dies (its node lost, its process killed) is reported ``lost``: the driver resumes its
  job on another actor from the job's save points.

Ray is an optional extra (``pip install 'worldpager[ray]'``); without it (``engine.runtime.dependencies``: the
line names the pip command), or when the cluster cannot be reached, ``connect`` raises one
``ConfigError`` line and nothing has started.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from engine.batch.driver import Event, PooledBackend
from engine.batch.worker import JobRun, Worker
from engine.runtime.dependencies import require
from engine.errors import ConfigError

POLL_S = 0.2


def import_ray():
    return require("ray")


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A HOST:PORT address must accept a connection (``ray.init`` would wait on it for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address in ("local", "auto") or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"--ray {address}: cannot reach the Ray cluster ({exc.strerror or exc}); start one "
                          "with `ray start --head` or give its address (--ray HOST:6379)") from None


class BatchActor:
    """What runs inside a Ray actor: one ``Worker``, its progress put on the driver's queue."""

    def __init__(self, label: str, device: str, threads: int | None, progress):
        if threads is not None:
            import torch
            torch.set_num_threads(threads)
        self.worker = Worker(label, device)
        self.progress = progress

    def run(self, job: JobRun):
        name, label = job.plan.name, self.worker.label

        def on_chunk(record: dict) -> None:
            self.progress.put((name, label, {k: record[k] for k in ("chunk", "frames_total", "stall_ms", "wall_ms")}))

        return self.worker.run(job, on_chunk=on_chunk)

    def stop(self) -> None:
        self.worker.request_stop()

    def pid(self) -> int:
        return os.getpid()


def _actor_lost(ray) -> tuple[type[BaseException], ...]:
    """The errors of an actor that died (its process, or its node), as this Ray version names them."""
    names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ActorUnavailableError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


@dataclass
class _Actor:
    label: str
    handle: object
    job: JobRun | None = None
    ref: object = None
    alive: bool = True
    told_stop: bool = False


class RayBackend(PooledBackend):
    """Jobs on Ray actors (see the module docstring); ``connect`` first."""

    kind = "ray"

    def __init__(self, ray, gpus: int, cpus: int, host_bytes: int, workers: int | None = None, jobs: int = 1):
        self.ray = ray
        self.uses_gpus = gpus > 0
        self.workers = max(1, min(gpus if gpus > 0 else (workers or cpus), jobs))
        self.host_bytes = host_bytes
        self.actors: list[_Actor] = []
        self._stopping = False
        self.started_ray = False

    def shutdown(self) -> None:
        """Disconnect from Ray if ``connect`` initialised it (a local Ray it started stops with it)."""
        if self.started_ray:
            self.ray.shutdown()
            self.started_ray = False

    @classmethod
    def connect(cls, address: str, workers: int | None = None, jobs: int = 1) -> "RayBackend":
        ray = import_ray()
        started = not ray.is_initialized()
        if started:
            _check_reachable(address)
            try:
                if address == "local":
                    ray.init(include_dashboard=False, log_to_driver=False)
                else:
                    ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ConfigError(f"--ray {address}: cannot reach the Ray cluster ({reason}); start one with "
                                  "`ray start --head` or give its address (--ray HOST:6379)") from None
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        if gpus == 0 and cpus == 0:
            raise ConfigError(f"--ray {address}: the cluster has neither GPUs nor CPUs to place actors on")
        if workers is not None and gpus > 0:
            raise ConfigError(f"--workers {workers} with --ray: the cluster has {gpus} GPUs and gets one actor "
                              "per GPU (--workers sets the number of CPU actors of a cluster without GPUs)")
        backend = cls(ray, gpus, cpus, int(resources.get("memory", 0)), workers, jobs)
        backend.started_ray = started
        return backend

    def stop(self) -> None:
        """Safe from a signal handler: only a flag; the loop tells the actors."""
        self._stopping = True

    def _tell_stop(self) -> None:
        for actor in self.actors:
            if actor.alive and actor.job is not None and not actor.told_stop:
                actor.handle.stop.remote()
                actor.told_stop = True

    def _start(self) -> None:
        from ray.util.queue import Queue

        self.progress = Queue(actor_options={"num_cpus": 0})
        remote = self.ray.remote(BatchActor)
        resources = {"num_gpus": 1, "num_cpus": 0} if self.uses_gpus else {"num_cpus": 1}
        device = "cuda:0" if self.uses_gpus else "cpu"
        for i in range(self.workers):
            label = f"ray-{i}"
            handle = remote.options(**resources, max_concurrency=2, name=None).remote(
                label, device, None if self.uses_gpus else 1, self.progress)
            self.actors.append(_Actor(label, handle))

    def _loop(self, take, emit, stopping) -> None:
        ray = self.ray
        while any(a.alive for a in self.actors):
            for actor in self.actors:
                if actor.alive and actor.job is None and not stopping() and (job := take()) is not None:
                    actor.job, actor.ref = job, actor.handle.run.remote(job)
                    emit(Event("started", job.plan.name, actor.label))
            busy = {a.ref: a for a in self.actors if a.job is not None}
            if not busy:
                return
            if self._stopping:
                self._tell_stop()
            ready, _ = ray.wait(list(busy), num_returns=1, timeout=POLL_S)
            self._drain(emit)
            for ref in ready:
                self._finished(busy[ref], ref, emit)

    def _drain(self, emit) -> None:
        size = self.progress.size()
        if size:
            for name, label, record in self.progress.get_nowait_batch(size):
                emit(Event("chunk", name, label, record=record))

    def _finished(self, actor: _Actor, ref, emit) -> None:
        ray = self.ray
        job, actor.job, actor.ref = actor.job, None, None
        try:
            result = ray.get(ref)
        except _actor_lost(ray) as exc:
            actor.alive = False
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            emit(Event("lost", job.plan.name, actor.label, error=f"Ray actor died: {reason[:200]}"))
            return
        self._drain(emit)   # the job's last chunks before its result
        emit(Event("finished", job.plan.name, actor.label, result=result))

    def _close(self) -> None:
        for actor in self.actors:
            if actor.alive:
                self.ray.kill(actor.handle)
        self.ray.kill(self.progress.actor)
        self.actors = []
