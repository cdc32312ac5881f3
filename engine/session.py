"""The chunk loop: owns the order of the steps of a generation session, not their policies.

For chunk c: (1) inputs: the chunk's noise, conditioning slice and action history; (2) denoise: MG2's
steps plus the clean pass, which commits the chunk's KV into the attention context; (3) decode: the
streaming VAE decoder turns the chunk's latents into 9 (first chunk) or 12 video frames; (4) mux: the
frames are appended to the MP4; (5) log: one JSON line, then the caller's hook.

Set-up validates every user input (start image, trajectory, output and log paths) before anything is
written; the MP4 and the log are closed on every exit path (the log with its summary line), so a failed
or interrupted run leaves a playable file and a complete log. ``request_stop()`` (e.g. from a SIGINT
handler) ends the run after the chunk in hand.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.config import ModelConfig, SessionConfig, model_config
from engine.io.image import default_start_image_path, load_image
from engine.io.trajectory import Trajectory, load_trajectory, packaged_trajectory
from engine.io.video import VideoWriter
from engine.model.action import first_window_frame
from engine.model.chunk import ChunkInputs, denoise_chunk, generator_noise
from engine.model.facts import model_facts
from engine.model.kv_context import AttentionContext
from engine.model.load import MG2Models, load_models
from engine.model.scheduler import FlowMatchSampler
from engine.model.vae import StartImageEncoder, StreamingDecoder
from engine.overlay import config_to_json, write_resolved_config
from engine.telemetry import SessionLog, process_rss

DEFAULT_TRAJECTORY = "revisit_loop.yaml"


@dataclass
class SessionResult:
    out: Path
    log: Path
    chunks: int                 # chunks generated (fewer than requested when stopped early)
    frames: int
    wall_s: float
    status: str                 # done | interrupted


def resolve_device(name: str) -> tuple[torch.device, torch.dtype]:
    """``auto`` picks CUDA with bf16 when present, else the CPU with float32."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    return device, (torch.bfloat16 if device.type == "cuda" else torch.float32)


def device_bytes(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


class Session:
    """One generation session: constructing it validates the inputs; ``run()`` loads and generates."""

    def __init__(self, cfg: SessionConfig, on_chunk: Callable[[dict], None] | None = None):
        self.cfg = cfg
        self.model_cfg: ModelConfig = model_config(cfg.model)
        self.on_chunk = on_chunk or (lambda record: None)
        self.device, self.dtype = resolve_device(cfg.device)
        self._stop = threading.Event()
        m = self.model_cfg
        self.image = load_image(cfg.image or default_start_image_path(), m.video_height, m.video_width)
        self.trajectory: Trajectory = load_trajectory(
            cfg.trajectory or packaged_trajectory(DEFAULT_TRAJECTORY), m.mode,
            frames=m.video_frames_total(cfg.chunks), repeat=cfg.repeat, calibration=cfg.calibration)
        self.writer = VideoWriter(cfg.out, m.video_width, m.video_height, m.fps)
        try:
            self.log = SessionLog(cfg.log_path)
            write_resolved_config(cfg, cfg.config_path)
        except BaseException:
            self._discard_outputs()
            raise
        self.models: MG2Models | None = None

    def request_stop(self) -> None:
        """Finish the chunk in hand, then stop (thread- and signal-safe)."""
        self._stop.set()

    def load(self) -> None:
        """Load the three networks; on failure the (still empty) outputs are removed."""
        try:
            self.models = load_models(self.model_cfg, self.cfg.checkpoint, self.device, self.dtype)
        except BaseException:
            self._discard_outputs()
            raise

    def _discard_outputs(self) -> None:
        """Nothing was generated: close and remove the empty video and log."""
        self.writer.close()
        if getattr(self, "log", None) is not None:
            self.log.close("failed")
        for path in (self.cfg.out, self.cfg.log_path, self.cfg.config_path):
            path.unlink(missing_ok=True)

    def run(self) -> SessionResult:
        """Generate every chunk (loading first if needed); video and log are closed on every path."""
        start = time.perf_counter()
        if self.models is None:
            self.load()
        self.log.header(config_to_json(self.cfg), model_facts(self.model_cfg), device=str(self.device),
                        dtype=str(self.dtype).removeprefix("torch."), weights=self.models.source,
                        trajectory=self.trajectory.describe())
        status, chunks, frames = "failed", 0, 0
        try:
            chunks, frames = self._loop(self.models)
            status = "interrupted" if self._stop.is_set() and chunks < self.cfg.chunks else "done"
        except BaseException as exc:
            status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            self.log.close(status, error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.writer.close()
            self.log.close(status)
        return SessionResult(self.cfg.out, self.cfg.log_path, chunks, frames,
                             time.perf_counter() - start, status)

    @torch.no_grad()
    def _loop(self, models: MG2Models) -> tuple[int, int]:
        m = self.model_cfg
        image = self.image.to(self.device, self.dtype)
        ctx = AttentionContext(m, dtype=self.dtype, device=self.device)
        models.dit.prepare_visual_context(ctx, models.clip.encode(image))
        encoder = StartImageEncoder(models.vae, image)
        decoder = StreamingDecoder(models.vae)
        sampler = FlowMatchSampler(m.sampler)
        rng = torch.Generator().manual_seed(self.cfg.seed)
        noise = generator_noise(rng)
        frames_total, f = 0, m.sampler.frames_per_chunk
        for chunk in range(self.cfg.chunks):
            if self._stop.is_set():
                return chunk, frames_total
            t0 = time.perf_counter()
            # 1. inputs
            inputs = self._chunk_inputs(chunk, encoder.cond_concat(f), rng)
            # 2. denoise (commits the chunk's KV)
            latents = denoise_chunk(models.dit, sampler, ctx, inputs, noise)
            t1 = time.perf_counter()
            # 3. decode
            video = decoder.decode_chunk(latents).clamp_(-1, 1)[0]            # [T, 3, H, W]
            t2 = time.perf_counter()
            # 4. mux
            self.writer.write(video.float().cpu())
            frames_total += video.shape[0]
            # 5. log
            record = {"chunk": chunk, "frames": video.shape[0], "frames_total": frames_total,
                      "wall_ms": (time.perf_counter() - t0) * 1e3, "compute_ms": (t1 - t0) * 1e3,
                      "decode_ms": (t2 - t1) * 1e3, "stall_ms": 0.0, "rss_bytes": process_rss(),
                      "device_bytes": device_bytes(self.device)}
            self.log.chunk(record)
            self.on_chunk(record)
        return self.cfg.chunks, frames_total

    def _chunk_inputs(self, chunk: int, cond_concat: torch.Tensor, rng: torch.Generator) -> ChunkInputs:
        m = self.model_cfg
        f = m.sampler.frames_per_chunk
        shape = (1, m.dit.out_dim, f, m.latent_height, m.latent_width)       # [B, z, F, h, w]
        noise = torch.randn(shape, generator=rng, dtype=torch.float32)
        # Only the action frames the chunk's windows read travel to the device: constant per chunk.
        first = first_window_frame(chunk * f, m.dit.action) if m.dit.action else 0
        last = 1 + m.vae.temporal_factor * (chunk * f + f - 1)        # video frames up to the chunk's end
        to_model = dict(device=self.device, dtype=self.dtype)
        actions = self.trajectory.actions
        return ChunkInputs(
            noise=noise.to(**to_model), cond_concat=cond_concat.to(**to_model), start_frame=chunk * f,
            keyboard=actions.keyboard[None, first:last].to(**to_model),
            mouse=None if actions.mouse is None else actions.mouse[None, first:last].to(**to_model),
            action_offset=first)
