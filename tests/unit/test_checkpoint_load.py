"""Loading weights from a directory laid out like the official release (tiny config, real files)."""
from __future__ import annotations

import pickle

import pytest
import torch
from safetensors.torch import save_file

from engine.config import model_config
from engine.errors import CheckpointError
from engine.model.load import load_models

TINY = model_config("tiny")


def _reference_models():
    return load_models(TINY, None, torch.device("cpu"), torch.float32)


def write_checkpoint(root, models, dit_edit=None, clip_extra=True):
    dit_state = {"model." + k: v.contiguous() for k, v in models.dit.state_dict().items()}
    if dit_edit:
        dit_edit(dit_state)
    (root / TINY.dit_file).parent.mkdir(parents=True, exist_ok=True)
    save_file(dit_state, str(root / TINY.dit_file))
    torch.save(models.vae.state_dict(), root / TINY.vae_file)
    clip_state = {"visual." + k: v for k, v in models.clip.state_dict().items()}
    if clip_extra:  # the official file also holds the text tower and unused vision keys
        clip_state["textual.token_embedding.weight"] = torch.zeros(4, 8)
        clip_state["log_scale"] = torch.zeros(())
        clip_state["visual.post_norm.weight"] = torch.ones(TINY.clip.width)
    torch.save(clip_state, root / TINY.clip_file)


@pytest.fixture(scope="module")
def reference():
    return _reference_models()


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
