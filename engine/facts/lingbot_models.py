"""The named LingBot-World-Fast configurations a session can run, and the shapes the session sees.

Owns ``LingbotModelConfig`` — the DiT config, the loop settings, the Wan2.1 VAE (MG2's ``VAEConfig``:
LingBot uses the same 16-channel VAE and latent normalisation), the latent grid, the frame rate, the
rotary table length (the positional horizon), the width of the text stand-in — and what follows from
it without weights: the ``KVLayout`` of one chunk, the ``VideoGrid``, the horizon chunk, the camera
intrinsics on the model's pixel grid; and what the planner reads of a model (``shape()``, an
``engine.facts.layout.ModelShape``, as MG2's ``ModelConfig`` gives it). Torch-free shared ground, so that the
planner reads it without importing the model family. And the two named configurations:

* ``lingbot-tiny`` — the parity fixture's DiT (dim 128, 2 heads, 2 layers, 12x20 latents = 96x160
  video, ``cam`` control, cache of 8 latent frames with a 1-frame sink) with seeded random weights, an
  8-wide VAE (as MG2's micro model), and a rotary table of 15 latent frames so that its horizon (chunk
  5) is reached in seconds; its text context is a seeded random stand-in of the T5 output's shape.
* ``lingbot-tiny-act`` — the same with the ``act`` control (ray directions + W, A, S, D keys,
  control_dim 7), seeded the same way.
* ``lingbot-fast`` — the released 14B shape at 480x832 (``FULL_SIZE``), cache of 18 latent frames with a
  3-frame sink (pipeline settings; the release passes them as overrides), Wan's 1024-frame table.

How the session's context maps onto the official cache: the official cache of ``local_attn_size``
latent frames holds the sink, the past frames and the current chunk; here the current chunk and the
past frames are the context's chunk and local window (``window_frames = local_attn_size - sink_size -
chunk_size``) and the sink is either the official one (``--official-sink``: the first ``sink_size``
latent frames, ``engine.model.lingbot.context``) or the session's (``--sink``: the first chunk, kept
resident), beside the retrieved memory.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from engine.config import VAEConfig
from engine.errors import ConfigError
from engine.facts.layout import KVLayout, ModelShape, VideoGrid
from engine.facts.lingbot_config import FULL_SIZE, VAE_STRIDE, FastDiTConfig, LoopSettings

RETRIEVAL_HFOV_DEG = 90.0       # the retrieval's frustum (engine.retrieval.select); the camera rays agree


@dataclass(frozen=True)
class LingbotModelConfig:
    name: str
    dit: FastDiTConfig
    settings: LoopSettings
    vae: VAEConfig
    latent_height: int
    latent_width: int
    fps: int = 16
    rope_table_frames: int = 1024     # Wan's rotary table (positions up to 1023): the native horizon
    text_tokens: int = 23             # rows of the seeded text stand-in (tiny configuration only)
    seeded: bool = False              # built-in seeded weights (no checkpoint needed)
    device_params: int = 0            # DiT + VAE parameters on the device (the text encoder is freed first)

    def __post_init__(self) -> None:
        _, ph, pw = self.dit.patch_size
        if self.latent_height % ph or self.latent_width % pw:
            raise ConfigError(f"{self.name}: latent grid {self.latent_height}x{self.latent_width} is not a "
                              f"multiple of the patch {ph}x{pw}")
        if self.window_frames < 0:
            raise ConfigError(f"{self.name}: a cache of {self.dit.local_attn_size} latent frames cannot hold "
                              f"the sink ({self.dit.sink_size}) and a chunk ({self.settings.chunk_size})")

    @property
    def frames_per_chunk(self) -> int:
        return self.settings.chunk_size

    @property
    def tokens_per_frame(self) -> int:
        _, ph, pw = self.dit.patch_size
        return (self.latent_height // ph) * (self.latent_width // pw)

    @property
    def tokens_per_chunk(self) -> int:
        return self.tokens_per_frame * self.frames_per_chunk

    @property
    def window_frames(self) -> int:
        """Past latent frames of the local window (the cache minus its sink and the current chunk)."""
        return self.dit.local_attn_size - max(self.dit.sink_size, 0) - self.frames_per_chunk

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of the start image and of the decoded video."""
        return self.latent_height * VAE_STRIDE[1], self.latent_width * VAE_STRIDE[2]

    @property
    def horizon_chunk(self) -> int:
        """First chunk whose latent frames do not all fit the native rotary table."""
        f = self.frames_per_chunk
        return (self.rope_table_frames - f) // f + 1

    def kv_layout(self) -> KVLayout:
        return KVLayout(layers=self.dit.num_layers, tokens_per_frame=self.tokens_per_frame,
                        frames_per_chunk=self.frames_per_chunk, heads=self.dit.num_heads,
                        head_dim=self.dit.head_dim, window_frames=self.window_frames)

    def video_grid(self) -> VideoGrid:
        """The Wan VAE's 4n+1 rule: chunk 0 = 1 + 4 (F - 1) video frames, every later chunk 4 F."""
        t, f = VAE_STRIDE[0], self.frames_per_chunk
        return VideoGrid(first_frames=1 + t * (f - 1), frames_per_chunk=t * f, fps=self.fps)

    def shape(self) -> ModelShape:
        """What the planner reads of this model (``engine.facts.layout.ModelShape``)."""
        return ModelShape(self.name, self.kv_layout(), self.video_grid(), self.device_params)

    def intrinsics(self) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) on the model's pixel grid: square pixels, the retrieval's horizontal FOV."""
        height, width = self.frame_size
        fx = (width / 2) / math.tan(math.radians(RETRIEVAL_HFOV_DEG) / 2)
        return fx, fx, width / 2, height / 2


# Loop settings of the fixture (the official generate()'s defaults).
_SETTINGS = LoopSettings()

LINGBOT_TINY = LingbotModelConfig(
    name="lingbot-tiny",
    dit=FastDiTConfig(dim=128, ffn_dim=256, num_heads=2, num_layers=2, local_attn_size=8, sink_size=1),
    settings=_SETTINGS, vae=VAEConfig(dim=8), latent_height=12, latent_width=20,
    rope_table_frames=15, seeded=True, device_params=2_401_931)

LINGBOT_TINY_ACT = dataclasses.replace(LINGBOT_TINY, name="lingbot-tiny-act",
                                       dit=dataclasses.replace(LINGBOT_TINY.dit, control_type="act"),
                                       device_params=2_434_699)

LINGBOT_FAST = LingbotModelConfig(
    name="lingbot-fast",
    dit=dataclasses.replace(FULL_SIZE, local_attn_size=18, sink_size=3),
    settings=_SETTINGS, vae=VAEConfig(), latent_height=480 // VAE_STRIDE[1], latent_width=832 // VAE_STRIDE[2],
    device_params=18_671_225_395)

LINGBOT_CONFIGS = {c.name: c for c in (LINGBOT_TINY, LINGBOT_TINY_ACT, LINGBOT_FAST)}


def lingbot_config(name: str) -> LingbotModelConfig:
    try:
        return LINGBOT_CONFIGS[name]
    except KeyError:
        raise ConfigError(f"unknown LingBot-World-Fast model {name!r} "
                          f"(choose from {', '.join(sorted(LINGBOT_CONFIGS))})") from None
