"""The chunk loop: owns the order of the steps of a generation session, not their policies.

For chunk c (DESIGN §2):
  1. inputs   — the input source (``engine.session.inputs``: a trajectory file, or live play) makes c's
     actions (model input) and poses (retrieval key) known; a live source may block for them (a pause,
     not a stall) or end the session;
  2–4. memory — select c's retrieval set, take what was staged, start staging c+1 (``SessionMemory``);
  5. denoise  — the model's steps (MG2: plus the clean pass), which write c's KV into the context;
  6. store    — c's clean KV enters the retrieval memory; the context's window rolls (``commit``);
  7. decode + mux — the streaming VAE decoder's frames are appended to the MP4 (``decode_overlap``: on
     a worker thread while chunk c+1 denoises, ``engine.session.decode``);
  8. log      — one JSON line per chunk whose frames are in the file, then the caller's hook.

The session drives every model through the ``WorldModel`` protocol only (``engine.model.interface``):
the model comes from the one factory (``engine.model.registry``), whose ``ModelSpec`` gives what set-up
needs before the model is built (start-image size, action space, video grid, frame size); the
attention context is shaped by ``model.layout``, the retriever keyed by ``model.camera_poses()`` on
``model.grid``, re-rotation done by ``model.rotate_time``.

Set-up validates every user input (start image, trajectory, output and log paths, the spill directory)
and checks that the settings fit the memory budget (``engine.session.preflight``) before anything is
written; a fork's outputs keep their staging names until its model is loaded (``Fork.commit``), a new
run's replace an earlier run's only once its first chunk is in the MP4 (``engine.session.outputs``).
If a new run fails before its first chunk is in the file (the checks, the model's load, the memory's
set-up: its pool, its spill directory, its threads), only the files this session created are removed
(the spill directory's too). After that the MP4 and the log are closed on every exit path (the log with
its summary line), so a failed or interrupted run leaves a playable file and a complete log; closing
one part never stops the others from closing, and never replaces the error that ended the run
(``engine.files.cleanup``): an output drive that fails mid-run (EIO, ENOSPC, read-only after an error) is one
error naming the file, the MP4 keeping its whole fragments and the log its whole lines as far as the
drive took them.
``request_stop()`` (e.g. from a SIGINT or SIGTERM handler) ends the run after the chunk in hand;
a source whose inputs end (``take`` returns None) ends it too, as done.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from engine.files.cleanup import Cleanup
from engine.runtime.cpu_threads import decode_overlap
from engine.config import SessionConfig
from engine.errors import ConfigError, OutputError, WorldPagerError
from engine.files.input_files import shown
from engine.files.limits import file_size_text, file_too_large, limit_error
from engine.runtime.pause_clock import PauseClock
from engine.memory.types import DiskFullError
from engine.io.image import default_start_image_path, load_image
from engine.io.trajectory import Trajectory
from engine.io.trajectory.live import recorded_frames
from engine.io.video import VideoWriter
from engine.memory.allocator import pin_allocator
from engine.model.interface import KeyPlacingModel, LiveInputModel, WorldModel
from engine.model.kv_context import AttentionContext
from engine.model.registry import ModelCache, ModelSpec, build_world_model, model_header_facts, model_kv_layout, model_spec
from engine.settings.overlay import config_to_json
from engine.session.positions import Rerotation
from engine.planner.session_kv import session_staging
from engine.session.preflight import (Budget, check_memory, check_output_paths, check_spill_drive, check_spill_quota,
                                      device_budget,
                                      host_budget, spill_block_bytes)
from engine.retrieval.retriever import OBSERVED_FIRST, PREDICTORS, Retriever
from engine.session.savepoint import SavePoint
from engine.session.outputs import NewOutputs
from engine.session.fork import Fork, base_layers
from engine.session.memory import SessionMemory
from engine.session.observe import mark_observed, session_path
from engine.session.decode import DecodeStage, Decoded
from engine.session.inputs import FileSource, InputSource
from engine.session.save import SavePointWriter, SaveSchedule, capture, restore, savepoint_dir
from engine.session.resume import unresumable_note
from engine.runtime.telemetry import SessionLog, available_memory, process_rss
log = logging.getLogger("worldpager.session")


def _ms(seconds: float, paused_s: float) -> float:
    """A step's milliseconds, less the time the process was stopped during it."""
    return max(0.0, seconds - paused_s) * 1e3


