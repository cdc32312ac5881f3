"""Where a session's DiT weights live: their format (``--weights``) and which blocks stream (``--device-mem``).

Owns the session's rule for the weights' device budget and applies the planner's two shared rules
(``engine.planner.weight_plan``) to a loaded network:

* **format**: ``engine.model.weight_quant.quantise_blocks`` stores the blocks' large linears in
  ``cfg.weights`` (fp8 only on a CUDA device of capability >= 8.9: ``check_fp8``);
* **budget** (``weight_budget``): the plan's rule, ``engine.planner.device.block_budget``, with the same
  inputs: ``--device-mem`` less what the session's KV takes on the device (the attention context and the
  device staging, as ``engine.planner.session_kv`` counts them for pre-flight too, at the model's dtype;
  with ``--kv-paging layer`` two layer pages and no staging), less the model's weights outside the blocks
  (embeddings, heads, and the VAE and image encoder that share the device), less the plan's activation
  estimate of the model (``activations_of``; none for a model the planner has no shapes of, the arena's)
  and its reserve (``runtime_reserve``). So a session keeps the blocks resident that its plan says.
  Without ``--device-mem`` every block is resident. The same rule holds on the CPU, whose "device"
  budget is then enforced all the same.
* **residency**: ``resident_blocks`` over the blocks' packed bytes; the rest stream
  (``engine.model.weight_stream``). A budget that cannot even hold the two slots is a one-line
  ``ConfigError`` (the planner's, naming both sizes and the fix).

``WeightPlacement`` is what the session reads: the header's facts and, per chunk, the bytes streamed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from engine.config import SessionConfig
from engine.errors import ConfigError
from engine.model.weight_quant import check_fp8, quantise_blocks
from engine.model.weight_stream import BlockStreamer, attach_streamer, block_bytes
from engine.planner.device import block_budget, least_budget, runtime_reserve
from engine.planner.weight_plan import STREAM_BUFFERS, GiB, Residency, resident_blocks


@dataclass
class WeightPlacement:
    """The format, the residency and the streamer (None: every block resident) of one DiT."""

    fmt: str
    residency: Residency
    other_bytes: int                  # the device's weights outside the blocks
    budget: int | None                # the blocks' budget (None: unbounded)
    streamer: BlockStreamer | None = None
    _reported: int = 0

    @property
    def device_bytes(self) -> int:
        return self.residency.device_bytes + self.other_bytes

    def facts(self) -> dict:
        r = self.residency
        return {"format": self.fmt, "blocks": r.blocks, "resident_blocks": r.resident,
                "streamed_blocks": r.streamed, "device_weight_bytes": self.device_bytes,
                "slot_bytes": r.buffer_bytes, "block_budget_bytes": self.budget}

    def take_streamed(self) -> int:
        """Bytes copied into the slots since the last call (the chunk's ``weight_bytes_streamed``)."""
        if self.streamer is None:
            return 0
        total = self.streamer.streamed_bytes
        delta, self._reported = total - self._reported, total
        return delta


def kv_device_bytes(cfg: SessionConfig, dtype: torch.dtype) -> int:
    """The KV the session keeps on the device (context and device staging; preflight's estimate)."""
    from engine.model.registry import model_kv_layout
    from engine.planner import session_kv

    return session_kv.kv_device_bytes(cfg, model_kv_layout(cfg), dtype.itemsize)


def activations_of(cfg: SessionConfig) -> int:
    """The plan's activation estimate of the session's model (``engine.planner.device.activation_bytes``);
    0 for a model the planner has no shapes of (the arena model)."""
    from engine.config import LINGBOT_MODELS, MODEL_CONFIGS
    from engine.planner.block_shapes import model_weights
    from engine.planner.device import activation_bytes
    from engine.planner.model import planned_model

    if cfg.model not in LINGBOT_MODELS and cfg.model not in MODEL_CONFIGS:
        return 0
    shape = planned_model(cfg)
    return activation_bytes(shape, model_weights(shape.name))


def weight_budget(cfg: SessionConfig, dtype: torch.dtype, other_bytes: int) -> int | None:
    """The blocks' device budget (module docstring); None without ``--device-mem``."""
    gib = cfg.memory.device_mem_gib
    if gib is None:
        return None
    total = int(gib * GiB)
    return block_budget(total, kv_device_bytes(cfg, dtype), other_bytes, activations_of(cfg), runtime_reserve(total))


def _size(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB / 10 else f"{n / 2 ** 20:.1f} MiB"


def _too_small(cfg: SessionConfig, dtype: torch.dtype, budget: int, sizes: list[int], other: int) -> str:
    """One line: what --device-mem leaves the blocks, what streaming needs at least, the fix."""
    total = int(cfg.memory.device_mem_gib * GiB)
    slots = STREAM_BUFFERS * max(sizes)
    least = least_budget(slots + kv_device_bytes(cfg, dtype) + other + activations_of(cfg))
    fix = f"raise --device-mem to at least {_size(least + 1)}"
    if cfg.weights == "bf16":
        fix += " or use --weights int8"
    return (f"--device-mem {_size(total)} leaves {_size(max(budget, 0))} for the model's blocks (after the KV, "
            f"{_size(other)} of other weights, the activations and the working reserve); streaming them needs "
            f"{STREAM_BUFFERS} slots of the largest block, {_size(slots)}: {fix}")


def placement_key(cfg: SessionConfig, dtype: torch.dtype) -> tuple:
    """What a placed network depends on beyond its weights (part of the model cache's key): the format
    and, with a budget, the budget and the KV it leaves room for."""
    if cfg.memory.device_mem_gib is None:
        return (cfg.weights,)
    return (cfg.weights, cfg.memory.device_mem_gib, kv_device_bytes(cfg, dtype))


def staging_device(cfg: SessionConfig, device: torch.device) -> torch.device:
    """Where the DiT is loaded before it is placed: host memory when its blocks may be quantised or
    streamed on a GPU (so that the device never holds the whole bf16 model, which a budget may not fit),
    else ``device`` itself."""
    if device.type == "cuda" and (cfg.weights != "bf16" or cfg.memory.device_mem_gib is not None):
        return torch.device("cpu")
    return device


def to_device(device: torch.device, *modules: nn.Module | None) -> None:
    """Move the placed networks to ``device`` (streamed blocks hold only placeholders there already)."""
    for module in modules:
        if module is not None:
            module.to(device)


def place_weights(blocks: nn.ModuleList, cfg: SessionConfig, device: torch.device, dtype: torch.dtype,
                  others: tuple[nn.Module | None, ...] = ()) -> WeightPlacement:
    """Quantise ``blocks`` to ``cfg.weights`` and stream those beyond the budget (in place).
    ``others``: the rest of the networks on the device (their weights count against the budget).
    ``blocks`` may still be in host memory (``staging_device``); the caller then moves the networks
    with ``to_device`` (a streamed block's host copy is made here, its slots on ``device``)."""
    if cfg.weights == "fp8":
        check_fp8(device)
    quantise_blocks(blocks, cfg.weights)
    sizes = [block_bytes(b) for b in blocks]
    block_ids = {id(t) for b in blocks for t in list(b.parameters()) + list(b.buffers())}
    other = sum(t.numel() * t.element_size() for m in others if m is not None
                for t in list(m.parameters()) + list(m.buffers()) if id(t) not in block_ids)
    budget = weight_budget(cfg, dtype, other)
    if budget is None or sum(sizes) <= budget:
        return WeightPlacement(cfg.weights, Residency(len(sizes), len(sizes), sum(sizes), 0), other, budget)
    try:
        residency = resident_blocks(sizes, budget)
    except ConfigError:
        raise ConfigError(_too_small(cfg, dtype, budget, sizes, other)) from None
    streamer = attach_streamer(blocks, residency.resident, device)
    return WeightPlacement(cfg.weights, residency, other, budget, streamer)
