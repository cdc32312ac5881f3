"""The control tensor of one chunk of a LingBot session, for either control type.

Owns what the session feeds ``patch_embedding_wancamctrl`` chunk by chunk:

* the rays' intrinsics: a LingBot pose folder's own (row 0 of ``intrinsics.npy``, for a 480x832 frame,
  scaled to the model's pixel grid as the official code does), else the retrieval's 90-degree field of
  view on the model's pixel grid;
* ``cam`` — Plücker rays (origin, direction) of the frame-to-frame relative poses [1, 6*64, F, h, w];
* ``act`` — ray directions plus the W, A, S, D key states of video frame 4i for latent frame i
  (``engine.model.lingbot.act``) [1, 7*64, F, h, w]; the keys are the pose folder's ``action.npy`` when
  the trajectory came from one, else the trajectory's own universal keys (forward, back, left, right).
"""
from __future__ import annotations

import numpy as np
import torch

from engine.io.trajectory import Trajectory
from engine.model.lingbot import camera
from engine.model.lingbot.act import act_embedding
from engine.facts.lingbot_config import VAE_STRIDE
from engine.model.lingbot.loop import INTRINSICS_SIZE
from engine.facts.lingbot_models import LingbotModelConfig

UNIVERSAL_TO_WASD = [0, 2, 1, 3]      # (forward, back, left, right) -> (W, A, S, D)


def ray_intrinsics(m: LingbotModelConfig, trajectory: Trajectory) -> torch.Tensor:
    """(fx, fy, cx, cy) [4] float32 on the model's pixel grid."""
    if trajectory.intrinsics is None:
        return torch.tensor(m.intrinsics(), dtype=torch.float32)
    return camera.scale_intrinsics(torch.as_tensor(trajectory.intrinsics, dtype=torch.float32),
                                   INTRINSICS_SIZE, m.frame_size)


def latent_keys(m: LingbotModelConfig, trajectory: Trajectory) -> torch.Tensor | None:
    """W, A, S, D of video frame 4i for every latent frame i [N, 4] (None for ``cam`` control)."""
    if m.dit.control_type != "act":
        return None
    if trajectory.key_states is not None:
        keys = np.asarray(trajectory.key_states, dtype=np.float32)
    else:
        assert trajectory.mode == "universal", "act control reads universal keys"
        keys = trajectory.actions.keyboard.numpy()[:, UNIVERSAL_TO_WASD]
    return torch.from_numpy(np.ascontiguousarray(keys[::VAE_STRIDE[0]])).to(torch.float32)


def chunk_control(m: LingbotModelConfig, relative: torch.Tensor, ks: torch.Tensor, keys: torch.Tensor | None,
                  chunk: int) -> torch.Tensor:
    """The chunk's control tensor from the session's relative poses [N, 4, 4] (latent frames past the
    end take the last one), intrinsics [4] and, for ``act``, latent keys [N, 4]."""
    f = m.frames_per_chunk
    frames = torch.arange(chunk * f, chunk * f + f).clamp(max=len(relative) - 1)
    height, width = m.frame_size
    rays = camera.plucker_rays(relative[frames], ks.expand(f, 4), height, width, with_origin=keys is None)
    if keys is None:
        return camera.control_embedding(rays, VAE_STRIDE[1])
    return act_embedding(rays, keys[frames.clamp(max=len(keys) - 1)])
