"""Deterministic random weights from key names.

Owns the rule that turns ``(seed, key, shape)`` into a float32 tensor, independently of every other key,
so that a model of any size can be rebuilt bit-for-bit from its key list: the built-in ``tiny`` model
uses it for its weights, and the parity fixtures were generated with the same rule.

Rule, per key:
  rng = numpy default_rng([seed, crc32(key)]); n = rng.standard_normal(shape, float64)
  * norm gains (``*.gamma``; 1-D ``*.weight``)        -> 1 + 0.02 n
  * vectors (``*.bias``; ``*modulation``)              -> 0.02 n
  * embeddings (``*_embedding`` without a suffix)      -> n
  * ``visual.head`` (a bare matrix, ``x @ head``)      -> n * (1 / sqrt(shape[0]))
  * any other weight (2-D or more)                     -> n * (1 / sqrt(prod(shape[1:])))
  then one rounding to float32.
"""
from __future__ import annotations

import math
import zlib
from typing import Iterable

import numpy as np
import torch


def seeded_array(seed: int, key: str, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 array the rule assigns to ``key``."""
    rng = np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])
    n = rng.standard_normal(tuple(shape), dtype=np.float64)
    if key.endswith(".gamma") or (key.endswith(".weight") and len(shape) == 1):
        value = 1.0 + 0.02 * n
    elif key.endswith(".bias") or key.endswith("modulation"):
        value = 0.02 * n
    elif key.endswith("_embedding"):
        value = n
    elif key == "visual.head":
        value = n * (1.0 / math.sqrt(shape[0]))
    else:
        fan_in = math.prod(shape[1:])
        value = n * (1.0 / math.sqrt(fan_in))
    return value.astype(np.float32)


def seeded_tensor(seed: int, key: str, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.from_numpy(seeded_array(seed, key, shape))


def seeded_state_dict(seed: int, keys_and_shapes: Iterable[tuple[str, tuple[int, ...]]]
                      ) -> dict[str, torch.Tensor]:
    """A full state dict for ``keys_and_shapes``."""
    return {key: seeded_tensor(seed, key, tuple(shape)) for key, shape in keys_and_shapes}


def fill_module_(module: torch.nn.Module, seed: int, prefix: str = "") -> torch.nn.Module:
    """Overwrite every parameter of ``module`` in place with its seeded value (keys get ``prefix``)."""
    with torch.no_grad():
        for name, param in module.state_dict(keep_vars=True).items():
            value = seeded_tensor(seed, prefix + name, tuple(param.shape))
            param.copy_(value.to(param.dtype))
    return module


def checksum(values: np.ndarray) -> tuple[float, float]:
    """The fixtures' two-column checksum: plain sum and index-weighted sum (float64 accumulation)."""
    flat = values.astype(np.float64).ravel()
    index = np.arange(flat.size, dtype=np.float64)
    return float(flat.sum()), float((flat * index / flat.size).sum())
