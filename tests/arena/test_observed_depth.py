"""The arena model's observed-frame depth head (``ArenaModelConfig.observed_depth``) and its trainer
(``engine.arena.observed_depth_train``).

The head's shape and keys, and a weights file with it saves and loads to the very tensors; the loading stays
strict both ways (the flag without the keys, the keys without the flag); weights without it load as before and
a session with them writes what it wrote before; a session with it stores the observed head's depth for
observed chunks only; the head starts as the conv head widened (the same output); and the trainer resumes to
the weights of a run that was never stopped, on sharp true frames only.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from engine.arena.config import ArenaModelConfig
from engine.arena.data import TRAIN_ARENAS
from engine.arena.depth_net import OBSERVED_WIDTH, WIDTH, DepthNet
from engine.arena.depth_reproject import GENERATED, OBSERVED, unpack
from engine.arena.depth_train import random_pose
from engine.arena.model import ArenaDiT
from engine.arena.render import render
from engine.arena.observed_depth_train import (CHECKPOINT, LOG, ObservedDepthRecipe, base_model, batch, evaluate,
                                               export, held_out, train, widened)
from engine.arena.weights import config_of, load_model, load_state_dict, packaged_depth_weights_path, read_metadata
from engine.arena.world import Arena
from engine.errors import CheckpointError

CFG = ArenaModelConfig(depth_head=True, depth_kind="conv", observed_depth=OBSERVED_WIDTH)
HELD_OUT = 1_510_001
needs_depth_weights = pytest.mark.skipif(not packaged_depth_weights_path().exists(), reason="no packaged depth weights")


def test_the_observed_head_is_a_wider_conv_head_under_its_own_keys():
    model = ArenaDiT(CFG)
    assert model.observed_depth_net.stem.out_channels == OBSERVED_WIDTH > WIDTH == model.depth_net.stem.out_channels
    keys = [k for k in model.state_dict() if k.startswith("observed_depth_net.")]
    assert "observed_depth_net.out.weight" in keys and len(keys) == len(list(model.depth_net.state_dict()))
    frames, cam = torch.zeros(1, 3, 3, CFG.height, CFG.width), torch.zeros(1, 3, 4)
    assert model.observed_frame_depth(frames, cam).shape == (1, 3, CFG.height, CFG.width)
    assert not hasattr(ArenaDiT(dataclasses.replace(CFG, observed_depth=0)), "observed_depth_net")
    with pytest.raises(AssertionError, match="observed_depth needs the conv depth head"):
        ArenaModelConfig(depth_head=True, observed_depth=OBSERVED_WIDTH)
    for bad in (True, -1, 32.0):                 # a JSON true or a float is no width
        with pytest.raises(AssertionError, match="observed_depth must be a width"):
            dataclasses.replace(CFG, observed_depth=bad)


def _without_observed_head(tmp_path):
    """The packaged depth weights as they were before the observed head: its tensors and flag taken out."""
    cfg = config_of(packaged_depth_weights_path())
    tensors = {k: v for k, v in load_state_dict(packaged_depth_weights_path(), cfg).items()
               if not k.startswith("observed_depth_net.")}
    return _file(tmp_path, "old.safetensors", tensors, dataclasses.replace(cfg, observed_depth=0))


def _file(tmp_path, name, tensors, cfg) -> object:
    path = tmp_path / name
    save_file({k: v.half().contiguous() for k, v in tensors.items()}, str(path),
              metadata={"config": json.dumps(dataclasses.asdict(cfg))})
    return path


@needs_depth_weights
def test_weights_with_the_observed_head_round_trip_and_load_strictly_both_ways(tmp_path):
    old_path = _without_observed_head(tmp_path)
    old_cfg = config_of(old_path)
    assert old_cfg.observed_depth == 0
    old = load_state_dict(old_path, old_cfg)
    torch.manual_seed(3)
    head = {f"observed_depth_net.{k}": v.detach() for k, v in DepthNet(old_cfg, OBSERVED_WIDTH).state_dict().items()}
    cfg = dataclasses.replace(old_cfg, observed_depth=OBSERVED_WIDTH)
    model = load_model(_file(tmp_path, "both.safetensors", {**old, **head}, cfg))
    assert model.cfg.observed_depth
    for k, v in head.items():
        assert torch.equal(model.state_dict()[k], v.half().float()), k
    # the flag without the keys; the keys without the flag: each refused in one line, naming a key
    with pytest.raises(CheckpointError, match=r"missing key 'observed_depth_net\.") as exc:
        load_model(_file(tmp_path, "flag.safetensors", old, cfg))
    assert "\n" not in str(exc.value)
    with pytest.raises(CheckpointError, match=r"unexpected key 'observed_depth_net\.") as exc:
        load_model(_file(tmp_path, "keys.safetensors", {**old, **head}, old_cfg))
    assert "\n" not in str(exc.value)
    # the flag over the linear head's config: the config itself is refused
    linear = {**dataclasses.asdict(old_cfg), "depth_kind": "linear", "observed_depth": OBSERVED_WIDTH}
    path = tmp_path / "linear.safetensors"
    save_file({"x": torch.zeros(1)}, str(path), metadata={"config": json.dumps(linear)})
    with pytest.raises(CheckpointError, match="observed_depth needs the conv depth head") as exc:
        load_model(path)
    assert "\n" not in str(exc.value)


def test_the_observed_head_starts_as_the_conv_head_widened():
    torch.manual_seed(0)
    small = DepthNet(CFG)
    wide = widened(small, OBSERVED_WIDTH, seed=1)
    frames, cam = torch.rand(2, 3, CFG.height, CFG.width) * 2 - 1, torch.tensor([[0.0, 0, 30, 0], [1, 2, 90, -15]])
    with torch.no_grad():
        assert torch.allclose(wide(frames, cam), small(frames, cam), rtol=1e-5, atol=1e-7)
    assert wide.stem.weight[WIDTH:].abs().sum() > 0                     # the new channels read the frame


def _session(model, tmp_path, chunks: int = 3):
    """Chunk 0 observed, then generated chunks, with depth re-projection: the frames and each chunk's stored
    depth and kind."""
    from engine.arena.pipeline import ArenaPipeline
    from engine.config import SessionConfig
    from engine.model.kv_context import AttentionContext
    from engine.model.registry import model_spec
    from engine.session.observe import session_path

    (tmp_path / "walk.yaml").write_text("segments:\n  - {keys: [w], frames: 40}\n")
    cfg = SessionConfig(model="arena", trajectory=tmp_path / "walk.yaml", chunks=chunks, out=tmp_path / "o.mp4")
    trajectory = session_path(cfg, model_spec(cfg)).trajectory
    pipeline = ArenaPipeline(model, Arena.generate(HELD_OUT), trajectory, 0, "rerotate", torch.device("cpu"),
                             torch.float32, "test", reproject_depth=True)
    ctx = AttentionContext(pipeline.layout, memory_chunks=0)
    layer = ctx.layers[model.cfg.layers + 1].self_kv
    frames, depths = [], []
    for chunk in range(chunks):
        frames.append(pipeline.denoise(chunk, ctx))
        depths.append(unpack(layer.current()[1], model.cfg))
        ctx.commit()
    return pipeline, frames, depths


def _with_observed_head(model: ArenaDiT, net: DepthNet) -> ArenaDiT:
    out = ArenaDiT(dataclasses.replace(model.cfg, observed_depth=net.stem.out_channels))
    out.load_state_dict({**model.state_dict(), **{f"observed_depth_net.{k}": v for k, v in net.state_dict().items()}})
    return out.eval()


@needs_depth_weights
def test_a_session_without_the_observed_head_is_what_it_was(tmp_path):
    """Weights without the observed head: observed chunks take the conv head's depth (as before), and a model
    whose observed head computes just what the conv head does writes the very same frames and depth."""
    plain = load_model(_without_observed_head(tmp_path))
    assert not hasattr(plain, "observed_depth_net")
    pipeline, frames, depths = _session(plain, tmp_path)
    inv, kind = depths[0]
    assert kind.tolist() == [[OBSERVED] * 3]
    assert torch.allclose(inv, plain.frame_depth(frames[0], pipeline._inputs(0)[0].cam), atol=1e-5)
    same = _with_observed_head(plain, widened(plain.depth_net, OBSERVED_WIDTH, seed=0))
    _, frames2, depths2 = _session(same, tmp_path)
    for a, b in zip(frames, frames2):
        assert torch.allclose(a, b, atol=1e-5)
    for (a, ka), (b, kb) in zip(depths, depths2):
        assert torch.equal(ka, kb) and torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@needs_depth_weights
def test_observed_chunks_take_the_observed_heads_depth_and_generated_chunks_the_conv_heads(tmp_path):
    plain = load_model(_without_observed_head(tmp_path))
    other = widened(plain.depth_net, OBSERVED_WIDTH, seed=0)
    with torch.no_grad():
        other.out.bias += 0.5          # everything e^0.5 times nearer: a head unlike the conv head
    model = _with_observed_head(plain, other)
    calls = []
    model.observed_depth_net.register_forward_hook(lambda *_: calls.append(1))
    pipeline, frames, depths = _session(model, tmp_path, chunks=2)
    cam = pipeline._inputs(0)[0].cam
    inv, kind = depths[0]
    assert kind.tolist() == [[OBSERVED] * 3]
    assert torch.allclose(inv, other(frames[0], cam), atol=1e-5)
    assert not torch.allclose(inv, plain.frame_depth(frames[0], cam), atol=1e-3)
    assert len(calls) == 1 and depths[1][1].tolist() == [[GENERATED] * 3]      # the generated chunk: not read


@needs_depth_weights
def test_the_trainer_resumes_to_the_weights_of_an_unbroken_run_on_sharp_true_frames(tmp_path):
    r = ObservedDepthRecipe(steps=3, poses=2, warmup=1)
    assert r.width == OBSERVED_WIDTH
    whole = torch.load(train(tmp_path / "whole", r, save_every=1, quiet=True), weights_only=True)
    train(tmp_path / "split", dataclasses.replace(r, steps=2), save_every=1, quiet=True)
    split = torch.load(train(tmp_path / "split", r, save_every=1, quiet=True), weights_only=True)
    assert split["step"] == whole["step"] == 3
    for k, v in whole["net"].items():
        assert torch.equal(v, split["net"][k]), k
    rows = [json.loads(x) for x in (tmp_path / "split" / LOG).read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3] and all(row["loss"] > 0 for row in rows)
    # the batch: the true frames exactly as rendered (no degradation), the same for the same step
    model = base_model(packaged_depth_weights_path())
    frames, cams, inv = batch(model.cfg, r, 1)
    assert frames.shape == (2, 3, CFG.height, CFG.width) and torch.equal(frames, batch(model.cfg, r, 1)[0])
    rng = np.random.default_rng([r.seed, 1, 2])
    for seed, frame in zip(rng.integers(0, TRAIN_ARENAS, size=2), frames):
        arena = Arena.generate(int(seed))
        pose = random_pose(arena, rng, r.pitch_range)
        assert torch.equal(frame, torch.from_numpy(render(arena, *pose, CFG.height, CFG.width, CFG.hfov)))
    assert torch.isfinite(inv).all() and (inv >= 0).all()
    # the held-out check: the base head and every saved head, by step
    rows = evaluate(tmp_path / "whole", frames=2)
    assert [row["head"] for row in rows] == ["base", "head-1.pt", "head-2.pt", "head-3.pt"]
    # the export: the base weights plus the observed head, loadable, the conv head as it was
    out = export(tmp_path / "whole" / CHECKPOINT, tmp_path / "w.safetensors")
    loaded = load_model(out)
    assert loaded.cfg.observed_depth == OBSERVED_WIDTH and "width 32" in read_metadata(out)["observed_depth_head"]
    assert torch.allclose(loaded.observed_depth_net.out.weight, whole["net"]["out.weight"].half().float())
    assert torch.equal(loaded.depth_net.out.weight, load_model(packaged_depth_weights_path()).depth_net.out.weight)


@needs_depth_weights
def test_the_packaged_observed_head_reads_held_out_true_frames_nearer_the_truth_than_the_conv_head():
    model = load_model(packaged_depth_weights_path())
    assert model.cfg.observed_depth == OBSERVED_WIDTH
    conv, observed = held_out(model.depth_net, frames=16), held_out(model.observed_depth_net, frames=16)
    # measured: mean 0.43 -> 0.18, median 0.071 -> 0.035
    assert observed["mean"] < 0.6 * conv["mean"] and observed["median"] < 0.7 * conv["median"], (conv, observed)
