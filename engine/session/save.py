"""Save points of a generation session: when to make one, what goes in, and putting it back.

Owns the session's side of crash survival (the file format is ``engine.session.savepoint``):

* **When.** ``SaveSchedule``: every ``save_every`` chunks, or, by default (``save_every`` None), at the
  first chunk boundary after ``save_interval_s`` (default 30) seconds of wall time since the last one;
  0 = never. Only that default depends on the wall clock: how many chunks lie between two save points
  then depends on the machine's speed (a reader of the log selects records by type).
  A boundary is always a valid place: the video writer closes a segment per chunk (``VideoWriter``),
  so the MP4 up to any chunk is a complete prefix that a resumed run continues exactly.
* **What.** ``capture`` takes, between chunks c−1 and c: the model's running state and the attention
  context's (the local window at full precision, MG2's action windows), the memory's state
  (``SessionMemory.state_tensors``: which chunk sits in which memory slot and how its keys were moved,
  the set staged for c), and facts (chunk, frames written, the config digest).
* **Durable before it counts.** Capturing copies to host memory on the loop's thread (small for the
  window); ``SavePointWriter`` writes on a background thread once the memory's chunks that a resumed
  run may retrieve are on the drive (``SessionMemory.durable``) — temporary file, fsync, rename,
  directory fsync — and reports the save point (bytes, ms) to be logged as a ``savepoint`` record.
  One save point is in flight at a time; a boundary reached while one is still being written is skipped.
* **Back.** ``restore`` puts everything back into a freshly built model, context and memory.

Save points live in ``<out>.save/`` (the newest ``keep_savepoints``, default two, are kept): they belong
to the video they continue, and a run can be resumed or forked (``engine.session.fork``) at any of them.
"""
from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from engine.config import SessionConfig
from engine.model.state_tensors import nest, sub
from engine.settings.overlay import config_to_json
from engine.session.savepoint import SavePoint, write_savepoint

KEEP = 2
ABORT_JOIN_S = 0.2   # an aborted close waits this long for a save point that is almost done


def savepoint_dir(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".save")


def config_digest(cfg: SessionConfig, with_spill: bool = False, with_paging: bool = False) -> str:
    """What must not change between a run and its resumption (the output paths, where the spill
    directory is — ``resume --spill`` moves it, its contents are checked on their own — how many save
    points are kept, whether decoding overlaps denoising, the CPU's threads and where the context K/V
    waits, ``--kv-paging``, may). ``with_spill``: the digest as save points written before the spill
    directory could move have it (its path included); ``with_paging``: as those written while the
    paging was in it have it."""
    data = config_to_json(cfg)
    for name in ("out", "log", "keep_savepoints", "decode_overlap", "save_interval_s", "threads"):
        data.pop(name, None)
    if not with_spill:
        data["memory"].pop("spill", None)
    if not with_paging:
        data["memory"].pop("kv_paging", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class SaveSchedule:
    def __init__(self, save_every: int | None, interval_s: float = 30.0, clock=time.monotonic):
        self.every, self.interval_s, self.clock = save_every, interval_s, clock
        self.last = clock()

    def due(self, chunk: int) -> bool:
        """Whether to save before generating ``chunk`` (never before chunk 1)."""
        if chunk <= 0 or self.every == 0:
            return False
        if self.every is None:
            return self.clock() - self.last >= self.interval_s
        return chunk % self.every == 0

    def saved(self) -> None:
        self.last = self.clock()


def capture(chunk: int, frames_total: int, cfg: SessionConfig, model, ctx, memory) -> SavePoint:
    tensors = {**nest("model", model.state_tensors()), **nest("ctx", ctx.state_tensors()),
               **nest("memory", memory.state_tensors())}
    facts = {"chunk": chunk, "frames_total": frames_total,
             "config_digest": config_digest(cfg), "memory": memory.state_facts(), "model": model.name,
             "weights": cfg.weights}
    return SavePoint(chunk=chunk, facts=facts, tensors=tensors)


def restore(sp: SavePoint, model, ctx, memory) -> None:
    model.load_state_tensors(sub("model", sp.tensors))
    ctx.load_state_tensors(sub("ctx", sp.tensors))
    memory.load_state(sp.facts["memory"], sub("memory", sp.tensors))


@dataclass
class Written:
    chunk: int
    path: Path | None
    bytes: int
    write_ms: float
    wait_ms: float
    error: str | None = None


class SavePointWriter:
    """Writes captured save points on a background thread, each once its memory is durable."""

    def __init__(self, directory: Path, durable=lambda chunk, timeout: True, keep: int = KEEP):
        self.directory, self.durable, self.keep = Path(directory), durable, keep
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._done: queue.Queue = queue.Queue()
        self._busy = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="wp-savepoint", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def submit(self, sp: SavePoint) -> bool:
        """Queue ``sp``; False (and nothing queued) while the previous one is still being written."""
        if self._busy.is_set():
            return False
        self._busy.set()
        self._idle.clear()
        self._jobs.put(sp)
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no save point is being written (a stop's last save point must not be skipped);
        interruptible by a signal's handler (a second Ctrl-C aborts)."""
        return self._idle.wait(timeout)

    def finished(self) -> list[Written]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout: float = 60.0, abort: bool = False) -> list[Written]:
        """Finish the save point in flight, then stop; what finished since the last ``finished``.
        ``abort`` (a second signal): wait for none; one still waiting on the drive is left unfinished
        (it was never renamed into place, so the newest whole save point stays the newest)."""
        try:
            self._jobs.put(None, timeout=0 if abort else None)
        except queue.Full:   # one was just submitted and not yet taken: the thread is a daemon
            return self.finished()
        self._thread.join(ABORT_JOIN_S if abort else timeout)
        return self.finished()

    def _run(self) -> None:
        while (sp := self._jobs.get()) is not None:
            t0 = time.perf_counter()
            try:
                if not self.durable(sp.chunk, 120.0):
                    raise TimeoutError("the memory's chunks did not reach the drive in time")
                t1 = time.perf_counter()
                path = write_savepoint(self.directory, sp, keep=self.keep)
                self._done.put(Written(sp.chunk, path, path.stat().st_size, (time.perf_counter() - t1) * 1e3,
                                       (t1 - t0) * 1e3))
            except Exception as exc:   # reported through the log; the session goes on
                self._done.put(Written(sp.chunk, None, 0, 0.0, (time.perf_counter() - t0) * 1e3,
                                       f"{type(exc).__name__}: {exc}"))
            finally:
                sp = None              # do not hold the captured window until the next save point
                self._busy.clear()
                self._idle.set()
