"""The dispatch point: backend names, the environment variable, overrides, loud failures."""
from __future__ import annotations

import pytest
import torch

from engine.errors import ConfigError
from engine.kernels import ops


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    ops.set_backend(None)
    yield
    ops.set_backend(None)


def test_auto_uses_the_fused_quantiser_for_cpu_tensors():
    assert ops.backend_setting() == "auto"
    assert ops.backend_for(torch.zeros(1)) == "fused"
    for name in ("reference", "fused"):
        with ops.use_backend(name):
            assert ops.backend_for(torch.zeros(1)) == name


@pytest.mark.gpu
def test_fused_refuses_cuda_tensors():
    with ops.use_backend("fused"), pytest.raises(ConfigError, match="CPU quantiser"):
        ops.quantize_keys(torch.zeros(2, 8, device="cuda"), 4)


def test_env_var_and_override_precedence(monkeypatch):
    monkeypatch.setenv(ops.ENV_VAR, "Reference")
    assert ops.backend_setting() == "reference"
    with ops.use_backend("auto"):
        assert ops.backend_setting() == "auto"
    assert ops.backend_setting() == "reference"


def test_unknown_names_are_config_errors(monkeypatch):
    with pytest.raises(ConfigError, match="'cuda'"):
        ops.set_backend("cuda")
    monkeypatch.setenv(ops.ENV_VAR, "fast")
    with pytest.raises(ConfigError, match="WORLDPAGER_KERNELS='fast'"):
        ops.quantize_keys(torch.zeros(2, 8), 4)


def test_forced_triton_without_triton_fails_loudly(monkeypatch):
    monkeypatch.setattr(ops, "_triton", None)
    monkeypatch.setattr(ops, "_triton_error", "ImportError: No module named 'triton'")
    with ops.use_backend("triton"), pytest.raises(ConfigError, match="cannot be imported"):
        ops.quantize_keys(torch.zeros(2, 8), 4)


def test_forced_triton_on_cpu_needs_the_interpreter():
    pytest.importorskip("triton")
    mod = ops._load_triton()
    with ops.use_backend("triton"):
        if mod.INTERPRETED:   # the whole run is under TRITON_INTERPRET=1: it just works
            ops.quantize_keys(torch.zeros(2, 8), 4)
        else:
            with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
                ops.quantize_keys(torch.zeros(2, 8), 4)
