"""``python -m engine.model.parity`` as a user runs it: table, last-line JSON, exit status, errors.

Only the VAE-encoder fixture is replayed here (seconds); the DiT, decoder and CLIP cases run through the
same functions in tests/parity.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

ENCODER_FIXTURE = "universal_tiny_vae_encoder.safetensors"


def run_parity(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.model.parity", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def copy_with_perturbation(src, dst, key: str, scale: float) -> None:
    """Rewrite ``src`` to ``dst`` (metadata kept) with ``key`` shifted by ``scale * std``."""
    with safe_open(str(src), "pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors[key] = tensors[key] + scale * tensors[key].std()
    save_file(tensors, str(dst), metadata=metadata)


@pytest.mark.slow
def test_the_fixture_passes_and_a_corrupted_copy_fails(parity_fixtures, tmp_path):
    """One run over the real fixture and a copy with one tensor shifted by 1 % of its std: the real one's
    rows pass, the copy's shifted row fails, the command exits 1 and its JSON names the failure."""
    corrupted = tmp_path / ENCODER_FIXTURE
    copy_with_perturbation(parity_fixtures / ENCODER_FIXTURE, corrupted, "vaeenc.latent", 0.01)
    result = run_parity(parity_fixtures / ENCODER_FIXTURE, corrupted)
    assert result.returncode == 1, result.stdout + result.stderr
    summary = last_json(result.stdout)
    assert summary["ok"] is False and summary["tensors"] == 8
    assert summary["failed"] == ["vaeenc.latent"] and summary["max_rel_err"] > 1e-3
    lines = result.stdout.splitlines()
    second = max(i for i, line in enumerate(lines) if line.startswith(ENCODER_FIXTURE + ":"))
    real, copy = lines[:second], lines[second:]
    assert any("vaeenc.latent" in line for line in real) and not any(line.rstrip().endswith("FAIL") for line in real)
    failing = [line for line in copy if line.rstrip().endswith("FAIL")]
    assert len(failing) == 1 and "vaeenc.latent" in failing[0]


def test_missing_fixture_is_one_line_error(tmp_path):
    missing = tmp_path / "absent.safetensors"
    result = run_parity(missing)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and str(missing) in result.stderr


@pytest.mark.parametrize("content", ["garbage", "unknown"])
def test_unreadable_or_unknown_fixture_is_one_line_error(tmp_path, content):
    path = tmp_path / f"{content}.safetensors"
    if content == "garbage":
        path.write_bytes(b"not a safetensors file")
    else:
        # Readable, but none of the tensors names a parity case (e.g. a companion _caches file).
        save_file({"kv.layer0.after_chunk0.k": torch.zeros(2)}, str(path))
    result = run_parity(path)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and str(path) in result.stderr

