"""Rotary position embeddings of MG2: the DiT's 3D RoPE and the action module's 1D RoPE.

Owns the angle formulas and the rotation. Angles are computed for any position on demand, so the table
never ends: for positions inside MG2's native table (1024 latent frames) the values are exactly the
ones the native table holds (same formula, same float64 arithmetic), which keeps outputs below the
horizon bit-identical to an unextended model. Whether positions past the horizon are allowed is the
caller's policy (``engine.session.positions``); this module only computes.

Rotation convention (both RoPEs): adjacent channels (2j, 2j+1) form a pair, rotated as
``(a, b) -> (a cos - b sin, a sin + b cos)``.
"""
from __future__ import annotations

import torch


def _inverse_frequencies(dim: int, theta: float, dtype: torch.dtype) -> torch.Tensor:
    """``theta ** (-2j / dim)`` for j < dim/2 (the rotary frequency of each channel pair)."""
    # Explicit CPU device: a model built under ``torch.device("meta")`` still gets real tables.
    return 1.0 / torch.pow(theta, torch.arange(0, dim, 2, dtype=dtype, device="cpu").div(dim))


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent channel pairs of ``x`` [..., 2P] by angles given as ``cos``/``sin`` [..., P]."""
    pairs = x.unflatten(-1, (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class DiTRope:
    """3D RoPE of the causal DiT: head channels split into (time, height, width) pair groups.

    ``apply(x, start_frame, frames, height, width)`` rotates x [B, L=frames*height*width, H, D] with
    tokens ordered (frame, row, column); the time position of frame f is ``start_frame + f`` (absolute
    latent-frame index since the start of the session). Computed in float64, cast back to x's dtype.
    """

    def __init__(self, head_dim: int, split: tuple[int, int, int], theta: float = 10000.0):
        assert head_dim % 2 == 0 and sum(split) == head_dim, (head_dim, split)
        self.split = split
        self.inv_freq = [_inverse_frequencies(d, theta, torch.float64) for d in split]
        self._spatial: dict[tuple[int, int, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def time_angles(self, positions: torch.Tensor) -> torch.Tensor:
        """Angles [N, split[0]/2] (float64) of the time axis at (possibly fractional) positions."""
        return torch.outer(positions.to(torch.float64), self.inv_freq[0].to(positions.device))

    def _spatial_angles(self, height: int, width: int, device: torch.device):
        key = (height, width, str(device))
        if key not in self._spatial:
            rows = torch.arange(height, dtype=torch.float64, device=device)
            cols = torch.arange(width, dtype=torch.float64, device=device)
            self._spatial[key] = (torch.outer(rows, self.inv_freq[1].to(device)),
                                  torch.outer(cols, self.inv_freq[2].to(device)))
        return self._spatial[key]

    def angles(self, start_frame: float, frames: int, height: int, width: int,
               device: torch.device) -> torch.Tensor:
        """Angles [frames*height*width, D/2] (float64) for a block of tokens starting at start_frame."""
        t = self.time_angles(start_frame + torch.arange(frames, dtype=torch.float64, device=device))
        h, w = self._spatial_angles(height, width, device)
        pt, ph, pw = t.shape[1], h.shape[1], w.shape[1]
        grid = torch.cat([
            t.view(frames, 1, 1, pt).expand(frames, height, width, pt),
            h.view(1, height, 1, ph).expand(frames, height, width, ph),
            w.view(1, 1, width, pw).expand(frames, height, width, pw),
        ], dim=-1)
        return grid.reshape(frames * height * width, -1)

    def apply(self, x: torch.Tensor, start_frame: int, frames: int, height: int,
              width: int) -> torch.Tensor:
        return self.apply_at(x, start_frame, frames, height, width)

    def apply_at(self, x: torch.Tensor, start_frame: float, frames: int, height: int,
                 width: int) -> torch.Tensor:
        """``apply`` at a possibly fractional start position (re-placed memory lands between frames)."""
        ang = self.angles(start_frame, frames, height, width, x.device)[:, None, :]  # [L, 1, D/2]
        out = rotate_pairs(x.to(torch.float64), ang.cos(), ang.sin())
        return out.to(x.dtype)

    def rotate_time(self, x: torch.Tensor, delta_frames: float) -> torch.Tensor:
        """Shift already-rotated keys x [..., H, D] by ``delta_frames`` on the time axis only.

        Rotations compose additively, so this equals computing RoPE at the new position.
        """
        n_t = self.split[0] // 2
        ang = self.time_angles(torch.tensor([delta_frames], device=x.device))[0]  # [n_t]
        full = torch.zeros(x.shape[-1] // 2, dtype=torch.float64, device=x.device)
        full[:n_t] = ang
        out = rotate_pairs(x.to(torch.float64), full.cos(), full.sin())
        return out.to(x.dtype)


class ActionRope:
    """1D RoPE of the action module (float32, as MG2 computes it).

    MG2 builds its table on a (frames, 1, 1) grid with per-axis dims ``rope_dim_list``; the height and
    width positions are always 0, so only the first ``rope_dim_list[0]`` channels rotate.
    """

    def __init__(self, rope_dim_list: tuple[int, ...], theta: float):
        self.time_dim = rope_dim_list[0]
        self.inv_freq = _inverse_frequencies(self.time_dim, theta, torch.float32)

    def apply(self, x: torch.Tensor, start_frame: int) -> torch.Tensor:
        """Rotate x [N, F, H, D] whose frame f sits at position start_frame + f."""
        frames = x.shape[1]
        pos = torch.arange(start_frame, start_frame + frames, dtype=torch.float32, device=x.device)
        ang = torch.outer(pos, self.inv_freq.to(x.device))[None, :, None, :]  # [1, F, 1, t/2]
        xf = x.float()
        rotated = rotate_pairs(xf[..., : self.time_dim], ang.cos(), ang.sin())
        return torch.cat([rotated, xf[..., self.time_dim:]], dim=-1).type_as(x)
