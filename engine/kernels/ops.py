"""The only import surface of the kernels: KIVI-style quantise/dequantise with one dispatch point.

Every function takes one layer's K or V of one chunk as a ``[T, C]`` row matrix (tokens × flattened
heads·head_dim, unit channel stride) and writes into caller-given tensors; the contract — grouping,
rounding, packing, error bound — is stated in :mod:`engine.kernels.reference`, which is also the CPU
pure-PyTorch specification. Output tensors that are omitted are allocated and returned (tests, one-offs).

Backend choice, per call, from the first tensor's device:
* ``auto`` (default): Triton for CUDA tensors when Triton imports, else the reference (a CUDA tensor
  without Triton warns once); the fused CPU quantiser for CPU tensors (bit-identical to the reference
  and several times faster on the CPUs measured, docs/performance.md).
* ``reference``: always the reference.
* ``fused``: :mod:`engine.kernels.fused` (plain PyTorch, fewer passes); a ``ConfigError`` for a CUDA
  tensor (it is the CPU backend; on a GPU the Triton kernels are).
* ``triton``: always Triton; a ``ConfigError`` if Triton does not import, or if a tensor is on the
  CPU and the kernels were not defined under ``TRITON_INTERPRET=1`` (set before the first call).
The setting comes from ``WORLDPAGER_KERNELS`` (read per call), overridden by :func:`set_backend` or the
:func:`use_backend` context manager.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from types import ModuleType
from typing import Iterator

import torch

from engine.errors import ConfigError
from engine.kernels import fused, reference
from engine.kernels.reference import SUPPORTED_BITS, codes_per_byte, packed_width

BACKENDS = ("auto", "reference", "fused", "triton")
ENV_VAR = "WORLDPAGER_KERNELS"

_override: str | None = None
_triton: ModuleType | None = None
_triton_error: str | None = None
_warned_fallback = False


def set_backend(name: str | None) -> None:
    """Force a backend for this process (``None`` returns to the environment variable)."""
    global _override
    if name is not None:
        _check_name(name, "set_backend")
    _override = name


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend inside a ``with`` block (tests, benchmarks)."""
    previous = _override
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def backend_setting() -> str:
    """The requested backend name (``auto`` | ``reference`` | ``fused`` | ``triton``)."""
    if _override is not None:
        return _override
    return _check_name(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto", ENV_VAR)


def backend_for(t: torch.Tensor) -> str:
    """The backend a call with ``t`` as its first tensor would use (for logs and benchmarks)."""
    return _NAMES.get(_select(t), "triton")


def _check_name(name: str, where: str) -> str:
    if name not in BACKENDS:
        raise ConfigError(f"{where}={name!r} is not a kernel backend (choose from {', '.join(BACKENDS)})")
    return name


def _load_triton() -> ModuleType | None:
    """Import the Triton kernels once; remember why if that fails."""
    global _triton, _triton_error
    if _triton is None and _triton_error is None:
        try:
            _triton = importlib.import_module("engine.kernels.triton_quant")
        except ImportError as exc:  # triton missing or broken: a fact about the environment
            _triton_error = f"{type(exc).__name__}: {exc}"
    return _triton


def _select(t: torch.Tensor) -> ModuleType:
    global _warned_fallback
    setting = backend_setting()
    if setting == "reference":
        return reference
    if setting == "fused":
        if t.is_cuda:
            raise ConfigError(f"{ENV_VAR}=fused is the CPU quantiser; a {t.device} tensor needs auto, "
                              "triton or reference")
        return fused
    if setting == "auto":
        if not t.is_cuda:
            return fused
        mod = _load_triton()
        if mod is None and not _warned_fallback:
            _warned_fallback = True
            warnings.warn(f"Triton unavailable ({_triton_error}); KV quantisation runs the PyTorch "
                          "reference on the GPU", RuntimeWarning, stacklevel=3)
        return mod or reference
    mod = _load_triton()
    if mod is None:
        raise ConfigError(f"{ENV_VAR}=triton but Triton cannot be imported ({_triton_error})")
    if not t.is_cuda and not mod.INTERPRETED:
        raise ConfigError(f"{ENV_VAR}=triton with a {t.device} tensor needs TRITON_INTERPRET=1 set "
                          "before the kernels are first used")
    return mod


_NAMES = {reference: "reference", fused: "fused"}


def _check_bits(bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ConfigError(f"KV quantisation bits={bits} (choose from {', '.join(map(str, SUPPORTED_BITS))})")


def _check_group(channels: int, group: int, bits: int) -> None:
    if group <= 0 or channels % group or group % codes_per_byte(bits) or group & (group - 1):
        raise ConfigError(f"value group {group} must be a power of two dividing {channels} channels "
                          f"and a multiple of {codes_per_byte(bits)}")


def _check_rows(*ts: torch.Tensor) -> None:
    for t in ts:
        assert t.dim() == 2 and t.stride(1) == 1, (
            f"want [T, C] row matrices with unit channel stride, got {tuple(t.shape)} strides {t.stride()}")


def _alloc(t: int, c: int, bits: int, meta_shape: tuple[int, ...], device: torch.device):
    codes = torch.empty((t, packed_width(c, bits)), dtype=torch.uint8, device=device)  # [T, C*bits/8]
    scale = torch.empty(meta_shape, dtype=torch.float16, device=device)
    return codes, scale, torch.empty_like(scale)


# ---------------------------------------------------------------------------------------------
# Public operations.

def quantize_keys(x: torch.Tensor, bits: int, codes: torch.Tensor | None = None,
                  scale: torch.Tensor | None = None, zero: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keys ``x [T, C]`` per channel → ``(codes uint8 [T, C*bits/8], scale fp16 [C], zero fp16 [C])``."""
    _check_bits(bits)
    _check_rows(x)
    t, c = x.shape
    if codes is None:
        codes, scale, zero = _alloc(t, c, bits, (c,), x.device)  # scale/zero: [C], one per channel
    _select(x).quantize_keys(x, bits, codes, scale, zero)
    return codes, scale, zero


def quantize_values(x: torch.Tensor, bits: int, group: int, codes: torch.Tensor | None = None,
                    scale: torch.Tensor | None = None, zero: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Values ``x [T, C]`` per token in ``group``-channel groups → codes, scale/zero fp16 ``[T, C/G]``."""
    _check_bits(bits)
    _check_rows(x)
    t, c = x.shape
    _check_group(c, group, bits)
    if codes is None:
        codes, scale, zero = _alloc(t, c, bits, (t, c // group), x.device)  # [T, NG]
    _select(x).quantize_values(x, bits, group, codes, scale, zero)
    return codes, scale, zero


def dequantize_keys(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                    out: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize_keys` into ``out [T, C]`` (bf16 on GPU, fp32 on CPU, any float)."""
    _check_bits(bits)
    _check_rows(codes, out)
    _select(codes).dequantize_keys(codes, scale, zero, bits, out)
    return out


def dequantize_values(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                      group: int, out: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quantize_values` into ``out [T, C]``."""
    _check_bits(bits)
    _check_rows(codes, out)
    _check_group(out.shape[1], group, bits)
    _select(codes).dequantize_values(codes, scale, zero, bits, group, out)
    return out
