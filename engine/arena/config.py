"""Shape of the arena model: a small causal DiT of MG2's family working on pixel patches.

Owns every size the arena model, its training and its pipeline derive from (no literals elsewhere):
frame size and field of view, patching, width/depth, chunk and window lengths in latent frames, the
rotary time positions and their native horizon, the camera-ray features, the sampler's timesteps, the
output's design (the pixel warp source, the number of hypotheses per token, the optional depth head, the
re-projection radius and whether it uses depth),
and the ``KVLayout`` the memory stores (the transformer's layers plus one copy layer: geometric keys and
clean pixel-patch values, which is why ``3 * patch**2`` must equal ``dim``; with depth re-projection one
more layer: each token's predicted inverse depth).
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.model.interface import KVLayout, VideoGrid

DEPTH_KINDS = ("linear", "conv")
ACTION_DIM = 6          # per latent frame: mean of w, s, a, d and mouse pitch, yaw (x10) over its video frames


@dataclass(frozen=True)
class ArenaModelConfig:
    height: int = 48                 # model frame (the renderer's resolution)
    width: int = 80
    hfov: float = 90.0               # degrees
    patch: int = 8
    dim: int = 192
    heads: int = 4
    layers: int = 4
    mlp_ratio: int = 3
    frames_per_chunk: int = 3        # latent frames per chunk (MG2: 3)
    window_frames: int = 3           # past latent frames attended besides memory (MG2: 6 - 3)
    temporal: int = 4                # video frames per latent frame (MG2's causal VAE: 4)
    fps: int = 16
    upscale: int = 4                 # video frames are shown at upscale x the model's size
    rope_time_dims: int = 16         # channels of each head rotated by the latent-frame index
    rope_theta: float = 10000.0
    rope_table_frames: int = 240     # native time positions (the horizon: chunk 80)
    pos_freqs: int = 6               # Fourier octaves of the camera position
    pos_period: float = 64.0         # world units: the longest position wavelength
    ray_harmonics: int = 12          # harmonics of the ray's heading
    elev_harmonics: int = 4          # harmonics of the ray's elevation
    freq_dim: int = 64               # sinusoidal width of the timestep embedding
    steps: tuple[float, ...] = (1.0,)   # flow-matching timesteps of the sampler (1 = pure noise)
    warp: bool = False               # a third output source: the window's last frame warped to each frame's view
    hypotheses: int = 1              # candidate x0 patches per token (> 1: trained winner-takes-all, the likeliest kept)
    hard_copy: bool = False          # inference: the copy head takes its best-matching patch whole, and a token
                                     # is either copied or generated (training stays soft)
    codebook: int = 0                # > 0: a categorical output over this many codes of code_patch x code_patch pixels
                                     # (engine.arena.codebook); inference takes each sub-patch's likeliest code
    code_patch: int = 4
    depth_head: bool = False         # training: a per-pixel inverse-depth output beside the x0 (target: the
                                     # renderer's depth, ``train --depth-weight``); inference reads it with reproject_depth
    depth_kind: str = "linear"       # the depth head's kind: "linear" (one linear map of the final features per patch;
                                     # trained by ``train --depth-weight``) or "conv" (``engine.arena.depth_net``: a
                                     # small conv net over the frame's pixels and camera; ``engine.arena.depth_train``)
    observed_depth: int = 0          # > 0: a second conv depth head this many channels wide for observed (true,
                                     # sharp) frames only (``engine.arena.observed_depth_train``); 0: none, observed
                                     # frames are read by the conv head as generated ones are
    reproject: float = 0.15          # inference: pixels of context frames seen from within this many world units
                                     # of a frame's camera, warped to its view, replace the x0 (engine.arena.reproject;
                                     # 0: off); a session's --arena-reproject overrides it
    reproject_depth: bool = False    # inference: re-project memory and window frames from any distance with the
                                     # depth predicted for each (engine.arena.depth_reproject; needs the depth
                                     # head); the store keeps each frame's depth in one more KV layer;
                                     # a session's --arena-reproject-depth turns it on

    def __post_init__(self) -> None:
        assert self.height % self.patch == 0 and self.width % self.patch == 0
        assert self.dim % self.heads == 0 and self.patch_dim == self.dim, "copy layer must fit the KV layout"
        assert self.rope_time_dims % 2 == 0 and self.rope_time_dims <= self.head_dim
        assert self.steps and all(0 < s <= 1 for s in self.steps)
        assert self.hypotheses >= 1
        assert self.codebook >= 0 and self.patch % self.code_patch == 0
        assert self.reproject >= 0
        assert self.depth_kind in DEPTH_KINDS, f"depth_kind must be one of {DEPTH_KINDS}"
        assert type(self.observed_depth) is int and self.observed_depth >= 0, "observed_depth must be a width >= 0"
        assert not self.observed_depth or (self.depth_head and self.depth_kind == "conv"), \
            "observed_depth needs the conv depth head"

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def patch_dim(self) -> int:
        return 3 * self.patch * self.patch

    @property
    def rows(self) -> int:
        return self.height // self.patch

    @property
    def cols(self) -> int:
        return self.width // self.patch

    @property
    def tokens_per_frame(self) -> int:
        return self.rows * self.cols

    @property
    def tokens_per_chunk(self) -> int:
        return self.tokens_per_frame * self.frames_per_chunk

    @property
    def geom_dim(self) -> int:
        return 4 * self.pos_freqs + 2 * self.ray_harmonics + 2 * self.elev_harmonics

    @property
    def horizon_chunk(self) -> int:
        f = self.frames_per_chunk
        return (self.rope_table_frames - f) // f + 1

    def kv_layout(self, depth: bool | None = None) -> KVLayout:
        """The stored KV: the transformer's layers, the copy layer and, with depth re-projection
        (``depth``; None: ``reproject_depth``), the depth layer (``engine.arena.depth_reproject``)."""
        extra = 2 if (self.reproject_depth if depth is None else depth) else 1
        return KVLayout(layers=self.layers + extra, tokens_per_frame=self.tokens_per_frame,
                        frames_per_chunk=self.frames_per_chunk, heads=self.heads, head_dim=self.head_dim,
                        window_frames=self.window_frames)

    def video_grid(self) -> VideoGrid:
        t, f = self.temporal, self.frames_per_chunk
        return VideoGrid(first_frames=1 + t * (f - 1), frames_per_chunk=t * f, fps=self.fps)

    @property
    def video_size(self) -> tuple[int, int]:
        return self.height * self.upscale, self.width * self.upscale
