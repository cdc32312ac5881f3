"""The sigma / timestep tables of LingBot-World-Fast's distilled sampler and their two look-ups.

Owns the arithmetic of the official flow-matching scheduler as ``generate()`` uses it:

* tables: sigma_max = 1 - 1/N rounded to float32, sigma_min = 0; ``linspace(sigma_max, sigma_min,
  N + 1)`` without its last point (float64), shifted ``s' = k s / (1 + (k - 1) s)``; timesteps =
  ``int64(1000 s')`` (truncated); the sigma table is s' with a final 0, in float32.
* the model timesteps are the table entries at ``timesteps_index``;
* **x0 look-up**: the sigma of the *first* table entry nearest to the timestep (float64 distance);
* **re-noise look-up**: among the entries equal to the target timestep the *second* one when there are
  several, else the only one (the scheduler's ``add_noise``).

Because the timesteps are truncated integers, neighbouring entries share a value, so neither look-up is
in general the entry at ``timesteps_index``.
"""
from __future__ import annotations

import torch

from engine.errors import ConfigError
from engine.facts.lingbot_config import LoopSettings


class DMDSchedule:
    def __init__(self, settings: LoopSettings):
        n, k = settings.num_train_timesteps, settings.shift
        sigma_max = float(torch.tensor(1.0 - 1.0 / n, dtype=torch.float32))
        base = torch.linspace(sigma_max, 0.0, n + 1, dtype=torch.float64)[:-1]
        shifted = k * base / (1 + (k - 1) * base)
        self.timesteps_table = (shifted * n).to(torch.int64)                          # [N]
        self.sigmas_table = torch.cat([shifted, shifted.new_zeros(1)]).to(torch.float32)  # [N + 1]
        self.timesteps = self.timesteps_table[list(settings.timesteps_index)]        # [steps] int64
        self.sigma_x0 = torch.stack([self.sigmas_table[self.x0_index(int(t))] for t in self.timesteps])
        self.sigma_renoise = torch.stack([self.sigmas_table[self.renoise_index(int(t))]
                                          for t in self.timesteps[1:]])

    @property
    def num_steps(self) -> int:
        return len(self.timesteps)

    def x0_index(self, timestep: int) -> int:
        distance = (self.timesteps_table.to(torch.float64) - float(timestep)).abs()
        return int(torch.argmin(distance))

    def renoise_index(self, timestep: int) -> int:
        matches = (self.timesteps_table == timestep).nonzero().flatten()
        if len(matches) == 0:
            raise ConfigError(f"timestep {timestep} is not in the scheduler's table")
        return int(matches[1] if len(matches) > 1 else matches[0])

    def x0(self, x: torch.Tensor, velocity: torch.Tensor, step: int) -> torch.Tensor:
        """x0 = x - sigma v, in float64 from the float32 values, rounded back to float32."""
        sigma = self.sigma_x0[step].to(torch.float64)
        return (x.to(torch.float64) - sigma * velocity.to(torch.float64)).to(velocity.dtype)

    def renoise(self, x0: torch.Tensor, step: int, eps: torch.Tensor) -> torch.Tensor:
        """The input of step ``step + 1``: (1 - sigma) x0 + sigma eps, in float32."""
        sigma = self.sigma_renoise[step].to(x0.device)
        return ((1 - sigma) * x0.to(torch.float32) + sigma * eps.to(torch.float32)).to(x0.dtype)
