"""LingBot-World-Fast behind the model interface: the tiny configuration's shapes, the DiT on the
session's attention context equal to the official rolling cache, the camera convention, the pipeline's
save-point state, and what the family refuses."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from engine.config import SessionConfig
from engine.errors import CheckpointError, ConfigError, HorizonError
from engine.geometry import quat_from_euler
from engine.model.interface import WorldModel
from engine.model.kv_context import AttentionContext
from engine.model.lingbot.context import attach_text, context_caches
from engine.model.lingbot.family import facts, text_stand_in
from engine.model.lingbot.loop import ChunkConditioning, RunShape, allocate_caches, denoise_chunk
from engine.facts.lingbot_models import LINGBOT_FAST, LINGBOT_TINY
from engine.model.lingbot.pipeline import latent_frame_poses, opencv_c2w
from engine.model.lingbot.schedule import DMDSchedule
from engine.model.lingbot.weights import seeded_model
from engine.model.registry import build_world_model, model_kv_layout, model_spec



def random_chunk_inputs(g: torch.Generator, text):
    """One tiny chunk's seeded inputs: its noise, its conditioning (y and camera) and the re-noising draws."""
    noise = torch.randn(1, 16, 3, 12, 20, generator=g)
    cond = ChunkConditioning(torch.randn(1, 20, 3, 12, 20, generator=g),
                             torch.randn(1, 384, 3, 12, 20, generator=g), text)
    eps = torch.randn(3, 1, 16, 3, 12, 20, generator=g)
    return noise, cond, lambda _c, step, _like: eps[step]

def test_tiny_shapes_follow_the_fixture_config():
    m = LINGBOT_TINY
    layout, grid = m.kv_layout(), m.video_grid()
    assert (layout.layers, layout.heads, layout.head_dim) == (2, 2, 64)
    assert (layout.tokens_per_frame, layout.tokens_per_chunk) == (60, 180)
    assert layout.window_frames == 8 - 1 - 3                 # cache minus the official sink and the chunk
    assert (grid.first_frames, grid.frames_per_chunk, grid.fps) == (9, 12, 16)
    assert m.frame_size == (96, 160) and m.horizon_chunk == 5


def test_full_size_kv_bytes_per_chunk():
    f = facts(LINGBOT_FAST)
    assert f["tokens_per_chunk"] == 3 * 30 * 52
    assert f["kv_bytes_per_chunk_bf16"] == 2 * 40 * 4680 * 5120 * 2
    assert f["kv_bytes_per_chunk_int4"] < f["kv_bytes_per_chunk_bf16"] / 3
    assert 14e9 < f["params"] < 20e9 and f["window_frames"] == 12


def test_context_bridge_equals_the_official_rolling_cache():
    """Without a sink, the official cache of window + chunk frames attends to exactly the session
    context's [window | chunk]: four chunks of DMD steps give the same latents."""
    m = LINGBOT_TINY
    dit_cfg = dataclasses.replace(m.dit, sink_size=0)
    dit = seeded_model(dit_cfg, 5)
    schedule = DMDSchedule(m.settings)
    layout = m.kv_layout()
    shape = RunShape(frame_num=49, lat_f=12, lat_h=12, lat_w=20, chunk_frames=3, frame_seqlen=60,
                     kv_size=(layout.window_frames + 3) * 60, sink_tokens=0)
    official = allocate_caches(dit_cfg, shape, m.settings)
    ctx = AttentionContext(layout)
    text = text_stand_in(m)
    attach_text(ctx, dit, text)
    g = torch.Generator().manual_seed(3)
    for chunk in range(4):
        noise, cond, draw = random_chunk_inputs(g, text)
        a = denoise_chunk(dit, schedule, official, shape, chunk, noise, cond, draw)
        b = denoise_chunk(dit, schedule, context_caches(ctx), shape, chunk, noise, cond, draw)
        ctx.commit()
        assert torch.allclose(a, b, atol=1e-5, rtol=0), (chunk, (a - b).abs().max())


