"""Weight-only quantisation of a DiT's blocks (``--weights int8|fp8``).

Owns which linears of a block are stored one byte a value (``QUANTISED_LINEARS``: attention q/k/v/o —
the arena's fused ``qkv`` included — cross-attention q/k/v/o and the FFN's two linears), the rule that
stores them (``quantise_weight``: per output channel, symmetric, the scale the row's largest magnitude
over the format's largest value, kept in fp32: ``engine.planner.weight_plan.SCALE_BYTES``) and the layer
that runs them (``QuantLinear``: the weight dequantised into the activations' dtype for each matmul,
then an ordinary ``F.linear``). Everything else — norms, embeddings, modulation, heads, MG2's action
module, LingBot's camera injectors — keeps the compute dtype. The bytes each format costs are the
planner's (``engine.planner.weight_plan.linear_bytes``); ``quantise_blocks`` only applies them.

``fp8`` (``torch.float8_e4m3fn``) needs a CUDA device of capability 8.9 or newer (``check_fp8``, a
one-line ``ConfigError`` naming the device otherwise). ``emulate=True`` rounds through the fp8 dtype on
any device, for the error figures of ``scripts/weights_error.py``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.errors import ConfigError
from engine.planner.weight_plan import check_weight_format

# Names of the quantised linears inside one block (MG2, LingBot: the Wan block; the arena: its own).
QUANTISED_LINEARS = frozenset({
    *(f"{part}.{p}" for part in ("self_attn", "cross_attn") for p in "qkvo"),
    "ffn.0", "ffn.2",                    # MG2, LingBot
    "qkv", "o", "mlp.0", "mlp.2",        # the arena model
})
STORAGE = {"int8": torch.int8, "fp8": getattr(torch, "float8_e4m3fn", None)}
LARGEST = {"int8": 127.0, "fp8": 448.0}
FP8_CAPABILITY = (8, 9)


def check_fp8(device: torch.device) -> None:
    """A one-line ``ConfigError`` unless ``device`` stores and converts float8 (CUDA capability >= 8.9)."""
    if STORAGE["fp8"] is None:
        raise ConfigError(f"--weights fp8: this build of torch {torch.__version__} has no float8 dtype; "
                          "use --weights int8")
    if device.type != "cuda":
        raise ConfigError(f"--weights fp8 needs a CUDA device of capability {FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} "
                          f"or newer; this session's device is {device}: use --weights int8")
    capability = torch.cuda.get_device_capability(device)
    if tuple(capability) < FP8_CAPABILITY:
        raise ConfigError(f"--weights fp8 needs CUDA capability {FP8_CAPABILITY[0]}.{FP8_CAPABILITY[1]} or newer; "
                          f"{torch.cuda.get_device_name(device)} ({device}) has {capability[0]}.{capability[1]}: "
                          "use --weights int8")


def quantise_weight(weight: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``[out, in]`` weight -> (values in ``fmt``'s storage dtype, fp32 scales ``[out]``)."""
    w = weight.detach().to(torch.float32)
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / LARGEST[fmt], torch.ones_like(amax))
    scaled = w / scale[:, None]
    if fmt == "int8":
        return scaled.round().clamp(-127, 127).to(torch.int8), scale
    return scaled.clamp(-LARGEST[fmt], LARGEST[fmt]).to(STORAGE[fmt]), scale


def dequantise(values: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The weight ``[out, in]`` in ``dtype`` that ``quantise_weight``'s pair stands for."""
    return (values.to(torch.float32) * scale[:, None]).to(dtype)


class QuantLinear(nn.Module):
    """A linear whose weight is stored one byte a value with a per-output-channel fp32 scale; the bias
    (if any) keeps the compute dtype. Each call dequantises into the input's dtype, then ``F.linear``."""

    def __init__(self, linear: nn.Linear, fmt: str):
        super().__init__()
        self.fmt = fmt
        self.in_features, self.out_features = linear.in_features, linear.out_features
        values, scale = quantise_weight(linear.weight, fmt)
        self.register_buffer("qweight", values.to(linear.weight.device))
        self.register_buffer("scale", scale.to(linear.weight.device))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    @property
    def weight_dtype(self) -> torch.dtype:
        return self.bias.dtype if self.bias is not None else torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, dequantise(self.qweight, self.scale, x.dtype), self.bias)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, {self.fmt}"


def emulated(linear: nn.Linear, fmt: str) -> nn.Linear:
    """``linear`` with its weight replaced by the quantised-then-dequantised one (any device, fp8 too)."""
    values, scale = quantise_weight(linear.weight, fmt)
    linear.weight.data = dequantise(values, scale, linear.weight.dtype)
    return linear


def quantised_names(block: nn.Module) -> list[str]:
    """The block's linears ``--weights int8|fp8`` stores quantised."""
    return [name for name, module in block.named_modules()
            if name in QUANTISED_LINEARS and isinstance(module, nn.Linear)]


def _replace(block: nn.Module, name: str, module: nn.Module) -> None:
    *parents, leaf = name.split(".")
    parent = block
    for part in parents:
        parent = getattr(parent, part)
    setattr(parent, leaf, module)


def quantise_blocks(blocks: nn.ModuleList, fmt: str, emulate: bool = False) -> int:
    """Store the large linears of every block in ``fmt`` (in place); the number of linears replaced.
    ``bf16`` changes nothing. ``emulate``: keep ``nn.Linear``s, their weights rounded through ``fmt``."""
    check_weight_format(fmt)
    if fmt == "bf16":
        return 0
    count = 0
    for block in blocks:
        for name in quantised_names(block):
            linear = block.get_submodule(name)
            _replace(block, name, emulated(linear, fmt) if emulate else QuantLinear(linear, fmt))
            count += 1
    return count