@dataclass
class SessionResult:
    out: Path
    log: Path
    chunks: int                 # chunks generated (fewer than requested when stopped early)
    frames: int
    wall_s: float
    status: str                 # done | interrupted
    made: int = 0               # chunks this run generated (a resumed or forked run inherits the others)
    savepoint_errors: list[str] = field(default_factory=list)   # save points that could not be written


def resolve_device(name: str) -> tuple[torch.device, torch.dtype]:
    """``auto`` picks CUDA with bf16 when present, else the CPU with float32."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = checked_device(name)
    return device, (torch.bfloat16 if device.type == "cuda" else torch.float32)


def checked_device(name: str) -> torch.device:
    """``name`` as a device this process has: ``cpu``, or ``cuda``/``cuda:N`` with that GPU present."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {name!r} is not a device WorldPager runs on: use cpu, cuda or cuda:N "
                          "(or auto)")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"--device {name}: no CUDA device here; use --device cpu")
        if device.index is not None and device.index >= count:
            raise ConfigError(f"--device {name}: this machine has {count} CUDA device(s) "
                              f"(cuda:0 to cuda:{count - 1})")
    return device


def device_bytes(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def device_memory_budget(cfg: SessionConfig, device: torch.device) -> Budget | None:
    """The device's budget for the attention context and staging slots; None on the CPU (host memory)."""
    if device.type != "cuda":
        return None
    return device_budget(cfg, torch.cuda.mem_get_info(device)[0])


def _streamed(model) -> dict:
    """The chunk's ``weight_bytes_streamed`` (blocks copied from host memory; engine.model.weight_stream)."""
    placement = getattr(model, "weight_placement", None)
    return {} if placement is None else {"weight_bytes_streamed": placement.take_streamed()}


class Session:
    """One generation session: constructing it validates the inputs; ``run()`` loads and generates."""

    def __init__(self, cfg: SessionConfig, on_chunk: Callable[[dict], None] | None = None,
                 on_output: Callable[[int, torch.Tensor], None] | None = None,
                 resume_from: SavePoint | None = None, fork_of: Fork | None = None,
                 models: ModelCache | None = None, batch: dict | None = None,
                 source: InputSource | None = None,
                 on_frames: Callable[[int, torch.Tensor], None] | None = None):
        """``resume_from``: continue the run that wrote this save point (``engine.session.resume``):
        its MP4 and log are continued, not created. With ``fork_of``, ``resume_from`` is the parent's
        save point and the MP4 and log are the branch's copies of the parent's (``engine.session.fork``).
        ``models``: networks loaded by earlier sessions of this process, reused when they are the ones
        this session needs (a batch worker's; ``engine.model.model_cache``). ``batch``: a batch job's
        mark (its attempt's run id), written as the ``batch`` field of the log's header, or of the
        ``resume`` record of a resumed run: how a batch tells its own outputs (``engine.batch.ownership``).
        ``source``: where the chunks' inputs come from (``engine.session.inputs``; default: the config's
        trajectory file, or the model's default path). ``on_frames(chunk, frames)``: each chunk's video
        frames as decoded (``WorldModel.decode``'s tensor), before they are muxed."""
        # First, before anything sizable is allocated: fixed malloc thresholds keep RSS flat (DESIGN §3).
        self.allocator = pin_allocator()
        self.cfg = cfg
        self.models = models
        self._batch = {} if batch is None else {"batch": batch}
        self.spec: ModelSpec = model_spec(cfg)
        self.on_chunk = on_chunk or (lambda record: None)
        self.on_output = on_output or (lambda chunk, latents: None)   # the model's output, before decoding
        self.on_frames = on_frames or (lambda chunk, frames: None)    # decoded frames, before the mux
        self.device, self.dtype = resolve_device(cfg.device)
        self._stop = threading.Event()
        self.outputs: NewOutputs | None = None   # a new run's files: the only ones it may remove
        self._header_written = False
        self.savepoint_errors: list[str] = []   # save points that could not be written (the user is told)
        spec = self.spec
        check_output_paths(cfg)
        check_spill_drive(cfg, spill_block_bytes(cfg, model_kv_layout(cfg), str(self.dtype).removeprefix("torch.")),
                          reopening=resume_from is not None and fork_of is None)
        check_spill_quota(cfg, model_kv_layout(cfg), str(self.dtype).removeprefix("torch."))
        check_memory(cfg, spec.grid, model_kv_layout(cfg), dtype_bytes=self.dtype.itemsize,
                     dtype_name=str(self.dtype).removeprefix("torch."),
                     host=host_budget(cfg, process_rss(), available_memory()),
                     device=device_memory_budget(cfg, self.device))
        self.image = load_image(cfg.image or default_start_image_path(), *spec.image_size) if spec.uses_image else None
        if source is None:
            # --observe: the observed clip's chunks come first; a fork's trajectory is still staged
            path = session_path(cfg if fork_of is None else fork_of.staged_config(), spec)
            # a recording of live play ends the session where it ends (after what was observed before it)
            recorded = None if fork_of is not None else recorded_frames(cfg.trajectory, path.followed)
            source = FileSource(path.trajectory, None if recorded is None else path.observed_frames + recorded)
            self.observed_chunks, self.observed = path.observed_chunks, path.observed
        else:   # live play: the source holds what it observes first (engine.play.run)
            self.observed_chunks, self.observed = getattr(source, "observed", (0, None))
        self.source = source
        self.trajectory: Trajectory = source.trajectory
        self._inputs_ended = False   # the source's inputs ended: the run is done where it stopped
        height, width = spec.frame_size
        # Opened now, before the (slow) load, so a bad output path fails first; the factory checks
        # that the built model's frame size and grid are the ones promised here.
        self.resume_from = resume_from
        self.fork_of = fork_of
        self._saved_through = 0 if resume_from is None else resume_from.chunk   # newest durable save point
        self._memory = None   # the running session's memory (save points written give its dropped blocks back)
        self.log: SessionLog | None = None
        if resume_from is not None:
            frames = resume_from.facts["frames_total"]
            video, log = (cfg.out, cfg.log_path) if fork_of is None else \
                (fork_of.staging(cfg.out), fork_of.staging(cfg.log_path))   # renamed in place by load()
            self.writer = VideoWriter.reopen(video, frames, width, height, spec.grid.fps,
                                             preset=spec.encoder_preset)
            try:
                self.log = SessionLog(log, continue_before=resume_from.chunk)
            except BaseException:
                self.writer.close()
                raise
        else:
            self.outputs = NewOutputs(cfg, width, height, spec.grid.fps, spec.encoder_preset)
            self.writer, self.log = self.outputs.writer, self.outputs.log
        self.model: WorldModel | None = None
        self._ran = False         # run() began: from there on it closes or discards the outputs itself
        self._discarded = False   # the outputs were closed (and a new run's removed) before run()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, kind, exc, traceback) -> None:
        """A caller's step that fails between construction and ``run()`` (its warnings, its thread
        settings, anything before or after the load) leaves nothing: the outputs this session created
        are removed, as a failed load's are. The error goes on (it is the one reported)."""
        if exc is not None and not self._ran and not self._discarded:
            self._discard_outputs("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", exc)

    def request_stop(self) -> None:
        """Finish the chunk in hand, then stop (thread- and signal-safe)."""
        self._stop.set()

    def warnings(self) -> list[str]:
        """What the user is told before the first chunk (the header's ``warnings``): one line if the
        camera cannot follow the trajectory file closely, one if the run will make no save points."""
        lag = self.trajectory.lag_warning()
        return ([] if lag is None else [lag]) + ([] if self.fork_of is not None else unresumable_note(self.cfg))

    def load(self) -> None:
        """Build the model (loading its weights); on failure the empty outputs are removed."""
        try:
            self.model = build_world_model(self.cfg, self.image, self.trajectory, self.device, self.dtype,
                                           self.models)
            if self.fork_of is not None:   # the set-up is complete: the branch's files take their names
                self.fork_of.commit()
                self.writer.path, self.log.path = self.cfg.out, self.cfg.log_path
        except BaseException as exc:   # a signal while loading is an interruption (a resume's log says so)
            self._discard_outputs("interrupted" if isinstance(exc, KeyboardInterrupt) else "failed", exc)
            raise

    def _discard_outputs(self, status: str = "failed", failing: BaseException | None = None) -> None:
        """Nothing was generated: close and remove the empty outputs this session created (only those,
        so that the clean-up can neither fail on nor delete a path the user gave by mistake). A resume's
        or a fork's files were there before: they are closed (the log with its summary), not removed. The
        error that brought us here is the one reported (``engine.files.cleanup``)."""
        self._discarded = True
        if self.outputs is not None:
            self.outputs.discard(status)
            return
        cleanup = Cleanup(failing)
        cleanup.run(self.writer.close)
        if self.log is not None:
            cleanup.run(self.log.close, status)
        cleanup.finish()

    def _first_chunk_pending(self) -> bool:
        """A new run none of whose chunks is in its MP4 yet (so it has generated nothing)."""
        return self.outputs is not None and self.log.summary.chunks == 0

    def _discard_setup(self, memory: SessionMemory | None, status: str, failing: BaseException | None = None) -> None:
        """The run ends before its first chunk: the memory's threads stop and the spill files it made go,
        then the outputs this session created."""
        if memory is not None:
            try:
                memory.close(abort=True)   # nothing was stored: nothing to wait for
                memory.discard()
            except Exception:   # the error that ends the run is the one to report
                log.debug("memory clean-up after a failed set-up failed", exc_info=True)
        self._discard_outputs(status, failing)

    def run(self) -> SessionResult:
        """Generate every chunk (loading first if needed); video and log are closed on every path."""
        start = time.perf_counter()
        self._ran = True
        if self.model is None:
            self.load()
        model = self.model
        self._pauses = PauseClock()
        status, chunks, frames, memory = "failed", 0, 0, None
        try:
            self._pauses.start()   # a pipe and a thread: out of either is a failed set-up like any other
            pre_rope = self.cfg.memory.keys == "pre-rope"
            assert not pre_rope or isinstance(model, KeyPlacingModel), "config validation admits MG2 only"
            ctx = AttentionContext(model.layout, memory_chunks=self._memory_chunks(), dtype=self.dtype,
                                   device=self.device, keys_before_rotation=pre_rope,
                                   paging=self.cfg.memory.kv_paging)
            retriever = Retriever(model.camera_poses(), model.grid,
                                  predictor=PREDICTORS[self.cfg.memory.predictor](),
                                  first_visit=self.cfg.memory.retrieve_visit == "first",
                                  hedge=session_staging(self.cfg, model.layout).hedge_slots > 0,
                                  stick=self.cfg.memory.stick, **self._observed_first())
            reopened = self.resume_from is not None and self.fork_of is None   # its own spill directory
            memory = SessionMemory(self.cfg, model.layout, ctx, retriever, self.device, self.dtype,
                                   rerotation=Rerotation.for_session(self.cfg, model),
                                   resume_before=self.resume_from.chunk if reopened else None,
                                   base_layers=base_layers(self.resume_from, self.fork_of),
                                   place_keys=model.place_keys if pre_rope else None)
            if self.resume_from is None:
                self._header(memory.host_baseline_bytes, self._savepoint_plan(memory))
            elif self.fork_of is not None:
                self._header_written = True
                self.log.record("fork", **self.fork_of.record(), started=time.time(),
                                kv_paging=self.cfg.memory.kv_paging)
            else:
                self._header_written = True
                self.log.record("resume", chunk=self.resume_from.chunk,
                                frames_total=self.resume_from.facts["frames_total"], started=time.time(),
                                kv_paging=self.cfg.memory.kv_paging, **self._batch)
            chunks, frames = self._loop(ctx, memory)
            status = "interrupted" if self._stop.is_set() and chunks < self.cfg.chunks and not self._inputs_ended \
                else "done"
        except BaseException as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            status = "interrupted" if interrupted else "failed"
            if self._first_chunk_pending() and (not interrupted or self.outputs.staged):
                self._discard_setup(memory, status, exc)
            else:
                self._close(memory, status, abort=interrupted, failing=exc, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self._pauses.stop()
        if self._first_chunk_pending() and self.outputs.staged:   # stopped before its first chunk
            self._discard_setup(memory, status)                  # the earlier run's files stay
        else:
            self._close(memory, status)
        inherited = 0 if self.resume_from is None else self.resume_from.chunk
        return SessionResult(self.cfg.out, self.cfg.log_path, chunks, frames,
                             time.perf_counter() - start, status, savepoint_errors=list(self.savepoint_errors),
                             made=chunks - inherited)

    def _savepoint_plan(self, memory: SessionMemory) -> str:
        """What the header says about save points."""
        if self.cfg.save_every == 0:
            return "none (--save-every 0)"
        why_not = memory.savepoints_possible
        if why_not is not None:
            return f"none: {why_not}"
        every = f"about every {self.cfg.save_interval_s:g} s" if self.cfg.save_every is None else f"every {self.cfg.save_every} chunks"
        return f"{every} to {savepoint_dir(self.cfg.out)}"

    def _header(self, host_baseline_bytes: int | None, savepoints: str | None = None) -> None:
        """The log's first line; written once the pool exists, so that it can say what the pool was
        sized from (``host_baseline_bytes``: RSS just before the pool; None without one)."""
        model = self.model
        self.log.header(config_to_json(self.cfg), model_header_facts(self.cfg), device=str(self.device),
                        dtype=str(self.dtype).removeprefix("torch."), weights=model.weights,
                        trajectory=self.trajectory.describe(), inputs=self.source.description,
                        notes=list(getattr(model, "notes", [])),
                        tracking=self.trajectory.tracking.as_record(), warnings=self.warnings(),
                        observed=None if self.observed is None else {"chunks": self.observed_chunks,
                                                                      "source": self.observed},
                        allocator=self.allocator.as_record(), host_baseline_bytes=host_baseline_bytes,
                        savepoints=savepoints, kv_paging=self.cfg.memory.kv_paging, **self._weight_facts(), **self._batch)
        self._header_written = True

    def _weight_facts(self) -> dict:
        """The header's ``weight_plan``: the DiT's weight format, resident and streamed blocks, device bytes
        (``engine.model.weight_place``); nothing for a model without blocks (synthetic)."""
        placement = getattr(self.model, "weight_placement", None)
        return {} if placement is None else {"weight_plan": placement.facts()}

    def _close(self, memory: SessionMemory | None, status: str, abort: bool = False,
               failing: BaseException | None = None, **extra) -> None:
        """Close the MP4, the memory and the log, each whatever the others did: ``failing`` (the run's
        error), else the first error of the close, is the one raised; a later one is a warning
        (``engine.files.cleanup``). ``abort`` (a second signal): the memory waits for nothing the drive holds."""
        cleanup = Cleanup(failing)
        if not self._header_written:   # set-up of the memory failed: the log still starts with a header
            cleanup.run(self._header, None)
        summary: dict = {}
        if memory is not None:   # out of memory or descriptors may fail even this
            cleanup.run(lambda: summary.update(memory.summary() or {}))
        # A second signal can land between a chunk's mux and its log record, and a log line can fail
        # where its chunk's frames did not: the video then holds a chunk the log does not, and is cut
        # back to the log's frames (a run resumed or forked from the log's save points expects those).
        if status == "done":
            cleanup.run(self.writer.close)
        else:
            cleanup.run(self.writer.cut_back, self.log.summary.frames)
        if memory is not None:
            cleanup.run(memory.close, abort=abort)
        # a second signal during the close (it aborts the memory's): the log still ends
        cleanup.run(self.log.close, status, store=self.cfg.memory.store, positions=self.cfg.positions,
                    **summary, **extra)
        cleanup.finish()

    def _observed_first(self) -> dict:
        """The retriever's observed chunks and their bonus: a session re-projecting with depth (the arena
        model, whose chunk 0 is always the world's true view) retrieves observed chunks first."""
        if not self.cfg.arena_reproject_depth:
            return {"observed_chunks": self.observed_chunks, "observed_bonus": 0.0}
        return {"observed_chunks": max(self.observed_chunks, 1), "observed_bonus": OBSERVED_FIRST}

    def _memory_chunks(self) -> int:
        mem = self.cfg.memory
        return 0 if mem.store == "window" else mem.retrieve_k + (1 if mem.sink else 0)

    def _drive_stopped(self, failure: BaseException, done: int, memory: SessionMemory) -> WorldPagerError:
        """The one-line error of a drive that stopped taking the memory's chunks after ``done`` chunks
        (a write that ran out of memory or descriptors is that, not the drive's fault)."""
        limit = limit_error(failure)
        if limit is not None:
            return limit
        spill = self.cfg.memory.spill
        left = self.cfg.chunks - done
        need = left * memory.chunk_bytes()
        try:
            usage = shutil.disk_usage(spill)
            free = f"{usage.free / 2**20:.0f} MiB free" if usage.total else "free space unknown"
        except OSError:
            free = "free space unknown"
        again = (f"`worldpager resume {self.cfg.out}` goes on from the save point before chunk {self._saved_through} "
                 "(with --spill DIR, from the spill directory moved to another drive)"
                 if self._saved_through else "no save point was made yet: the run must start over")
        if isinstance(failure, DiskFullError):
            return OutputError(f"the spill drive is full: {spill} ({free}); the {left} chunks left need about "
                               f"{need / 2**20:.0f} MiB more ({memory.chunk_bytes() / 2**10:.0f} KiB a chunk); "
                               f"free space, then {again}")
        if file_too_large(failure):   # ulimit -f: no drive is at fault
            return OutputError(f"cannot write the spill directory {shown(spill)}: File too large: {file_size_text()}, "
                               f"then {again}")
        reason = str(failure).splitlines()[0] if str(failure) else type(failure).__name__
        return OutputError(f"the spill drive failed: {reason}; check or replace the drive under {spill}, "
                           f"then {again}")

    def _log_savepoints(self, written) -> None:
        for w in written:
            if w.path is not None:
                self._saved_through = max(self._saved_through, w.chunk)
                if self._memory is not None:
                    self._memory.savepoint_written(w.chunk)
            fields = {"chunk": w.chunk, "bytes": w.bytes, "write_ms": round(w.write_ms, 2),
                      "wait_ms": round(w.wait_ms, 2)}
            self.log.record("savepoint", **fields, **({"path": str(w.path)} if w.path else {"error": w.error}))
            if w.path is None:   # said at once, and the run's exit says it again at the end
                self.savepoint_errors.append(f"save point before chunk {w.chunk}: {w.error}")
                if self._memory is not None and self._memory.drive_failure() is not None:
                    continue     # the drive failed: the session stops with that error, one line naming it
                log.warning("worldpager: warning: save point before chunk %s not written: %s", w.chunk, w.error)

    def _saver(self, memory: SessionMemory) -> SavePointWriter | None:
        """The save-point writer, or None (``--save-every 0``, or a memory that no drive holds: noted)."""
        if self.cfg.save_every == 0:
            return None
        if memory.savepoints_possible is not None:   # the header says why
            return None
        return SavePointWriter(savepoint_dir(self.cfg.out), durable=memory.durable, keep=self.cfg.keep_savepoints)

    def _log_decoded(self, done: list[Decoded]) -> None:
        """Step 8 for chunks whose frames are in the file: their log line, then the caller's hook."""
        if done and self.outputs is not None:   # a frame is in the file: the run's files take their names
            self.outputs.commit()
        for d in done:
            d.record.update(frames=d.frames, frames_total=d.frames_total, decode_ms=d.decode_ms)
            self.log.chunk(d.record)
            self.on_chunk(d.record)

    def _decode(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        """The model's frames of ``chunk``; an observed chunk's carry the observed mark."""
        frames = self.model.decode(latents, chunk)
        frames = mark_observed(frames) if chunk < self.observed_chunks else frames
        self.on_frames(chunk, frames)
        return frames

    @torch.no_grad()
    def _loop(self, ctx: AttentionContext, memory: SessionMemory) -> tuple[int, int]:
        model = self.model
        model.prepare_context(ctx)
        start, frames_total = 0, 0
        if self.resume_from is not None:
            restore(self.resume_from, model, ctx, memory)
            start = self.resume_from.chunk
            if memory.resume_misses:   # blocks missing or failing their check: misses, the run goes on
                self.log.record("note", chunk=start, misses=memory.resume_misses,
                                text=f"chunks {memory.resume_misses} of the memory could not be read back "
                                     "from the drive (missing or failing their check): misses")
            frames_total = self.resume_from.facts["frames_total"]
        self._memory = memory
        saver = self._saver(memory)
        schedule = SaveSchedule(self.cfg.save_every, self.cfg.save_interval_s)
        try:
            made = self._chunks(ctx, memory, start, frames_total, saver, schedule)
        except BaseException as exc:
            self._close_saver(saver, exc)
            raise
        self._close_saver(saver, None)
        return made

    def _close_saver(self, saver: SavePointWriter | None, failing: BaseException | None) -> None:
        """Save points still in flight are finished and logged; ``failing`` (the loop's error) wins."""
        if saver is None:
            return
        cleanup = Cleanup(failing)
        # a second signal: no waiting for a save point the drive holds up
        cleanup.run(lambda: self._log_savepoints(saver.close(abort=isinstance(failing, KeyboardInterrupt))))
        cleanup.finish()

    def _take_inputs(self, chunk: int):
        """Step 1: the source makes the chunk's inputs known (None: they ended, or a stop was asked for);
        a model that derived per-frame inputs at set-up re-derives the frames the source wrote."""
        grid = self.model.grid
        frames = range(grid.frames_total(chunk), grid.frames_total(chunk + 1))
        inputs = self.source.take(chunk, frames, self._stop)
        if inputs is None:
            self._inputs_ended = not self._stop.is_set()
            return None
        if inputs.changed is not None and isinstance(self.model, LiveInputModel):
            self.model.inputs_extended(*inputs.changed)
        return inputs

    def _chunks(self, ctx, memory, start, frames_total, saver, schedule) -> tuple[int, int]:
        model = self.model
        stage = DecodeStage(self._decode, self.writer, overlap=decode_overlap(self.cfg, self.device),
                            frames_total=frames_total)
        # A chunk's wall time runs from the end of the one before (save points and log lines included), so
        # that the chunks' wall times and pauses tile the loop: a pause is in exactly one chunk's.
        self._wall_from = time.perf_counter()
        try:
            for chunk in range(start, self.cfg.chunks):
                # 1. the chunk's inputs (a live source may wait for its player: a pause, not a stall)
                inputs = self._take_inputs(chunk)
                stopping = self._stop.is_set() or inputs is None
                if saver is not None:
                    self._log_savepoints(saver.finished())
                    # Stopped on request (Ctrl-C, SIGTERM): a save point here loses nothing on resume,
                    # so it waits for one still being written instead of being skipped (a scheduled one
                    # is skipped while another is in flight: how many there are depends on the machine).
                    if stopping and chunk > start and saver.busy:
                        saver.wait_idle()
                        self._log_savepoints(saver.finished())
                    if chunk > start and (stopping or schedule.due(chunk)) and not saver.busy:
                        # The chunk in flight first: the model's decoder and the frame count the save
                        # point holds are then those of every chunk before this one.
                        self._log_decoded(stage.drain())
                        memory.savepoint_captured(chunk)   # chunks dropped from here on are still written
                        saver.submit(capture(chunk, stage.frames_total, self.cfg, model, ctx, memory))
                        schedule.saved()
                if stopping:
                    self._log_decoded(stage.close())
                    return chunk, stage.frames_total
                t0 = time.perf_counter()
                kv_moved = ctx.kv_bytes_to_device
                # 2–4. memory (select, take staged, stage the next chunk's set)
                mem = memory.prepare(chunk)
                t1 = time.perf_counter()
                # 5. denoise (the chunk's clean K/V end up in the context's current region); an
                #    observed chunk only runs the clean pass on what was observed
                observed = chunk < self.observed_chunks
                latents = model.observe(chunk, ctx) if observed else model.denoise(chunk, ctx)
                t2 = time.perf_counter()
                self.on_output(chunk, latents)
                # 6. store the chunk's KV, then roll the window
                tiers = memory.store_chunk(chunk)
                for drop in memory.take_drop_records():
                    self.log.record("drop", **drop)
                if (failure := memory.drive_failure()) is not None:
                    raise self._drive_stopped(failure, chunk + 1, memory)
                mem["stall_ms"] += tiers.get("put_wait_ms", 0.0)   # waiting for write-back to free a slot
                ctx.commit()
                t3 = time.perf_counter()
                # 7. decode and mux: here, or (decode_overlap) on a worker while the next chunk denoises
                record = {"chunk": chunk, "frames": 0, "frames_total": 0, "wall_ms": 0.0,
                          "compute_ms": 0.0, "memory_ms": 0.0, "store_ms": 0.0, "decode_ms": 0.0, **mem, **tiers,
                          "rss_bytes": process_rss(), "device_bytes": device_bytes(self.device),
                          **_streamed(model),
                          "kv_bytes_to_device": ctx.kv_bytes_to_device - kv_moved, "kv_device_bytes": ctx.kv_device_bytes,
                          **({"observed": True} if observed else {}), **inputs.facts}
                if inputs.waited_ms:
                    record["input_wait_ms"] = inputs.waited_ms
                done = stage.submit(chunk, latents, record)
                now = time.perf_counter()
                record["wall_ms"] = (now - self._wall_from) * 1e3
                # a stopped process's time (SIGSTOP) is paused time, not a step's: each is asked of the
                # stops confirmed by now, once, so none is in a step and in paused_ms both
                self._pauses.settle()
                stopped = self._pauses.paused_between
                record.update(memory_ms=_ms(t1 - t0, stopped(t0, t1)), compute_ms=_ms(t2 - t1, stopped(t1, t2)),
                              store_ms=_ms(t3 - t2, stopped(t2, t3)))
                # a stopped process and (live play) the wait for the player's inputs, in wall_ms
                record["paused_ms"] = stopped(self._wall_from, now) * 1e3 + inputs.waited_ms
                self._wall_from = now
                record["decode_wait_ms"] = stage.wait_ms   # waiting for the chunk before to be in the file
                # 8. log the chunks now in the file (this one, or with decode_overlap the one before)
                self._log_decoded(done)
            self._log_decoded(stage.close())
            return self.cfg.chunks, stage.frames_total
        except BaseException as exc:   # a failed loop: the chunk in flight still reaches the file
            cleanup = Cleanup(exc)
            cleanup.run(lambda: self._log_decoded(stage.close()))
            cleanup.finish()
            raise
