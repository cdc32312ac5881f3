"""MG2 as a ``WorldModel`` (``engine.model.interface``): chunk inputs, denoise (KV into the context), decode.

Owns what one chunk of the real model needs around the DiT: the start image's conditioning (CLIP
tokens into the context's cross-attention, the streaming VAE encoder for ``cond_concat``), the noise,
the action windows from the trajectory, the position-mode check, and the streaming VAE decoder; and the
interface's facts: ``layout`` / ``grid`` from the model config, the horizon of MG2's rotary table,
``rotate_time`` = the DiT's RoPE on the time axis (the same rotation for every layer), and
``place_keys`` = the whole 3D RoPE at a chosen position, for a memory that stores keys pre-rope. The session
decides when each step runs; ``prepare_context`` attaches MG2's own per-layer state to the
model-agnostic context; ``denoise`` leaves the chunk's clean K/V uncommitted in the context so that
the session can store it first. Built by ``engine.model.registry``.

An observing session (``--observe clip.mp4``) also owns the clip: ``observe`` reads the chunk's video
frames (chunk 0: frames [0, 9), chunk c: [9 + 12(c - 1), 9 + 12c)), encodes them with the VAE encoder in
streaming order (``StreamingEncoder``) and runs only the clean pass on those latents, drawing no noise.
Its start image is the clip's frame 0 (the family passes it in). The encoder's stream is part of the
running state until the observed prefix ends (the first ``denoise``), and dropped with the clip then.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.config import ModelConfig
from engine.errors import HorizonError, InputError
from engine.io.trajectory import Trajectory
from engine.io.video_clip import ClipReader, model_frames
from engine.model.action import first_window_frame
from engine.model.chunk import ChunkInputs, denoise_chunk, generator_noise, observe_chunk
from engine.model.facts import horizon_chunk
from engine.model.kv_context import AttentionContext
from engine.model.load import MG2Models
from engine.model.scheduler import FlowMatchSampler
from engine.model.state_tensors import generator_state, nest, set_generator_state, sub
from engine.model.vae import StartImageEncoder, StreamingDecoder, StreamingEncoder


class MG2Pipeline:
    """One MG2 session's model (see the module docstring); satisfies ``WorldModel``."""

    def __init__(self, models: MG2Models, model_cfg: ModelConfig, image: torch.Tensor,
                 trajectory: Trajectory, seed: int, positions: str, device: torch.device,
                 dtype: torch.dtype, clip: ClipReader | None = None):
        """``clip``: the observed video whose chunks ``observe`` takes, in order, before any ``denoise``."""
        self.models, self.cfg, self.trajectory = models, model_cfg, trajectory
        self.name, self.weights = model_cfg.name, models.source
        self.layout, self.grid = model_cfg.kv_layout(), model_cfg.video_grid()
        self.horizon_chunk: int | None = horizon_chunk(model_cfg)
        self.positions, self.device, self.dtype = positions, device, dtype
        self.image = image.to(device, dtype)                                  # [1, 3, H, W] in [-1, 1]
        self.sampler = FlowMatchSampler(model_cfg.sampler)
        self.rng = torch.Generator().manual_seed(seed)
        self.noise = generator_noise(self.rng)
        self.encoder = StartImageEncoder(models.vae, self.image)
        self.decoder = StreamingDecoder(models.vae)
        self.clip = clip
        self.observer = None if clip is None else StreamingEncoder(models.vae)

    @property
    def frame_size(self) -> tuple[int, int]:
        return self.cfg.video_height, self.cfg.video_width

    def camera_poses(self) -> np.ndarray:
        """The trajectory's per-video-frame poses [T, 7] (MG2 goes wherever the actions say)."""
        return self.trajectory.poses

    @torch.no_grad()
    def prepare_context(self, ctx: AttentionContext) -> None:
        """Attach MG2's per-layer state (action windows) and the start image's cross-attention K/V."""
        self.models.dit.prepare_context(ctx, self.models.clip.encode(self.image))

    def rotate_time(self, layer: int, keys: torch.Tensor, delta_frames: float) -> torch.Tensor:
        """Keys [B, T, H, D] moved ``delta_frames`` latent frames on RoPE's time axis (every layer alike)."""
        return self.models.dit.rope.rotate_time(keys, delta_frames)

    def place_keys(self, layer: int, keys: torch.Tensor, start_frame: float) -> torch.Tensor:
        """Keys [B, T, H, D] of one chunk, stored before the rotation, rotated by the DiT's 3D RoPE as
        if the chunk's first latent frame sat at ``start_frame`` (every layer alike). At the chunk's own
        position this is exactly the rotation its forward applied (the same function on the same
        values), so a pre-rope memory stages the very keys a post-rope one stores."""
        m = self.cfg
        _, ph, pw = m.dit.patch_size
        return self.models.dit.rope.apply_at(keys, start_frame, m.sampler.frames_per_chunk,
                                             m.latent_height // ph, m.latent_width // pw)

    def check_position(self, chunk: int) -> None:
        horizon = self.horizon_chunk
        if self.positions == "native" and chunk >= horizon:
            raise HorizonError(
                f"chunk {chunk} is past MG2's positional horizon (rotary table of "
                f"{self.cfg.dit.rope_table_frames} latent frames ends at chunk {horizon - 1}); "
                "use --positions extend or rerotate")

    @torch.no_grad()
    def denoise(self, chunk: int, ctx: AttentionContext) -> torch.Tensor:
        """Chunk's clean latents [1, z, F, h, w]; its K/V stay uncommitted in ``ctx``."""
        self.check_position(chunk)
        self._end_observing()
        return denoise_chunk(self.models.dit, self.sampler, ctx, self._inputs(chunk), self.noise)

    @torch.no_grad()
    def observe(self, chunk: int, ctx: AttentionContext) -> torch.Tensor:
        """An observed chunk's latents [1, z, F, h, w] (the clip's frames, encoded); only the clean pass
        runs, its K/V stay uncommitted in ``ctx``; no noise is drawn."""
        self.check_position(chunk)
        latents = self.observed_latents(chunk)
        return observe_chunk(self.models.dit, self.sampler, ctx, self._inputs(chunk, noise=False), latents)

    def observed_latents(self, chunk: int) -> torch.Tensor:
        """The VAE encoder's latents of ``chunk``'s video frames from the clip (chunks in order)."""
        grid = self.grid
        start, stop = grid.frames_total(chunk), grid.frames_total(chunk + 1)
        if self.observer is None or self.observer.frames_seen != start:
            raise InputError(f"chunk {chunk} is not the next chunk of the observed clip "
                             f"({'none' if self.clip is None else self.clip.path})")
        latents = self.observer.encode_chunk(model_frames(self.clip.frames(start, stop)))
        return latents.to(self.device, self.dtype)

    def _end_observing(self) -> None:
        """The observed prefix is over: its encoder stream and the clip are no longer needed."""
        if self.clip is not None:
            self.clip.close()
        self.observer = self.clip = None

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, chunk: int) -> torch.Tensor:
        """Video frames [T, 3, H, W] in [-1, 1] (9 for the first chunk, 12 after)."""
        return self.decoder.decode_chunk(latents).clamp_(-1, 1)[0]

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Noise RNG, the start-image encoder's stream, the VAE decoder's causal cache and, inside the
        observed prefix, the observed video's encoder stream."""
        observer = {} if self.observer is None else nest("observer", self.observer.state_tensors())
        return {"rng": generator_state(self.rng), **nest("encoder", self.encoder.state_tensors()),
                **nest("decoder", self.decoder.state_tensors()), **observer}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        set_generator_state(self.rng, tensors["rng"])
        self.encoder.load_state_tensors(sub("encoder", tensors))
        self.decoder.load_state_tensors(sub("decoder", tensors))
        observer = sub("observer", tensors)
        if self.observer is not None and observer:
            self.observer.load_state_tensors(observer)
        elif self.observer is not None:                 # saved after the observed prefix
            self._end_observing()

    def _inputs(self, chunk: int, noise: bool = True) -> ChunkInputs:
        """The chunk's conditioning and actions, and (``noise``) its initial noise from the RNG."""
        m = self.cfg
        f = m.sampler.frames_per_chunk
        shape = (1, m.dit.out_dim, f, m.latent_height, m.latent_width)       # [B, z, F, h, w]
        initial = torch.randn(shape, generator=self.rng, dtype=torch.float32) if noise else None
        # Only the action frames the chunk's windows read travel to the device: constant per chunk.
        first = first_window_frame(chunk * f, m.dit.action) if m.dit.action else 0
        last = 1 + m.vae.temporal_factor * (chunk * f + f - 1)        # video frames up to the chunk's end
        to_model = dict(device=self.device, dtype=self.dtype)
        actions = self.trajectory.actions
        return ChunkInputs(
            noise=None if initial is None else initial.to(**to_model),
            cond_concat=self.encoder.cond_concat(f).to(**to_model),
            start_frame=chunk * f,
            keyboard=actions.keyboard[None, first:last].to(**to_model),
            mouse=None if actions.mouse is None else actions.mouse[None, first:last].to(**to_model),
            action_offset=first)
