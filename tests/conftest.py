"""Shared test fixtures: where the MG2 parity fixtures live, and GPU skipping."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]


def parity_dir() -> Path:
    """``$WORLDPAGER_PARITY_DIR`` or ``../shared/fixtures/mg2_parity`` beside the checkout."""
    env = os.environ.get("WORLDPAGER_PARITY_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "fixtures" / "mg2_parity"


@pytest.fixture(scope="session")
def parity_fixtures() -> Path:
    path = parity_dir()
    if not (path / "universal_tiny.safetensors").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"parity fixtures missing at {path} (set WORLDPAGER_PARITY_DIR)")
        pytest.skip(f"parity fixtures not found at {path}")
    return path


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