def test_context_bridge_with_the_official_sink_equals_the_official_cache():
    """With the official sink (1 latent frame for the tiny model, ``--official-sink``), the official
    cache of 8 latent frames [sink | 7 rolling frames] and the session context's [sink | window of 4 |
    chunk] give the same latents over four chunks (the sink matters from chunk 2 on: without it the
    context differs there)."""
    m = LINGBOT_TINY
    assert m.dit.sink_size == 1 and m.window_frames == 4
    dit = seeded_model(m.dit, 5)
    schedule = DMDSchedule(m.settings)
    shape = RunShape(frame_num=49, lat_f=12, lat_h=12, lat_w=20, chunk_frames=3, frame_seqlen=60,
                     kv_size=m.dit.local_attn_size * 60, sink_tokens=m.dit.sink_size * 60)
    official = allocate_caches(m.dit, shape, m.settings)
    text = text_stand_in(m)
    with_sink, without = AttentionContext(m.kv_layout()), AttentionContext(m.kv_layout())
    attach_text(with_sink, dit, text)
    attach_text(without, dit, text)
    g = torch.Generator().manual_seed(3)
    for chunk in range(4):
        noise, cond, draw = random_chunk_inputs(g, text)
        a = denoise_chunk(dit, schedule, official, shape, chunk, noise, cond, draw)
        b = denoise_chunk(dit, schedule, context_caches(with_sink, shape.sink_tokens), shape, chunk, noise, cond, draw)
        c = denoise_chunk(dit, schedule, context_caches(without), shape, chunk, noise, cond, draw)
        with_sink.commit()
        without.commit()
        assert torch.allclose(a, b, atol=1e-5, rtol=0), (chunk, (a - b).abs().max())
        assert (chunk >= 2) == bool((a - c).abs().max() > 1e-3), (chunk, (a - c).abs().max())
    saved = with_sink.state_tensors()
    assert saved["layer0.extra.sink_k"].shape == (1, 60, m.dit.num_heads, m.dit.head_dim)


def test_official_sink_is_lingbots_alone(tmp_path):
    ok = _session(tmp_path, memory=dataclasses.replace(_session(tmp_path).memory, official_sink=True))
    assert ok.validate().memory.official_sink
    for change, message in [({"model": "tiny"}, "LingBot-World-Fast's"),
                            ({"memory": dataclasses.replace(ok.memory, sink=True)}, "--sink together")]:
        with pytest.raises(ConfigError, match=message):
            dataclasses.replace(ok, **change).validate()


def test_opencv_poses_flip_the_camera_axes():
    q = quat_from_euler(np.array([0.0, 90.0]), np.array([0.0, 0.0]))
    poses = np.concatenate([np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]), q], axis=1)
    c2w = opencv_c2w(poses).numpy()
    # yaw 0 looks along world -z with y up: OpenCV's z (forward) is -z, its y (down) is -y
    assert np.allclose(c2w[0, :3, 2], [0, 0, -1]) and np.allclose(c2w[0, :3, 1], [0, -1, 0])
    assert np.allclose(c2w[0, :3, 3], [1, 2, 3])
    assert np.allclose(c2w[1, :3, 2], [1, 0, 0], atol=1e-12)           # yaw 90 looks along +x
    assert len(latent_frame_poses(np.repeat(poses[:1], 45, axis=0))) == 12


def _session(tmp_path, **kw) -> SessionConfig:
    return SessionConfig(model="lingbot-tiny", chunks=3, out=tmp_path / "x.mp4", **kw)


