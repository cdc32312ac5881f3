"""A model's running state survives a save point: continuing from ``state_tensors`` is bit-identical.

For each model (MG2's micro configuration with seeded weights, the synthetic model, the arena model
with its packaged weights): a window-only chunk loop runs ``SPLIT`` chunks, takes the model's and the
attention context's state (``engine.model.state_tensors``), and goes on to ``CHUNKS``. A second model
built from the same config, with a fresh context, loads that state and generates the same later
chunks: latents and decoded frames equal bit for bit. Dropping one piece of the state (the noise RNG,
the decoder's cache, the window's KV) makes the continuation differ, so the test sees each piece.
"""
from __future__ import annotations

import pytest
import torch

from engine.io.image import default_start_image_path, load_image
from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.model.kv_context import AttentionContext
from engine.model.registry import build_world_model, model_spec
from engine.model.state_tensors import sub
from engine.settings.overlay import resolve_session_config

CPU = torch.device("cpu")
CHUNKS, SPLIT = 5, 3
CASES = {
    "micro": {"model": "micro"},
    "synthetic": {"model": "synthetic", "kv_scale": 1 / 30, "chunk_ms": 0.0},
    "arena": {"model": "arena"},
}


def _build(case: str):
    cfg = resolve_session_config(None, {**CASES[case], "device": "cpu", "chunks": CHUNKS})
    spec = model_spec(cfg)
    image = load_image(default_start_image_path(), *spec.image_size) if spec.uses_image else None
    trajectory = load_trajectory(packaged_trajectory(spec.default_trajectory), spec.action_mode,
                                 frames=spec.grid.frames_total(CHUNKS))
    model = build_world_model(cfg, image, trajectory, CPU, torch.float32)
    ctx = AttentionContext(model.layout, memory_chunks=0)
    model.prepare_context(ctx)
    return model, ctx


@torch.no_grad()
def _run(model, ctx, chunks) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for chunk in chunks:
        latents = model.denoise(chunk, ctx)
        ctx.commit()
        out.append((latents.clone(), torch.as_tensor(model.decode(latents, chunk)).clone()))
    return out


def _same(a, b) -> bool:
    return all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b))


@pytest.fixture(scope="module", params=sorted(CASES))
def reference(request):
    model, ctx = _build(request.param)
    _run(model, ctx, range(SPLIT))
    state = {"model": model.state_tensors(), "ctx": ctx.state_tensors()}
    assert all(t.device.type == "cpu" for part in state.values() for t in part.values())
    rest = _run(model, ctx, range(SPLIT, CHUNKS))
    return request.param, state, rest


def test_continuing_from_the_state_is_bit_identical(reference):
    case, state, rest = reference
    model, ctx = _build(case)
    model.load_state_tensors(state["model"])
    ctx.load_state_tensors(state["ctx"])
    assert ctx.chunks_committed == SPLIT
    assert _same(_run(model, ctx, range(SPLIT, CHUNKS)), rest)


def test_the_window_kv_is_part_of_the_state(reference):
    case, state, rest = reference
    model, ctx = _build(case)
    model.load_state_tensors(state["model"])
    damaged = {name: (t + 1e-3 if name.endswith("window_k") else t) for name, t in state["ctx"].items()}
    ctx.load_state_tensors(damaged)
    if case == "synthetic":   # its chunks are functions of the index: the window does not feed them
        assert _same(_run(model, ctx, range(SPLIT, CHUNKS)), rest)
    else:
        assert not _same(_run(model, ctx, range(SPLIT, CHUNKS)), rest)


@pytest.mark.parametrize("piece", ["rng", "decoder", "last_frame"])
def test_each_piece_of_the_model_state_matters(reference, piece):
    case, state, rest = reference
    names = [n for n in state["model"] if n == piece or n.startswith(piece + ".")]
    if not names:
        pytest.skip(f"the {case} model keeps no {piece}")
    model, ctx = _build(case)
    model.load_state_tensors(state["model"])
    fresh, _ = _build(case)
    if piece == "rng":
        model.rng.manual_seed(12345)
    elif piece == "decoder":
        model.decoder.load_state_tensors(sub("decoder", fresh.state_tensors()))
    else:
        model._last_frame = None
    ctx.load_state_tensors(state["ctx"])
    assert not _same(_run(model, ctx, range(SPLIT, CHUNKS)), rest)
