"""One chunk of MG2 inference: the denoising steps and the clean pass.

Owns the order of the per-chunk forwards (MG2 §3.2): for each step k, velocity -> x0 -> (re-noise
unless last); then one forward of the final x0 at timestep ``context_noise`` whose only effect is to
overwrite the chunk's K/V with values computed from the clean latent (``clean_pass``). An observed chunk
(``observe_chunk``) runs that same clean pass alone, on the latents of what was observed. Afterwards the
context's current region holds the chunk's clean K/V; the caller stores it if it wants and then calls
``ctx.commit()``. Knows nothing about where the context's memory comes from or where the latents go.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from engine.model.kv_context import AttentionContext
from engine.model.mg2 import CausalDiT
from engine.model.scheduler import FlowMatchSampler


@dataclass
class ChunkInputs:
    """Everything one chunk needs besides the context."""

    noise: torch.Tensor | None          # [B, z, F, h, w] initial noise of the chunk (None: observed)
    cond_concat: torch.Tensor           # [B, in_dim - z, F, h, w] mask + start-image latent slice
    start_frame: int                    # absolute latent index of the chunk's first frame
    keyboard: torch.Tensor | None       # [B, T, kdim] per-video-frame actions (history included)
    mouse: torch.Tensor | None          # [B, T, mdim]
    action_offset: int = 0              # video frame index of keyboard[:, 0] / mouse[:, 0]


class ForwardTrace(Protocol):
    def __call__(self, step: int, x_in: torch.Tensor, velocity: torch.Tensor,
                 x0: torch.Tensor | None) -> None: ...


NoiseSource = Callable[[int, torch.Tensor], torch.Tensor]
"""``(next_step, x0) -> eps`` with x0's shape: the fresh noise used to re-noise before ``next_step``."""


def denoise_chunk(model: CausalDiT, sampler: FlowMatchSampler, ctx: AttentionContext,
                  inputs: ChunkInputs, noise_source: NoiseSource,
                  trace: ForwardTrace | None = None) -> torch.Tensor:
    """Run the chunk's forwards (KV left uncommitted); returns the clean latents [B, z, F, h, w]."""
    batch, _, frames = inputs.noise.shape[:3]
    device = inputs.noise.device
    x = inputs.noise
    x0 = x
    for step in range(sampler.num_steps):
        velocity = _forward(model, ctx, inputs, x, sampler.timestep_tensor(step, batch, frames, device))
        x0 = sampler.x0_from_velocity(x, velocity, step)
        if trace is not None:
            trace(step, x, velocity, x0)
        if step + 1 < sampler.num_steps:
            x = sampler.renoise(x0, step + 1, noise_source(step + 1, x0))
    velocity = clean_pass(model, sampler, ctx, inputs, x0)
    if trace is not None:
        trace(sampler.num_steps, x0, velocity, None)
    return x0


def observe_chunk(model: CausalDiT, sampler: FlowMatchSampler, ctx: AttentionContext,
                  inputs: ChunkInputs, latents: torch.Tensor) -> torch.Tensor:
    """An observed chunk: only the clean pass on its ``latents`` [B, z, F, h, w] (KV left uncommitted,
    exactly as ``denoise_chunk`` leaves them for a chunk whose clean latents these are); returns them.
    ``inputs.noise`` is not read."""
    clean_pass(model, sampler, ctx, inputs, latents)
    return latents


def clean_pass(model: CausalDiT, sampler: FlowMatchSampler, ctx: AttentionContext, inputs: ChunkInputs,
               x0: torch.Tensor) -> torch.Tensor:
    """The forward of the clean latents ``x0`` at timestep ``context_noise`` that overwrites the chunk's
    K/V in ``ctx``; returns its (otherwise unused) velocity."""
    batch, _, frames = x0.shape[:3]
    return _forward(model, ctx, inputs, x0, sampler.clean_timestep_tensor(batch, frames, x0.device))


def _forward(model: CausalDiT, ctx: AttentionContext, inputs: ChunkInputs, x: torch.Tensor,
             t: torch.Tensor) -> torch.Tensor:
    return model(x, t, inputs.cond_concat, ctx, inputs.start_frame, inputs.keyboard, inputs.mouse,
                 inputs.action_offset)


def generator_noise(generator: torch.Generator) -> NoiseSource:
    """Fresh standard-normal noise from a seeded generator (drawn on the CPU for determinism)."""
    def draw(_step: int, like: torch.Tensor) -> torch.Tensor:
        eps = torch.randn(like.shape, generator=generator, dtype=torch.float32)
        return eps.to(device=like.device, dtype=like.dtype)
    return draw
