"""MG2's few-step flow-matching sampler (shift 5, warped step list, x0 from velocity, re-noising).

Owns the sigma/timestep table and the per-step arithmetic; knows nothing about the network.

* table: 1000 sigmas evenly spaced from 1 down to 1/1000 (``linspace(1, 0, 1001)`` minus its last
  point), shifted ``s' = k s / (1 + (k-1) s)``; timesteps = 1000 s' (float32).
* warped steps: the listed steps (1000, 666, 333) index the table with a trailing 0 appended at
  position ``1000 - step``, giving model timesteps 1000.0, 908.84, 713.98.
* x0 = x_t - sigma(t) v in float64 (sigma by nearest timestep); between steps
  x = (1 - sigma_next) x0 + sigma_next eps with fresh noise eps.
"""
from __future__ import annotations

import torch

from engine.config import SamplerConfig


class FlowMatchSampler:
    def __init__(self, cfg: SamplerConfig):
        self.cfg = cfg
        n = cfg.num_train_timesteps
        base = torch.linspace(1.0, 0.0, n + 1, dtype=torch.float32)[:-1]
        k = cfg.timestep_shift
        self.sigmas = k * base / (1 + (k - 1) * base)                # [n] float32
        self.timesteps = self.sigmas * n                             # [n] float32
        steps = torch.tensor(cfg.denoising_step_list, dtype=torch.long)
        if cfg.warp_denoising_step:
            padded = torch.cat([self.timesteps, torch.zeros(1, dtype=torch.float32)])
            self.step_timesteps = padded[n - steps]
        else:
            self.step_timesteps = steps.to(torch.float32)
        self.step_sigmas = self.sigmas[self._table_index(self.step_timesteps)]

    @property
    def num_steps(self) -> int:
        return len(self.step_timesteps)

    def _table_index(self, t: torch.Tensor) -> torch.Tensor:
        return torch.argmin((self.timesteps[None, :] - t.reshape(-1, 1).to(torch.float32)).abs(), dim=1)

    def timestep_tensor(self, step: int, batch: int, frames: int, device) -> torch.Tensor:
        """The [B, F] float32 timestep fed to the model at ``step`` (every frame alike)."""
        return torch.full((batch, frames), float(self.step_timesteps[step]), dtype=torch.float32,
                          device=device)

    def clean_timestep_tensor(self, batch: int, frames: int, device) -> torch.Tensor:
        return torch.full((batch, frames), float(self.cfg.context_noise), dtype=torch.float32,
                          device=device)

    def x0_from_velocity(self, x_t: torch.Tensor, velocity: torch.Tensor, step: int) -> torch.Tensor:
        sigma = self.step_sigmas[step].to(torch.float64)
        return (x_t.to(torch.float64) - sigma * velocity.to(torch.float64)).to(velocity.dtype)

    def renoise(self, x0: torch.Tensor, next_step: int, eps: torch.Tensor) -> torch.Tensor:
        """x at ``next_step``: (1 - sigma) x0 + sigma eps, computed in float32."""
        sigma = self.step_sigmas[next_step].to(x0.device)
        out = (1 - sigma) * x0.to(torch.float32) + sigma * eps.to(torch.float32)
        return out.to(x0.dtype)
