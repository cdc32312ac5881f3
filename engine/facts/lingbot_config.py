"""Configuration of LingBot-World-Fast: the DiT's constructor config and the chunk loop's settings.

Owns the translation of the official ``WanModelFast`` config (the ``config.json`` of the
``lingbot_world_fast`` checkpoint folder plus the pipeline's overrides) into a frozen ``FastDiTConfig``
— constructor defaults for absent fields, unknown fields are ``ConfigError``s naming the field — and
``LoopSettings``, the arguments of the official ``generate()`` that shape the numerics.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from engine.config import wan_rope_split
from engine.errors import ConfigError

CONTROL_CHANNELS = {"cam": 6, "act": 7}     # per-pixel control channels: Plücker (6); ray dirs + WASD (7)
VAE_STRIDE = (4, 8, 8)                      # Wan2.1 VAE: video frames and pixels per latent cell


@dataclass(frozen=True)
class FastDiTConfig:
    """``WanModelFast`` constructor arguments.

    ``patch_size``, ``qk_norm``, ``cross_attn_norm`` and ``text_dim`` are never in the released config
    and always take these (the official constructor's) defaults; the other defaults are the released
    14B shape (Wan2.1-14B i2v widths), which a release's ``config.json`` states anyway.
    """

    model_type: str = "i2v"
    control_type: str = "cam"
    patch_size: tuple[int, int, int] = (1, 2, 2)
    text_len: int = 512
    in_dim: int = 36
    dim: int = 5120
    ffn_dim: int = 13824
    freq_dim: int = 256
    text_dim: int = 4096
    out_dim: int = 16
    num_heads: int = 40
    num_layers: int = 40
    local_attn_size: int = -1     # latent frames the self-attention cache holds (-1: the whole video)
    sink_size: int = 0            # latent frames at the start of the cache that are never evicted
    qk_norm: bool = True
    cross_attn_norm: bool = True
    eps: float = 1e-6
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.control_type not in CONTROL_CHANNELS:
            raise ConfigError(f"unknown control_type {self.control_type!r} (known: {sorted(CONTROL_CHANNELS)})")
        if self.model_type != "i2v" or not self.qk_norm:
            raise ConfigError(f"only the i2v model with q/k norms exists in the fast release "
                              f"(model_type {self.model_type!r}, qk_norm {self.qk_norm})")
        if self.dim % self.num_heads or (self.dim // self.num_heads) % 2:
            raise ConfigError(f"dim {self.dim} does not split into {self.num_heads} heads of even width")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def rope_split(self) -> tuple[int, int, int]:
        """Real channels of a head given to the (time, height, width) rotary axes (Wan's rule)."""
        return wan_rope_split(self.head_dim)

    @property
    def control_dim(self) -> int:
        return CONTROL_CHANNELS[self.control_type]

    @property
    def control_in_features(self) -> int:
        """Inputs of ``patch_embedding_wancamctrl``: control channels x pixels of a latent cell x patch."""
        return self.control_dim * VAE_STRIDE[1] * VAE_STRIDE[2] * math.prod(self.patch_size)


# The released LingBot-World-Fast DiT: Wan2.1-14B i2v widths, camera control. Its cache window and sink
# are the pipeline's settings, not the checkpoint's.
FULL_SIZE = FastDiTConfig()

_FIELDS = {f.name for f in fields(FastDiTConfig)}
_IGNORED = {"_class_name", "_diffusers_version"}


def config_from_official(d: Mapping[str, Any]) -> FastDiTConfig:
    """``FastDiTConfig`` from an official config dict (with the pipeline's overrides merged in)."""
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key in _IGNORED or key.startswith("_"):     # diffusers' bookkeeping (_name_or_path, ...)
            continue
        if key not in _FIELDS:
            raise ConfigError(f"unknown LingBot-World-Fast config field {key!r}")
        kwargs[key] = tuple(value) if isinstance(value, list) else value
    return FastDiTConfig(**kwargs)


@dataclass(frozen=True)
class LoopSettings:
    """The official ``generate()`` arguments that shape the numerics (defaults: its signature's)."""

    chunk_size: int = 3                                   # latent frames per chunk
    timesteps_index: tuple[int, ...] = (0, 179, 358, 679)  # DMD steps as indices into the timestep table
    shift: float = 5.0                                    # the official CLI passes 10.0 (``sample_shift``)
    num_train_timesteps: int = 1000
    max_attention_size: int | None = None                 # tokens attended; None = the cache size

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ConfigError(f"chunk_size must be positive, got {self.chunk_size}")
        bad = [i for i in self.timesteps_index if not 0 <= i < self.num_train_timesteps]
        if bad or not self.timesteps_index:
            raise ConfigError(f"timesteps_index {list(self.timesteps_index)} outside "
                              f"[0, {self.num_train_timesteps})")
        if self.shift <= 0:
            raise ConfigError(f"shift must be positive, got {self.shift}")
