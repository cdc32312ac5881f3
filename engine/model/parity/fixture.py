"""Reading parity fixtures (outputs of the official MG2 code on seeded random weights).

Owns the fixture file format: safetensors tensors plus JSON header metadata (``config``, ``*_weight_keys``,
``*_weight_seed``), the rebuilding of a case's weights from its key list, and the acceptance metric
``max |ours - ref| / std(ref)``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from engine.errors import InputError
from engine.files.input_files import check_input_file
from engine.model.seeded_weights import seeded_state_dict

DEFAULT_TOLERANCE = 1e-4


@dataclass
class Fixture:
    """One fixture file: its tensors (loaded lazily) and header metadata."""

    path: Path
    metadata: dict[str, str]

    @classmethod
    def open(cls, path: str | Path) -> "Fixture":
        path = Path(path)
        if not os.path.lexists(path):
            raise InputError(f"fixture file not found: {path}")
        check_input_file(path, "fixture file")   # a FIFO or a directory: refused before safetensors opens it
        with safe_open(str(path), "pt") as f:
            return cls(path=path, metadata=dict(f.metadata() or {}))

    def keys(self) -> list[str]:
        with safe_open(str(self.path), "pt") as f:
            return list(f.keys())

    def tensor(self, key: str) -> torch.Tensor:
        with safe_open(str(self.path), "pt") as f:
            return f.get_tensor(key)

    def json(self, key: str):
        return json.loads(self.metadata[key])

    def weights(self, prefix: str) -> dict[str, torch.Tensor]:
        """Rebuild the weights listed under ``{prefix}weight_keys`` with ``{prefix}weight_seed``."""
        keys = self.json(f"{prefix}weight_keys")
        seed = int(self.metadata[f"{prefix}weight_seed"])
        return seeded_state_dict(seed, [(k, tuple(s)) for k, s in keys])


def relative_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |ours - ref| / std(ref)``, computed in float64."""
    assert ours.shape == ref.shape, f"shape {tuple(ours.shape)} != reference {tuple(ref.shape)}"
    ref64 = ref.detach().to(torch.float64)
    diff = (ours.detach().to(torch.float64) - ref64).abs().max().item()
    scale = ref64.std().item()
    return diff / scale if scale > 0 else diff
