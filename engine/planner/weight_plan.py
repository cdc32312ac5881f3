"""How a model's weights sit on the device: their storage precision and which blocks stay resident.

Owns the two rules the planner (``worldpager plan``) and the session's weight pager share, so that what
a plan predicts is what a session does. Torch-free, like the rest of the planner.

* **Precision** (``WEIGHT_FORMATS``, a session's ``--weights``): ``bf16`` keeps every weight in the
  compute dtype; ``int8`` and ``fp8`` store the large linears of the DiT's blocks one byte a value with
  one scale per output channel (``SCALE_BYTES``), weight-only (activations stay in the compute dtype);
  everything else (norms, embeddings, heads, the camera and action injectors) keeps the compute dtype.
  ``linear_bytes`` is the device bytes of one linear in a format.
* **Residency** (``resident_blocks``): the DiT's blocks in order; the first N stay on the device, the
  rest are streamed from host memory (or the drive) through ``buffers`` device slots, each the size of
  the largest streamed block, so a block is copied in while the one before it computes. N is the most
  leading blocks for which resident bytes + the streaming slots fit the budget; all blocks resident
  needs no slot. A budget below the slots alone is a ``ConfigError`` naming both sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from engine.config import WEIGHT_FORMATS
from engine.errors import ConfigError

VALUE_BYTES = {"bf16": 2, "int8": 1, "fp8": 1}
SCALE_BYTES = 4                 # one fp32 scale per output channel of a quantised linear
STREAM_BUFFERS = 2              # device slots a streamed block passes through (double-buffered)
GiB = 1 << 30


def check_weight_format(fmt: str) -> str:
    """``fmt`` if it is a known weight format; a ``ConfigError`` naming it and the choices otherwise."""
    if fmt not in WEIGHT_FORMATS:
        raise ConfigError(f"unknown weight format {fmt!r} (choose from {', '.join(WEIGHT_FORMATS)})")
    return fmt


def linear_bytes(out_features: int, in_features: int, fmt: str, bias: bool = True,
                 compute_bytes: int = 2) -> int:
    """Device bytes of one ``out x in`` linear stored in ``fmt`` (the bias keeps the compute dtype)."""
    check_weight_format(fmt)
    values = out_features * in_features
    tail = out_features * compute_bytes if bias else 0
    if fmt == "bf16":
        return values * compute_bytes + tail
    return values * VALUE_BYTES[fmt] + out_features * SCALE_BYTES + tail


@dataclass(frozen=True)
class Residency:
    """Which blocks stay on the device: the first ``resident`` of ``blocks``; the others stream."""

    blocks: int
    resident: int
    resident_bytes: int
    buffer_bytes: int             # all streaming slots together (0 when every block is resident)

    @property
    def streamed(self) -> int:
        return self.blocks - self.resident

    @property
    def device_bytes(self) -> int:
        return self.resident_bytes + self.buffer_bytes


def resident_blocks(block_bytes: Sequence[int], budget: int, buffers: int = STREAM_BUFFERS) -> Residency:
    """The most leading blocks that fit ``budget`` bytes beside the streaming slots the rest need."""
    sizes = [int(b) for b in block_bytes]
    if any(b < 0 for b in sizes) or buffers < 1:
        raise ValueError("block sizes must be >= 0 and buffers >= 1")
    if sum(sizes) <= budget:
        return Residency(len(sizes), len(sizes), sum(sizes), 0)
    best = None
    for n in range(len(sizes)):             # n resident, sizes[n:] streamed
        slots = buffers * max(sizes[n:])
        need = sum(sizes[:n]) + slots
        if need <= budget:
            best = Residency(len(sizes), n, sum(sizes[:n]), slots)
    if best is None:
        slots = buffers * max(sizes)
        raise ConfigError(f"a device budget of {budget / GiB:.2f} GiB for weights cannot hold {buffers} "
                          f"streaming slots of the largest block ({slots / GiB:.2f} GiB together)")
    return best
