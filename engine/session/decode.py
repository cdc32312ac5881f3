"""Step 7 of the chunk loop, decode and mux, optionally off the loop's critical path.

With ``overlap`` on, chunk c's latents are decoded and its frames appended to the MP4 on one worker
thread while the loop goes on to denoise chunk c+1; off, the same job runs in the loop's thread.

Contract (both modes):

* order: one worker runs the jobs in submission order, so the writer receives the frames, in the
  order, of a run that decodes in the loop — the MP4 is byte-identical;
* at most one chunk in flight: :meth:`DecodeStage.submit` first waits for the chunk before (the
  model's decoder state and the file are never more than one chunk behind the loop);
* :meth:`DecodeStage.drain` returns once nothing is in flight: afterwards the model's decoder state
  and ``writer.frames_written`` account for every chunk submitted — a save point is captured only after
  a drain, so its frame count counts only frames really written;
* both return the chunks finished since the last call, oldest first (:class:`Decoded`), for the loop
  to log; a failure in the worker is raised in the loop's thread by the next ``submit`` or ``drain``.

The worker runs torch on one intra-op thread (torch's count is per calling thread): on a team of its
own it would make the forward's parallel regions wait at their barriers for a preempted thread (the
store's workers do the same, ``engine.memory.transfer``). The VAE computes on one intra-op thread
wherever it runs (``engine.runtime.cpu_threads.one_intra_op_thread``: some of oneDNN's convolutions sum in another
order on more threads), so the frames are the same either way (the tests compare MP4 bytes).
"""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch

from engine.io.video import VideoWriter

Decode = Callable[[torch.Tensor, int], torch.Tensor]   # (latents, chunk) -> frames, as WorldModel.decode


@dataclass
class Decoded:
    """One chunk decoded and in the file."""

    chunk: int
    frames: int                  # frames of this chunk appended to the MP4
    frames_total: int            # frames in the MP4 with this chunk's
    decode_ms: float             # decode + mux, on whichever thread ran it
    record: dict                 # what the loop gave with the chunk (its log record so far)


class DecodeStage:
    """Decode-and-mux jobs for one session: inline, or on one worker thread (``overlap``)."""

    def __init__(self, decode: Decode, writer: VideoWriter, overlap: bool, frames_total: int = 0):
        """``frames_total``: frames already in the MP4 (a resumed run's)."""
        self._decode = decode
        self._writer = writer
        self.overlap = overlap
        self.frames_total = frames_total   # frames in the MP4 from every chunk returned so far
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="decode", initializer=torch.set_num_threads,
                                        initargs=(1,)) if overlap else None
        self._in_flight: Future | None = None
        self.wait_ms = 0.0           # how long the loop last waited for the worker (submit or drain)

    def submit(self, chunk: int, latents: torch.Tensor, record: dict) -> list[Decoded]:
        """Decode ``chunk`` (now, or on the worker); returns the chunks finished meanwhile."""
        done = self.drain()
        if self._pool is None:
            return [*done, self._counted(self._job(chunk, latents, record))]
        self._in_flight = self._pool.submit(self._job, chunk, latents, record)
        return done

    def drain(self) -> list[Decoded]:
        """Wait for the chunk in flight, if any; its failure is raised here."""
        t0 = time.perf_counter()
        future, self._in_flight = self._in_flight, None
        done = [] if future is None else [self._counted(future.result())]
        self.wait_ms = (time.perf_counter() - t0) * 1e3
        return done

    def _counted(self, decoded: Decoded) -> Decoded:
        self.frames_total += decoded.frames
        decoded.frames_total = self.frames_total
        return decoded

    def close(self) -> list[Decoded]:
        """Drain, then stop the worker (idempotent)."""
        try:
            return self.drain()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def _job(self, chunk: int, latents: torch.Tensor, record: dict) -> Decoded:
        t0 = time.perf_counter()
        with torch.no_grad():
            video = self._decode(latents, chunk)         # float [T, 3, H, W] or uint8 [T, H, W, 3]
        self._writer.write(video)
        return Decoded(chunk, int(video.shape[0]), 0, (time.perf_counter() - t0) * 1e3, record)