def test_family_refuses_a_folder_without_prompt_or_files_and_the_weightless_full_size(tmp_path):
    with pytest.raises(ConfigError, match="give --prompt TEXT"):
        model_spec(_session(tmp_path, checkpoint=tmp_path))
    with pytest.raises(CheckpointError, match="checkpoint file missing: .*config.json"):
        model_spec(_session(tmp_path, checkpoint=tmp_path, prompt="a street"))
    with pytest.raises(ConfigError, match="no built-in weights"):
        model_spec(dataclasses.replace(_session(tmp_path), model="lingbot-fast"))
    assert model_kv_layout(dataclasses.replace(_session(tmp_path), model="lingbot-fast")) == LINGBOT_FAST.kv_layout()


def _model(tmp_path, positions="extend", trajectory=None, official_sink=False):
    from engine.io.trajectory import load_trajectory
    from engine.io.trajectory.packaged import packaged_trajectory

    cfg = _session(tmp_path, positions=positions)
    cfg = dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, official_sink=official_sink))
    spec = model_spec(cfg)
    traj = load_trajectory(packaged_trajectory(trajectory or spec.default_trajectory), "universal",
                           spec.grid.frames_total(8))
    image = torch.zeros(1, 3, *spec.image_size)
    return build_world_model(cfg, image, traj, torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("official_sink", [False, True])
def test_pipeline_state_continues_a_run_exactly(tmp_path, official_sink):
    """Denoise two chunks, save the model's and the context's state, and the next chunk's latents and
    frames equal those of a model built afresh from that state (with the official sink, chunk 2 is the
    first to attend it, from the saved layer state)."""
    model = _model(tmp_path, official_sink=official_sink)
    assert isinstance(model, WorldModel)
    ctx = AttentionContext(model.layout)
    model.prepare_context(ctx)
    for chunk in range(2):
        frames = model.decode(model.denoise(chunk, ctx), chunk)
        assert frames.shape == (model.grid.frames_of_chunk(chunk), 3, 96, 160)
        ctx.commit()
    saved, saved_ctx = model.state_tensors(), ctx.state_tensors()
    expected = model.denoise(2, ctx)
    expected_frames = model.decode(expected, 2)

    again = _model(tmp_path, official_sink=official_sink)
    assert again.sink_tokens == (60 if official_sink else 0)
    ctx2 = AttentionContext(again.layout)
    again.prepare_context(ctx2)
    ctx2.load_state_tensors(saved_ctx)
    again.load_state_tensors(saved)
    latents = again.denoise(2, ctx2)
    assert torch.equal(latents, expected) and torch.equal(again.decode(latents, 2), expected_frames)


def test_native_positions_stop_at_the_horizon(tmp_path):
    model = _model(tmp_path, positions="native")
    with pytest.raises(HorizonError, match="chunk 5"):
        model.denoise(5, AttentionContext(model.layout))


def test_streamed_camera_control_equals_the_official_whole_run(tmp_path):
    """For a video of 4n+1 frames the official resampling lands on video frames 4i: the control the
    session computes chunk by chunk equals the official camera preparation of the whole run."""
    from engine.model.lingbot.loop import camera_condition, run_shape

    model = _model(tmp_path, trajectory="orbit.csv")
    frames = model.trajectory.frames
    m = model.cfg
    shape = run_shape(frames, frames, m.latent_height, m.latent_width, m.dit, m.settings)
    assert shape.lat_f == len(model.relative) == 24
    fx, fy, cx, cy = m.intrinsics()
    height, width = m.frame_size
    official_ks = torch.tensor([fx * 832 / width, fy * 480 / height, cx * 832 / width, cy * 480 / height])
    official = camera_condition(opencv_c2w(model.trajectory.poses), official_ks.expand(frames, 4), shape)
    streamed = torch.cat([model.control(chunk) for chunk in range(shape.chunks)], dim=2)
    assert streamed.shape == official.embedding.shape
    assert torch.allclose(streamed, official.embedding, atol=1e-4, rtol=0)
    moved = official.relative[1:, :3, 3].norm(dim=-1)
    turned = (official.relative[1:, :3, :3] - torch.eye(3)).abs().amax(dim=(1, 2))
    assert moved.max() == pytest.approx(1.0) and turned.max() > 1e-3      # the path moves and turns
