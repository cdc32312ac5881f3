"""The model interface (DESIGN §2a): MG2, the synthetic model, the arena model and LingBot-World-Fast (its
tiny seeded configuration), as the factory builds them, are
``WorldModel``s whose promised layout, grid and frame size are what they really produce.

For each model (MG2's micro configuration with its seeded weights; the synthetic model at one layer of
MG2-shaped KV; the arena model with its packaged weights): it satisfies the protocol; the attention context shaped by its ``layout`` holds K/V of
exactly those shapes, and one chunk's ``denoise`` fills the current region of every layer; its
``bytes_per_chunk`` equals the config's ``kv_bytes_per_chunk`` (and the byte accounting's bf16 figure);
``decode`` yields ``grid`` frames of ``frame_size``; ``camera_poses`` are the trajectory's;
``rotate_time`` moves keys and moving them back restores them.
"""
from __future__ import annotations

import pytest
import torch

from engine.config import MODEL_CONFIGS, session_model_config
from engine.io.image import default_start_image_path, load_image
from engine.io.trajectory import load_trajectory, packaged_trajectory
from engine.facts.kv_format import byte_figures
from engine.model.interface import WorldModel
from engine.model.kv_context import AttentionContext
from engine.model.registry import build_world_model, model_spec
from engine.settings.overlay import resolve_session_config

CPU = torch.device("cpu")
CHUNKS = 2
MEMORY_CHUNKS = 1
CASES = {
    "micro": {"model": "micro"},
    # One layer of MG2-shaped KV keeps the context small; no device time is spent per chunk.
    "synthetic": {"model": "synthetic", "kv_scale": 1 / 30, "chunk_ms": 0.0},
    "arena": {"model": "arena"},
    "lingbot-tiny": {"model": "lingbot-tiny"},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request):
    cfg = resolve_session_config(None, {**CASES[request.param], "device": "cpu", "chunks": CHUNKS})
    spec = model_spec(cfg)
    image = load_image(default_start_image_path(), *spec.image_size) if spec.uses_image else None
    trajectory = load_trajectory(packaged_trajectory(spec.default_trajectory), spec.action_mode,
                                 frames=spec.grid.frames_total(CHUNKS))
    model = build_world_model(cfg, image, trajectory, CPU, torch.float32)
    return cfg, model, trajectory


def test_models_satisfy_the_protocol(built):
    cfg, model, _ = built
    assert isinstance(model, WorldModel)
    spec = model_spec(cfg)
    assert model.name == spec.name and model.weights
    assert (model.grid, tuple(model.frame_size)) == (spec.grid, spec.frame_size)


def test_layout_is_what_the_context_holds_and_denoise_fills(built):
    _, model, _ = built
    lay = model.layout
    ctx = AttentionContext(lay, memory_chunks=MEMORY_CHUNKS)
    total = (MEMORY_CHUNKS + 1) * lay.tokens_per_chunk + lay.window_tokens
    assert len(ctx.layers) == lay.layers
    shape = (1, total, lay.heads, lay.head_dim)                  # [B, memory + window + chunk, H, D]
    assert all(s.self_kv.k.shape == s.self_kv.v.shape == shape for s in ctx.layers)
    model.prepare_context(ctx)
    with torch.no_grad():
        model.denoise(0, ctx)
    current = ctx.current_kv()
    assert len(current) == lay.layers
    for k, v in current:
        assert k.shape == v.shape == (1, lay.tokens_per_chunk, lay.heads, lay.head_dim)
        assert k.abs().sum() > 0 and v.abs().sum() > 0           # written by the model, not left zero
    ctx.commit()


def test_bytes_per_chunk_match_the_config(built):
    cfg, model, _ = built
    lay = model.layout
    if cfg.model == "arena":   # transformer layers + the copy layer, all [tokens, heads, head_dim]
        m = model.cfg
        expected = 2 * (m.layers + 1) * m.tokens_per_chunk * m.dim * 2
    elif cfg.model == "lingbot-tiny":
        m = model.cfg
        expected = 2 * m.dit.num_layers * m.tokens_per_chunk * m.dit.dim * 2
    else:
        expected = session_model_config(cfg).kv_bytes_per_chunk(2.0)
    assert lay.bytes_per_chunk(2.0) == expected == byte_figures(lay)["bf16"]


@pytest.mark.parametrize("name", sorted(MODEL_CONFIGS))
def test_every_named_config_layout_matches_its_byte_count(name):
    m = MODEL_CONFIGS[name]
    assert m.kv_layout().bytes_per_chunk(2.0) == m.kv_bytes_per_chunk(2.0)
    assert m.video_grid().frames_total(5) == m.video_frames_total(5)


def test_decode_and_poses_follow_grid_and_trajectory(built):
    _, model, trajectory = built
    lay = model.layout
    latents = torch.zeros(1, 16, lay.frames_per_chunk, 4, 8)
    if model.name in ("micro", "lingbot-tiny"):   # real models decode real latents: a denoised chunk
        ctx = AttentionContext(lay)
        model.prepare_context(ctx)
        with torch.no_grad():
            latents = model.denoise(0, ctx)
    if model.name == "arena":
        latents = torch.zeros(1, lay.frames_per_chunk, 3, model.cfg.height, model.cfg.width)
    with torch.no_grad():
        frames = model.decode(latents, 0)
    if frames.dtype == torch.uint8:            # RGB [T, H, W, 3], the writer's own layout
        frames = frames.permute(0, 3, 1, 2)
    assert tuple(frames.shape) == (model.grid.frames_of_chunk(0), 3, *model.frame_size)
    assert (model.camera_poses() == trajectory.poses).all()


def test_rotate_time_moves_keys_and_back(built):
    _, model, _ = built
    lay = model.layout
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(1, lay.tokens_per_chunk, lay.heads, lay.head_dim, generator=gen)   # [B, T, H, D]
    timeless = {lay.layers - 1} if model.name == "arena" else set()   # the arena's copy layer has no time
    for layer in range(lay.layers):
        moved = model.rotate_time(layer, keys, 37.5)
        assert moved.shape == keys.shape and (torch.equal(moved, keys) if layer in timeless
                                              else not torch.allclose(moved, keys))
        assert torch.allclose(model.rotate_time(layer, moved, -37.5), keys, atol=1e-5)
