"""The ``act`` control of LingBot-World-Fast: ray directions plus WASD key states, 7 channels a pixel.

Owns the official ``act`` rules (``WanI2VFast.generate`` with control type ``act``):

* ``latent_actions`` — the per-video-frame key states [N, 4] (columns W, A, S, D, 0 or 1, as the
  official ``action.npy``) cut to the run's ``frame_num`` frames, then every 4th row (video frames
  0, 4, 8, ...: the action is picked, not interpolated), one row per latent frame;
* ``act_embedding`` — directions-only rays [F, H, W, 3] (the camera rays of the relative poses without
  their origin) and the latent actions [F, 4] broadcast to every pixel, each laid out per latent cell
  (``camera.control_embedding``) and concatenated on the channel axis: channels 0..3*64-1 the rays,
  3*64 + 64*a + 8*dy + dx the key a (the same value at every pixel of the cell).

The rotation of the poses steers the view; the keys drive the motion.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.errors import InputError
from engine.model.lingbot import camera
from engine.facts.lingbot_config import VAE_STRIDE

ACTION_KEYS = ("w", "a", "s", "d")     # the columns of the official action.npy


def latent_actions(actions, frame_num: int, lat_f: int) -> torch.Tensor:
    """Key states [N, 4] of the video frames -> [lat_f, 4] float32: rows 0, 4, 8, ... of the first
    ``frame_num`` rows, the first ``lat_f`` of them."""
    table = torch.as_tensor(np.asarray(actions)).to(torch.float32)
    if table.ndim != 2 or table.shape[1] != len(ACTION_KEYS):
        raise InputError(f"actions of shape {tuple(table.shape)}: expected [N, {len(ACTION_KEYS)}] "
                         f"(columns {', '.join(k.upper() for k in ACTION_KEYS)})")
    picked = table[:frame_num][::VAE_STRIDE[0]]
    if len(picked) < lat_f:
        raise InputError(f"{len(table)} action rows give {len(picked)} latent frames, {lat_f} needed")
    return picked[:lat_f].contiguous()


def act_embedding(rays_d: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Directions [F, H, W, 3] and latent actions [F, 4] -> control tensor [1, 7*64, F, H/8, W/8]."""
    frames, height, width, _ = rays_d.shape
    if actions.shape != (frames, len(ACTION_KEYS)):
        raise InputError(f"actions {tuple(actions.shape)} do not match {frames} latent frames of rays")
    keys = actions.to(rays_d.dtype)[:, None, None, :].expand(frames, height, width, len(ACTION_KEYS))
    stride = VAE_STRIDE[1]
    return torch.cat([camera.control_embedding(rays_d, stride), camera.control_embedding(keys, stride)], dim=1)
