"""The arena model behind the model interface: strict weights, the session path, the evaluation."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.arena.config import ArenaModelConfig
from engine.arena.evaluate import eval_episode, run_episode, score
from engine.arena.model import ArenaDiT
from engine.arena.weights import load_model, load_state_dict, packaged_weights_path, read_metadata
from engine.errors import CheckpointError
from engine.model.interface import WorldModel


def test_packaged_weights_load_strictly_and_are_small():
    path = packaged_weights_path()
    assert path.stat().st_size <= 20 * 2 ** 20
    meta = read_metadata(path)
    cfg = ArenaModelConfig(**{**json.loads(meta["config"]), "steps": tuple(json.loads(meta["config"])["steps"])})
    assert all(t.dtype == torch.float16 for t in load_file(str(path)).values())
    model = load_model(path)
    assert isinstance(model, ArenaDiT) and model.cfg == cfg and not model.training


def _edited_copy(tmp_path, edit):
    src = packaged_weights_path()
    tensors = load_file(str(src))
    edit(tensors)
    out = tmp_path / "edited.safetensors"
    save_file(tensors, str(out), metadata=read_metadata(src))
    return out


@pytest.mark.parametrize("edit, needle", [
    (lambda t: t.pop("head.bias"), "missing key 'head.bias'"),
    (lambda t: t.update({"extra.weight": torch.zeros(1)}), "unexpected key 'extra.weight'"),
    (lambda t: t.update({"head.bias": torch.zeros(3)}), "'head.bias' has shape (3,)"),
])
def test_weights_are_checked_key_by_key(tmp_path, edit, needle):
    path = _edited_copy(tmp_path, edit)
    with pytest.raises(CheckpointError, match="edited.safetensors") as err:
        load_state_dict(path, ArenaModelConfig())
    assert needle in str(err.value)


def test_missing_and_garbage_weights(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_model(tmp_path / "none.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_model(bad)


def test_a_session_of_the_arena_model_goes_through_the_store(tmp_path):
    """A held-out spin through prefetch, int4, a 4-slot pool and a spill directory."""
    ep = eval_episode(1, 9 + 12 * 11)
    assert ep.kind == "spin"
    # no device cache: every retrieval of a chunk that left the slots comes from the pool or the drive
    frames, pipeline, totals = run_episode(ep, "prefetch", tmp_path, chunks=12, device_cache=0)
    assert isinstance(pipeline, WorldModel)
    assert frames.shape == (36, 3, 48, 80) and frames.abs().max() <= 1
    # chunk 0 is the rendered truth (the prompt), exactly
    assert torch.equal(frames[:3], pipeline.truth(0))
    assert totals["hits"] > 0 and totals["disk_bytes_read"] > 0          # memory came back from the drive
    sc, truth = score(frames, pipeline)
    assert truth.shape == frames.shape and sc.revisit_frames > 0 and sc.all_psnr > 5
