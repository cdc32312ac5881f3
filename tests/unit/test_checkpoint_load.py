"""Loading weights from a directory laid out like the official release (tiny config, real files)."""
from __future__ import annotations

import pickle

import pytest
import torch

from engine.config import model_config
from engine.errors import CheckpointError
from engine.model.load import load_models
from tests_support import tiny_reference_models, write_checkpoint

TINY = model_config("tiny")


@pytest.fixture(scope="module")
def reference():
    return tiny_reference_models()


def test_round_trip_equals_the_seeded_weights(tmp_path, reference):
    write_checkpoint(tmp_path, reference)
    loaded = load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)
    for ours, ref in ((loaded.dit, reference.dit), (loaded.vae, reference.vae), (loaded.clip, reference.clip)):
        a, b = ours.state_dict(), ref.state_dict()
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert loaded.source.startswith("checkpoint")


def test_missing_key_is_named(tmp_path, reference):
    write_checkpoint(tmp_path, reference, dit_edit=lambda s: s.pop("model.head.head.bias"))
    with pytest.raises(CheckpointError, match=r"missing key 'head.head.bias' in .*base_distill.safetensors"):
        load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)


def test_extra_key_is_named(tmp_path, reference):
    def add(s):
        s["model.blocks.0.surprise"] = torch.zeros(2)
    write_checkpoint(tmp_path, reference, dit_edit=add)
    with pytest.raises(CheckpointError, match=r"unexpected key 'blocks.0.surprise'"):
        load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)


def test_misshaped_key_is_named(tmp_path, reference):
    def bad(s):
        s["model.head.head.weight"] = torch.zeros(3, 3)
    write_checkpoint(tmp_path, reference, dit_edit=bad)
    with pytest.raises(CheckpointError, match=r"'head.head.weight' .* shape \(3, 3\), expected"):
        load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)


def test_missing_file_and_directory(tmp_path, reference):
    with pytest.raises(CheckpointError, match="checkpoint directory not found"):
        load_models(TINY, tmp_path / "nope", torch.device("cpu"), torch.float32)
    write_checkpoint(tmp_path, reference)
    (tmp_path / TINY.vae_file).unlink()
    with pytest.raises(CheckpointError, match=r"checkpoint file missing: .*Wan2.1_VAE.pth"):
        load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)


class _Payload:
    def __reduce__(self):
        return (print, ("arbitrary code ran",))


def test_pth_is_never_unpickled_with_code(tmp_path, reference):
    write_checkpoint(tmp_path, reference)
    with open(tmp_path / TINY.vae_file, "wb") as f:
        pickle.dump({"decoder.conv1.weight": _Payload()}, f)
    with pytest.raises(CheckpointError, match=r"cannot read weights .*Wan2.1_VAE.pth"):
        load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)


def test_garbage_safetensors(tmp_path, reference):
    write_checkpoint(tmp_path, reference)
    (tmp_path / TINY.dit_file).write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot read weights"):
        load_models(TINY, tmp_path, torch.device("cpu"), torch.float32)
