"""A session's running state as a flat map of named tensors: what a save point stores of a model.

Owns the convention every stateful piece of a generation follows so that a save point can capture it
and a resumed run can put it back bit for bit (DESIGN §2: the chunk loop; the save-point file itself is
``engine.session.savepoint``):

* ``state_tensors() -> dict[str, Tensor]`` returns CPU copies under names relative to the object;
  ``load_state_tensors(tensors)`` restores from such a map (names relative again) onto the object's
  device. A value that is absent (``None``) is simply not in the map; integers travel as 0-dim int64
  tensors.
* ``nest`` and ``sub`` add and strip a prefix, so a container (the attention context, a pipeline) can
  gather its parts' maps into one and hand each part its own back.

Only what cannot be recomputed from the config, the start image and the trajectory is state: RNG
positions, causal caches (the VAE's streamed frames, MG2's action windows), the local window's KV at
full precision, counters. Weights, image conditioning and the trajectory are not.
"""
from __future__ import annotations

from typing import Mapping

import torch

Tensors = dict[str, torch.Tensor]


def cpu_copy(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", copy=True).contiguous()


def integer(value: int) -> torch.Tensor:
    return torch.tensor(int(value), dtype=torch.int64)


def as_int(t: torch.Tensor) -> int:
    return int(t.item())


def nest(prefix: str, tensors: Mapping[str, torch.Tensor]) -> Tensors:
    """``tensors`` with every name prefixed ``prefix.``."""
    return {f"{prefix}.{name}": t for name, t in tensors.items()}


def sub(prefix: str, tensors: Mapping[str, torch.Tensor]) -> Tensors:
    """The entries of ``tensors`` under ``prefix.``, with the prefix stripped."""
    head = prefix + "."
    return {name[len(head):]: t for name, t in tensors.items() if name.startswith(head)}


def optional(tensors: Mapping[str, torch.Tensor], name: str, device=None, dtype=None) -> torch.Tensor | None:
    t = tensors.get(name)
    return None if t is None else t.to(device=device, dtype=dtype if dtype is not None else t.dtype)


def generator_state(gen: torch.Generator) -> torch.Tensor:
    return gen.get_state().clone()


def set_generator_state(gen: torch.Generator, state: torch.Tensor) -> None:
    gen.set_state(state.to(torch.uint8).contiguous())
