"""One played session, wired: the live trajectory, its source, the session, the server.

Contract. ``prepare_play(cfg, spec, host, port)`` binds the server first (a port in use fails before any
output exists), then builds the ``Session`` on a ``LiveSource`` — so the session validates its inputs and
creates its MP4, log and config as ``generate`` does — and hooks the session's frames and chunk records
to the server: each chunk's frames are JPEG-encoded on one worker thread (in order) and sent as they are
decoded (with ``truth``, the arena model's, each frame's rendered truth follows it: ``engine.play.truth``,
rendered and encoded on that worker thread, never the session's; a chunk whose messages cannot be made
is said in one warning line); each chunk record goes out as the page's figures (``chunk_message``: its
``stalled`` is the log's own test, ``stall_ms`` above ``STALL_MS``, the threshold the benchmarks count
stalls by).
``PlayRun.run()`` loads the model if needed, runs the session on the calling thread (signals behave as in
``generate``), then sends the summary and closes the server.

A new run that ends with no chunk in its MP4 — the model's load or the memory's set-up failed (out of
memory under ``ulimit -v``), the first chunk failed, or it was stopped before one was made — leaves
nothing behind (``PlayRun.discard_if_empty``): the session removes the MP4, log and config it created,
the source the recording it wrote, so that the same command runs again. A continued run (``--from``)
keeps the files it continues. The session is an ordinary one: ``cfg.trajectory`` is the recording
(``recording_path``), which the source writes as the session goes.

What the session observes first — its look around (``engine.session.look_around``), or the
``--observe`` clip — is given to the track before any live frame (``LiveTrack.observe``) and to the
session as observed chunks (``LiveSource.observed``); the recording holds the live frames only, so
``generate --trajectory RECORDING`` with the same settings (the same ``--observe``) observes the same
first and makes the same video.

``continue_track`` (``play --from``): the recording of the run being continued, up to its save point,
given to the new ``LiveTrack`` before the model is built, so that the model derives the same inputs as
the first run did for those frames.
"""
from __future__ import annotations

import dataclasses
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from engine.config import ARENA_MODEL, SessionConfig
from engine.io.trajectory import load_trajectory
from engine.io.poses import ORIGIN, state_from_pose
from engine.io.trajectory.live import LiveTrack
from engine.planner.model import STALL_EPS_S
from engine.play.controls import HELP
from engine.play.frames import frame_messages, to_uint8, truth_messages
from engine.play.server import PlayServer
from engine.play.source import LiveSource
from engine.session.loop import Session, SessionResult
from engine.session.observe import observed_prefix

if TYPE_CHECKING:
    from engine.play.truth import PlayTruth

DEFAULT_MINUTES = 60.0       # a played session's length cap without --chunks/--seconds/--minutes
CHUNK_FIELDS = ("chunk", "frames_total", "wall_ms", "compute_ms", "memory_ms", "stall_ms", "hits", "misses",
                "stale", "pool_used_bytes", "pool_free_bytes", "disk_bytes_read", "disk_bytes_written",
                "rss_bytes", "device_bytes", "input_wait_ms", "input_seq", "decode_ms", "paused_ms")
STALL_MS = STALL_EPS_S * 1e3  # a chunk stalled when its stall_ms is above this (the paper's 0.5 ms)
log = logging.getLogger("worldpager.play")


def stalled(record: dict) -> bool:
    """The chunk record waited on memory longer than the stall threshold."""
    return float(record.get("stall_ms", 0.0)) > STALL_MS


def chunk_message(record: dict, dropped: int) -> dict:
    """The page's figures of one chunk record: its fields, whether it stalled, the messages dropped so far."""
    return {"type": "chunk", **{k: record[k] for k in CHUNK_FIELDS if k in record}, "stalled": stalled(record),
            "dropped": dropped}


def chunk_frames(video, chunk: int, first: int, seq: int, truth: PlayTruth | None = None,
                 poses=None) -> list[bytes]:
    """A chunk's frame messages; with ``truth``, each frame's truth (at ``poses``) right after it."""
    messages = frame_messages(video, chunk, first, seq)
    if truth is None:
        return messages
    truths = truth_messages(truth.frames(poses), chunk, first, seq)
    return [message for pair in zip(messages, truths, strict=True) for message in pair]


def _said_if_failed(chunk: int):
    """A done-callback of the encoder's task: a failure is one warning line, not swallowed."""
    def said(future) -> None:
        failure = None if future.cancelled() else future.exception()
        if failure is not None:
            log.warning("worldpager: warning: play could not send chunk %d's frames to the page: %s: %s",
                        chunk, type(failure).__name__, failure)
    return said


def recording_path(out: Path) -> Path:
    """Where a played session's inputs are recorded: beside its MP4."""
    return Path(out).absolute().with_suffix(".trajectory.yaml")


def play_config(cfg: SessionConfig) -> SessionConfig:
    """``cfg`` as a played session runs it: its trajectory is its own recording."""
    return dataclasses.replace(cfg, trajectory=recording_path(cfg.out))


def continue_track(track: LiveTrack, cfg: SessionConfig, mode: str, frames: int) -> None:
    """Give ``track`` (which holds the observed frames) the session's first ``frames`` frames: the
    recording ``cfg.trajectory``'s after them."""
    frames -= track.known
    if frames <= 0:   # continued inside what is observed
        return
    recorded = load_trajectory(cfg.trajectory, mode, frames=frames, repeat=cfg.repeat, calibration=cfg.calibration)
    mouse = None if recorded.actions.mouse is None else recorded.actions.mouse.numpy()
    track.extend(recorded.actions.keyboard.numpy(), mouse)


