"""The live input source of ``worldpager play``: the player's inputs become the session's trajectory.

Contract (the session's ``InputSource``, ``engine.session.inputs``). ``take(chunk, frames, stop)``:

1. **Pause.** Without a player steering (the tab was closed, none has connected yet), it blocks: no
   chunk is made without input, and nothing is lost — the chunk in hand was finished and written. The
   wait is a pause (the chunk record's ``input_wait_ms``), not a stall.
2. **Just in time.** While the model is faster than real time, it holds the chunk back until the frames
   already sent will have played out, less the time a chunk takes to reach the page (its running
   estimate, ``lead_s``) and a margin: the chunk then takes the newest inputs there can be, so a key
   press shows as early as the chunk grid allows. A slower model is never held back: its frames are
   shown as they come.
3. **Sample.** The chunk's frames take the player's inputs sampled on the frame clock
   (``engine.play.controls``); they are written into the session's ``LiveTrack`` in place (the models
   and the retrieval read them there) and the recording — the trajectory YAML of every frame given, a
   file ``load_trajectory`` reads back to the same actions — is rewritten (to a temporary file, then
   renamed) before the chunk runs, so a killed session's recording holds every chunk of its video.

The chunks the session observes first (its look around, an observed clip: ``LiveTrack.observe``; the
session reads ``observed``) are paused and paced by steps 1 and 2 like any other, so the player sees
them, but step 3 gives them nothing: what the player held meanwhile is dropped, and the recording is
not written for them.

The recording is the run's output like its MP4: ``staged`` (an earlier run's recording is there, being
replaced under ``--overwrite``) it is written under a hidden name beside it (``.NAME.new``) until
``commit()`` (the first chunk is in the MP4) renames it over the earlier one; ``discard()`` (the run made
no chunk) removes what this source wrote, so that a run that made nothing leaves no recording behind.

``finish()`` (the page's Stop, Ctrl-C) ends the inputs: the next ``take`` returns None and the session
ends there, done. ``delivered(chunk, frames, at)`` is the server telling when a chunk's frames went out.
Thread-safe: the server's thread calls ``apply``, ``connected``, ``delivered`` and ``finish``; the
session's thread calls ``take``.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from engine.errors import OutputError
from engine.io.trajectory.live import LiveTrack, recording_yaml
from engine.play.controls import Controls
from engine.session.inputs import Inputs

MARGIN_S = 0.1      # the page's frames run out this much after the next chunk's are due at the latest
LEAD_EMA = 0.3      # weight of the newest chunk in the running estimate of a chunk's lead time


class LiveSource:
    """The session's inputs, from the player (see the module docstring)."""

    def __init__(self, track: LiveTrack, fps: float, recording: Path, clock: Callable[[], float] = time.monotonic,
                 comment: str = "", staged: bool = False, observed: tuple[int, str | None] = (0, None)):
        self.track, self.trajectory = track, track.trajectory
        self.observed = observed      # (chunks, what): the session observes these first (track.observed frames)
        self.fps, self.recording, self.clock, self.comment = fps, Path(recording), clock, comment
        self.staged = staged
        self._written: Path | None = None    # the file this source wrote (staging or final), None: none yet
        self.description = "live (worldpager play)"
        self.controls = Controls(track.mode, fps, clock())
        self._cond = threading.Condition()
        self._driver = False          # a player is steering
        self._finished = False
        self._play_end = 0.0          # when the frames sent so far will have played out on the page
        self.lead_s: float | None = None   # a chunk's time from its start to its frames going out
        self._taken_at: dict[int, float] = {}
        self._seq: dict[int, int] = {}       # chunk -> the newest input message it was made with
        self.dropped = 0                     # client messages the server dropped (malformed, refused)
        self.paused_since: float | None = None
        if track.known > track.observed:   # continued from a save point: the recording so far stands
            self._write_recording()

    # ---- the server's side ----------------------------------------------------------------------

    def apply(self, keys, mouse, seq: int) -> None:
        with self._cond:
            self.controls.apply(keys, mouse, seq, self.clock())

    def connected(self, steering: bool) -> None:
        """A player took the controls (True) or left them (False)."""
        with self._cond:
            self._driver = steering
            if not steering:
                self.controls.release_all()
            self._play_end = 0.0          # the new page's playback starts afresh
            self._cond.notify_all()

    def delivered(self, chunk: int, frames: int, at: float) -> None:
        with self._cond:
            self._play_end = max(self._play_end, at) + frames / self.fps
            started = self._taken_at.pop(chunk, None)
            if started is not None:
                lead = at - started
                self.lead_s = lead if self.lead_s is None else (1 - LEAD_EMA) * self.lead_s + LEAD_EMA * lead
            self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def steering(self) -> bool:
        return self._driver

    # ---- the session's side ---------------------------------------------------------------------

    def start_at(self) -> float:
        """When the next chunk should start (just in time; now or earlier: at once)."""
        if self.lead_s is None:
            return 0.0
        return self._play_end - self.lead_s - MARGIN_S

    def take(self, chunk: int, frames: range, stop: threading.Event) -> Inputs | None:
        begin = self.clock()
        with self._cond:
            while True:
                if stop.is_set() or self._finished:
                    return None
                now = self.clock()
                if not self._driver:
                    self.paused_since = self.paused_since or now
                    self._cond.wait(0.1)
                    continue
                self.paused_since = None
                wait = self.start_at() - now
                if wait <= 0:
                    break
                self._cond.wait(min(wait, 0.1))
            keyboard, mouse, seq = self.controls.take(len(frames), now)
            self._taken_at[chunk] = now
            self._seq.pop(chunk - 8, None)
            if frames.stop <= self.track.observed:   # observed: what the player held is not used
                return Inputs(None, (now - begin) * 1e3, {"input_seq": 0, "messages_dropped": self.dropped})
            assert self.track.known == frames.start, (self.track.known, frames)
            self._seq[chunk] = seq
        changed = self.track.extend(keyboard, mouse)
        self._write_recording()
        return Inputs(changed, (now - begin) * 1e3, {"input_seq": seq, "messages_dropped": self.dropped})

    def seq_of(self, chunk: int) -> int:
        """The newest input message ``chunk`` was made with (0: none, or a chunk given before this run)."""
        return self._seq.get(chunk, 0)

    def _target(self) -> Path:
        return self.recording.with_name(f".{self.recording.name}.new") if self.staged else self.recording

    def _write_recording(self) -> None:
        target = self._target()
        tmp = self.recording.with_name(f".{self.recording.name}.tmp")
        try:
            tmp.write_text(recording_yaml(self.track, self.comment), encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise OutputError(f"cannot write the recording {self.recording}: {exc.strerror or exc}") from None
        self._written = target

    def commit(self) -> None:
        """The run's first chunk is in its MP4: a staged recording takes its name (idempotent)."""
        with self._cond:
            if not self.staged:
                return
            self.staged = False
            if self._written is None:
                return
            try:
                os.replace(self._written, self.recording)
            except OSError as exc:
                raise OutputError(f"cannot put the recording {self.recording} in place: {exc.strerror or exc}") from None
            self._written = self.recording

    def discard(self) -> None:
        """The run made no chunk: remove the recording this source wrote (an earlier run's stays)."""
        with self._cond:
            written, self._written = self._written, None
        if written is not None:
            try:
                written.unlink(missing_ok=True)
            except OSError:   # the error that ended the run is the one to report
                pass
