"""The chunk loop: owns the order of the steps of a generation session, not their policies.

For chunk c: (1) inputs: the chunk's noise, conditioning slice and action history; (2) denoise: MG2's
steps plus the clean pass, which commits the chunk's KV into the attention context; (3) decode: the
streaming VAE decoder turns the chunk's latents into 9 (first chunk) or 12 video frames; (4) mux: the
frames are appended to the MP4; (5) report: the chunk's timing goes to the caller's hook.

Set-up validates every user input (start image, output path, checkpoint) before the first chunk, and
the MP4 is closed on every exit path, so a failed or interrupted run leaves a playable file.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.config import ModelConfig, SessionConfig, model_config
from engine.io.actions import ActionTrack, builtin_schedule
from engine.io.image import default_start_image_path, load_image
from engine.io.video import VideoWriter
from engine.model.chunk import ChunkInputs, denoise_chunk, generator_noise
from engine.model.kv_context import AttentionContext
from engine.model.load import MG2Models, load_models
from engine.model.scheduler import FlowMatchSampler
from engine.model.vae import StartImageEncoder, StreamingDecoder


@dataclass
class ChunkReport:
    chunk: int
    frames: int                 # video frames this chunk added
    frames_total: int
    wall_ms: float
    compute_ms: float           # denoising
    decode_ms: float


@dataclass
class SessionResult:
    out: Path
    chunks: int
    frames: int
    wall_s: float


def resolve_device(name: str) -> tuple[torch.device, torch.dtype]:
    """``auto`` picks CUDA with bf16 when present, else the CPU with float32."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    return device, (torch.bfloat16 if device.type == "cuda" else torch.float32)


class Session:
    """One generation session: constructing it validates the inputs; ``run()`` loads and generates."""

    def __init__(self, cfg: SessionConfig, on_chunk: Callable[[ChunkReport], None] | None = None):
        self.cfg = cfg
        self.model_cfg: ModelConfig = model_config(cfg.model)
        self.on_chunk = on_chunk or (lambda report: None)
        self.device, self.dtype = resolve_device(cfg.device)
        m = self.model_cfg
        image_path = cfg.image or default_start_image_path()
        self.image = load_image(image_path, m.video_height, m.video_width)  # [1, 3, H, W] in [-1, 1]
        self.writer = VideoWriter(cfg.out, m.video_width, m.video_height, m.fps)
        self.actions: ActionTrack = builtin_schedule(m.mode, m.video_frames_total(cfg.chunks) + 1)
        self.models: MG2Models | None = None

    def load(self) -> None:
        """Load the three networks; on failure the (still empty) output file is removed."""
        try:
            self.models = load_models(self.model_cfg, self.cfg.checkpoint, self.device, self.dtype)
        except BaseException:
            self.writer.close()
            self.cfg.out.unlink(missing_ok=True)   # nothing was generated: leave no empty file behind
            raise

    def run(self) -> SessionResult:
        """Generate every chunk (loading first if needed); the MP4 is closed on every exit path."""
        start = time.perf_counter()
        if self.models is None:
            self.load()
        try:
            frames = self._loop(self.models)
        finally:
            self.writer.close()
        return SessionResult(self.cfg.out, self.cfg.chunks, frames, time.perf_counter() - start)

    @torch.no_grad()
    def _loop(self, models: MG2Models) -> int:
        m = self.model_cfg
        image = self.image.to(self.device, self.dtype)
        ctx = AttentionContext(m, dtype=self.dtype, device=self.device)
        models.dit.prepare_visual_context(ctx, models.clip.encode(image))
        encoder = StartImageEncoder(models.vae, image)
        decoder = StreamingDecoder(models.vae)
        sampler = FlowMatchSampler(m.sampler)
        rng = torch.Generator().manual_seed(self.cfg.seed)
        noise = generator_noise(rng)
        frames_total = 0
        f = m.sampler.frames_per_chunk
        for chunk in range(self.cfg.chunks):
            t0 = time.perf_counter()
            # 1. inputs
            inputs = self._chunk_inputs(chunk, encoder.cond_concat(f), rng)
            # 2. denoise (commits the chunk's KV)
            latents = denoise_chunk(models.dit, sampler, ctx, inputs, noise)
            t1 = time.perf_counter()
            # 3. decode
            video = decoder.decode_chunk(latents).clamp_(-1, 1)[0]           # [T, 3, H, W]
            t2 = time.perf_counter()
            # 4. mux
            self.writer.write(video.float().cpu())
            frames_total += video.shape[0]
            # 5. report
            self.on_chunk(ChunkReport(chunk, video.shape[0], frames_total,
                                      wall_ms=(time.perf_counter() - t0) * 1e3,
                                      compute_ms=(t1 - t0) * 1e3, decode_ms=(t2 - t1) * 1e3))
        return frames_total

    def _chunk_inputs(self, chunk: int, cond_concat: torch.Tensor, rng: torch.Generator) -> ChunkInputs:
        m = self.model_cfg
        f = m.sampler.frames_per_chunk
        shape = (1, m.dit.out_dim, f, m.latent_height, m.latent_width)
        noise = torch.randn(shape, generator=rng, dtype=torch.float32)
        last = 1 + m.vae.temporal_factor * (chunk * f + f - 1)       # video frames up to the chunk's end
        to_model = dict(device=self.device, dtype=self.dtype)
        mouse = self.actions.mouse
        return ChunkInputs(
            noise=noise.to(**to_model), cond_concat=cond_concat.to(**to_model), start_frame=chunk * f,
            keyboard=self.actions.keyboard[None, :last].to(**to_model),
            mouse=None if mouse is None else mouse[None, :last].to(**to_model))


def run_session(cfg: SessionConfig, on_chunk: Callable[[ChunkReport], None] | None = None
                ) -> SessionResult:
    return Session(cfg, on_chunk).run()