@dataclasses.dataclass
class PlayRun:
    cfg: SessionConfig
    source: LiveSource
    server: PlayServer
    session: Session
    url: str
    encoder: ThreadPoolExecutor

    fresh: bool = True             # a new run (not --from): its files are its own to remove

    @property
    def empty(self) -> bool:
        """A new run none of whose chunks is in its MP4."""
        log = self.session.log
        return self.fresh and (log is None or log.summary.chunks == 0)

    def discard_if_empty(self, status: str = "failed") -> bool:
        """A new run that made no chunk: remove what it wrote (see the module docstring); True if it did."""
        if not self.empty:
            return False
        if self.session.outputs is not None:
            self.session.outputs.discard(status)
        self.source.discard()
        return True

    def run(self) -> SessionResult:
        try:
            result = self.session.run()
        except BaseException:
            self.encoder.shutdown(wait=True)
            self.discard_if_empty()
            raise
        finally:
            self.encoder.shutdown(wait=True)      # every frame made is sent before the summary
        self.server.publish({"type": "end", "status": result.status, "chunks": result.chunks,
                             "frames": result.frames, "out": str(result.out), "log": str(result.log),
                             "recording": str(self.cfg.trajectory)})
        return result

    def close(self) -> None:
        self.encoder.shutdown(wait=True)
        self.server.close()


def prepare_play(cfg: SessionConfig, spec, host: str, port: int, token: str | None = None,
                 resume_from=None, on_chunk: Callable[[dict], None] | None = None, truth: bool = False) -> PlayRun:
    """Bind the server, then set up the session (see the module docstring); ``cfg`` is ``play_config``'s;
    ``truth``: send each frame's rendered truth too (the arena model only; the CLI refuses others)."""
    assert not truth or cfg.model == ARENA_MODEL, cfg.model
    grid = spec.grid
    first = observed_prefix(cfg, spec)   # a look around, or --observe: observed before the live frames
    start = ORIGIN if first is None else state_from_pose(first.trajectory.poses[0])
    track = LiveTrack(spec.action_mode, grid.frames_total(cfg.chunks), cfg.calibration,
                      source=f"live input, recorded to {cfg.trajectory}", start=start)
    if first is not None:
        mouse = first.trajectory.actions.mouse
        track.observe(first.trajectory.actions.keyboard.numpy(), None if mouse is None else mouse.numpy())
    frames_before = 0
    if resume_from is not None:
        frames_before = resume_from.facts["frames_total"]
        continue_track(track, cfg, spec.action_mode, frames_before)
    staged = resume_from is None and Path(cfg.trajectory).is_file()   # --overwrite: replaced at the first chunk
    comment = f"The inputs of {Path(cfg.out).name}, played live ({spec.name}, {spec.action_mode})."
    if first is not None:
        comment += f"\nThey follow what the session observed first: {first.what}."
    source = LiveSource(track, grid.fps, cfg.trajectory, staged=staged, comment=comment,
                        observed=(0, None) if first is None else (first.chunks, first.what))
    info = {"stall_threshold_ms": STALL_MS, "model": spec.name, "mode": spec.action_mode, "fps": grid.fps, "frame_size": list(spec.frame_size),
            "chunk_frames": grid.frames_per_chunk, "keys": HELP[spec.action_mode], "out": str(cfg.out),
            "log": str(cfg.log_path), "recording": str(cfg.trajectory), "chunks_cap": cfg.chunks,
            "spill": None if cfg.memory.spill is None else str(cfg.memory.spill), "store": cfg.memory.store,
            "truth": truth}
    server = PlayServer(source, info, host, port, token or secrets.token_urlsafe(16))
    url = server.start()
    encoder = ThreadPoolExecutor(1, thread_name_prefix="wp-play-jpeg")
    sent = [frames_before]
    shown: list["PlayTruth | None"] = [None]     # the truth's renderer, made with the model (at the first frames)
    user_hook = on_chunk or (lambda record: None)

    def on_frames(chunk: int, frames) -> None:
        video = to_uint8(frames)
        first, sent[0] = sent[0], sent[0] + len(video)
        seq = source.seq_of(chunk)
        if truth and shown[0] is None:
            from engine.play.truth import PlayTruth   # the arena's renderer: loaded only for --truth

            shown[0] = PlayTruth(session.model)
        poses = None if shown[0] is None else shown[0].poses(first, len(video))   # copied here: cheap
        task = encoder.submit(lambda: server.publish_frames(
            chunk, chunk_frames(video, chunk, first, seq, shown[0], poses), frames=len(video)))
        task.add_done_callback(_said_if_failed(chunk))

    def chunk_record(record: dict) -> None:
        source.commit()                   # the chunk is in the MP4: the recording takes its name
        server.publish(chunk_message(record, server.dropped))
        user_hook(record)

    try:
        session = Session(cfg, on_chunk=chunk_record, resume_from=resume_from, source=source, on_frames=on_frames)
    except BaseException:
        encoder.shutdown(wait=False)
        server.close()
        raise
    return PlayRun(cfg, source, server, session, url, encoder, fresh=resume_from is None)
