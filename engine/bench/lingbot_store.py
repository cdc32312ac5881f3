"""``bench store --model lingbot-fast``: the store experiment at LingBot-World-Fast's KV per chunk.

Owns the translation of LingBot's chunk (``lingbot-fast``: 40 layers x 4,680 tokens x 40 heads x 128,
1,019,187,200 bytes int4) into the synthetic model's ``kv_scale`` (its layer count is MG2's 30 scaled, so
the bytes match to one MG2 layer, 0.4 %), and the ``size_scale`` that shrinks a run for a small
machine: KV bytes and every drive bandwidth are multiplied by it together, so that a chunk's read and
write-back times against the chunk time, which decide the stalls, stay those of the full size.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.config import synthetic_model_config
from engine.errors import ConfigError
from engine.facts.kv_format import byte_figures
from engine.facts.lingbot_models import LINGBOT_FAST

LINGBOT_DRIVE_BWS = "1.0,0.5,0.25"     # GB/s: the drives the paper's question asks about


@dataclass(frozen=True)
class ScaledStore:
    kv_scale: float              # the synthetic model's kv_scale
    chunk_bytes: int             # int4 bytes per chunk the run stores
    lingbot_chunk_bytes: int     # int4 bytes per chunk of lingbot-fast
    size_scale: float

    def drive_bw(self, lingbot_bw: str) -> str:
        """The emulated bandwidth (GB/s) for a full-size drive of ``lingbot_bw`` GB/s."""
        try:
            value = float(lingbot_bw)
        except ValueError:
            raise ConfigError(f"--drive-bw {lingbot_bw!r}: LingBot runs need numbers in GB/s") from None
        if not value > 0:
            raise ConfigError(f"--drive-bw must be positive, got {lingbot_bw}")
        return f"{value * self.chunk_bytes / self.lingbot_chunk_bytes:.6g}"


def scaled_store(size_scale: float) -> ScaledStore:
    """The synthetic run standing in for lingbot-fast at ``size_scale`` of its KV bytes."""
    if not 0 < size_scale <= 1:
        raise ConfigError(f"--size-scale must be in (0, 1], got {size_scale}")
    lingbot = byte_figures(LINGBOT_FAST.kv_layout())["int4"]
    mg2 = byte_figures(synthetic_model_config(1.0).kv_layout())["int4"]
    kv_scale = lingbot * size_scale / mg2
    chunk = byte_figures(synthetic_model_config(kv_scale).kv_layout())["int4"]
    return ScaledStore(kv_scale, chunk, lingbot, size_scale)
