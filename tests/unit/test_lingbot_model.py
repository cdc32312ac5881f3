"""LingBot-World-Fast model pieces without the fixture: the cache rule, strict loading, config errors,
run shapes, the y mask, the sigma look-ups, and the ``act`` control width."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from engine.errors import CheckpointError, ConfigError
from engine.model.lingbot.cache import FastCaches, RollingKV
from engine.facts.lingbot_config import FastDiTConfig, LoopSettings, config_from_official
from engine.model.lingbot.loop import allocate_caches, generate_latents, image_mask, run_shape
from engine.model.lingbot.schedule import DMDSchedule
from engine.model.lingbot.weights import key_shapes, load_checkpoint, load_state, seeded_model

TINY = dict(dim=32, ffn_dim=64, num_heads=2, num_layers=1, text_dim=16, text_len=8, freq_dim=16,
            in_dim=36, out_dim=16, local_attn_size=4, sink_size=1)


def test_cache_keeps_the_sink_and_the_newest_frames():
    kv = RollingKV(batch=1, size=8, heads=1, head_dim=2, sink=1, max_attention=8, dtype=torch.float32,
                   device="cpu")
    held, index = [], []
    for chunk in range(4):
        k = torch.full((1, 3, 1, 2), float(chunk))
        for _ in range(5):                                  # 4 steps + clean pass: same rows each time
            k_ctx, _ = kv.update(k, k, current_start=3 * chunk)
            assert k_ctx.shape[1] == kv.local_end
        held.append(kv.frames(1).tolist())
        index.append((kv.global_end, kv.local_end))
    assert held == [[0, 1, 2], [0, 1, 2, 3, 4, 5], [0, 2, 3, 4, 5, 6, 7, 8], [0, 5, 6, 7, 8, 9, 10, 11]]
    assert index == [(3, 3), (6, 6), (9, 8), (12, 8)]
    assert kv.k[0, 0, 0, 0] == 0 and kv.k[0, 1, 0, 0] == 1 and kv.k[0, 7, 0, 0] == 3


def test_cache_attends_to_at_most_max_attention_rows():
    kv = RollingKV(1, 8, 1, 2, sink=0, max_attention=5, dtype=torch.float32, device="cpu")
    for chunk in range(3):
        k_ctx, _ = kv.update(torch.zeros(1, 3, 1, 2), torch.zeros(1, 3, 1, 2), 3 * chunk)
    assert k_ctx.shape[1] == 5 and kv.local_end == 8


def _state(cfg):
    return {k: torch.zeros(s) for k, s in key_shapes(cfg)}


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape"])
def test_strict_loading_names_the_bad_key(change):
    cfg = FastDiTConfig(**TINY)
    state = _state(cfg)
    key = "blocks.0.cam_scale_layer.weight"
    if change == "missing":
        del state[key]
    elif change == "unexpected":
        state["blocks.0.img_emb.weight"] = torch.zeros(1)
        key = "blocks.0.img_emb.weight"
    else:
        state[key] = torch.zeros(3, 3)
    with pytest.raises(CheckpointError, match=key.replace(".", r"\.")):
        load_state(cfg, state, "test.safetensors")


def test_checkpoint_folder_with_overrides(tmp_path):
    cfg = FastDiTConfig(**TINY)
    folder = tmp_path / "lingbot_world_fast"
    folder.mkdir()
    official = {k: v for k, v in TINY.items() if k not in ("local_attn_size", "sink_size", "text_dim")}
    (folder / "config.json").write_text(json.dumps({"_class_name": "WanModelFast", **official}))
    state = seeded_model(cfg, 7).state_dict()
    keys = sorted(state)
    save_file({k: state[k] for k in keys[:10]}, str(folder / "part-1.safetensors"))
    save_file({k: state[k] for k in keys[10:]}, str(folder / "part-2.safetensors"))
    overrides = {"text_dim": 16, "local_attn_size": 4, "sink_size": 1, "control_type": "cam"}
    model = load_checkpoint(tmp_path, overrides, torch.float32, "cpu")
    assert model.cfg == cfg
    assert all(torch.equal(model.state_dict()[k], state[k]) for k in keys)


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="'window'"):
        config_from_official({"dim": 32, "window": 3})
    with pytest.raises(ConfigError, match="'joystick'"):
        FastDiTConfig(control_type="joystick")
    with pytest.raises(ConfigError, match="timesteps_index"):
        LoopSettings(timesteps_index=(0, 1000))


def test_act_control_takes_seven_channels_per_pixel():
    cfg = FastDiTConfig(**{**TINY, "control_type": "act"})
    assert cfg.control_dim == 7 and cfg.control_in_features == 7 * 64 * 4
    model = seeded_model(cfg, 3)
    caches = FastCaches.allocate(1, 1, 4 * 4, 2, 16, 4, None)
    x, y = torch.randn(1, 16, 1, 4, 4), torch.randn(1, 20, 1, 4, 4)
    v = model(x, torch.tensor([999]), torch.randn(1, 5, 16), y, torch.randn(1, 7 * 64, 1, 4, 4), caches, 0, 4)
    assert v.shape == x.shape and torch.isfinite(v).all()


def test_run_shape_follows_the_official_rounding():
    cfg = FastDiTConfig(**{**TINY, "local_attn_size": 8})
    shape = run_shape(49, 50, 12, 20, cfg, LoopSettings())
    assert (shape.frame_num, shape.lat_f, shape.video_frames, shape.frame_seqlen) == (49, 12, 45, 60)
    assert (shape.kv_size, shape.sink_tokens, shape.chunks, shape.pixel_size) == (480, 60, 4, (96, 160))
    assert run_shape(81, 30, 12, 20, cfg, LoopSettings()).frame_num == 29      # capped by the poses
    whole = run_shape(49, 50, 12, 20, FastDiTConfig(**{**TINY, "local_attn_size": -1}), LoopSettings())
    assert whole.kv_size == 12 * 60


def test_mask_marks_only_the_start_image_frame():
    shape = run_shape(49, 50, 4, 6, FastDiTConfig(**TINY), LoopSettings())
    mask = image_mask(shape)
    assert mask.shape == (4, shape.lat_f, 4, 6)
    assert mask[:, 0].eq(1).all() and mask[:, 1:].eq(0).all()


@pytest.mark.parametrize("shift", [5.0, 10.0])
def test_sigma_lookups_take_the_first_and_the_second_match(shift):
    schedule = DMDSchedule(LoopSettings(shift=shift))
    table = schedule.timesteps_table
    for step, t in enumerate(schedule.timesteps.tolist()):
        matches = (table == t).nonzero().flatten().tolist()
        assert schedule.sigma_x0[step] == schedule.sigmas_table[matches[0]]
        if step > 0:
            second = matches[1] if len(matches) > 1 else matches[0]
            assert schedule.sigma_renoise[step - 1] == schedule.sigmas_table[second]


def test_cache_too_small_for_sink_and_chunk_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot hold"):
        run_shape(49, 50, 4, 4, FastDiTConfig(**{**TINY, "local_attn_size": 3, "sink_size": 1}), LoopSettings())


def test_loop_runs_other_shapes_and_keeps_sink_and_window():
    """act control, shift 10, head width 24, chunks of 2 latent frames, a 5-frame cache with a 2-frame sink."""
    cfg = FastDiTConfig(**{**TINY, "dim": 48, "control_type": "act", "local_attn_size": 5, "sink_size": 2})
    settings = LoopSettings(chunk_size=2, shift=10.0)
    shape = run_shape(33, 40, 4, 6, cfg, settings)
    assert (shape.lat_f, shape.frame_seqlen, shape.kv_size) == (8, 6, 30)
    model = seeded_model(cfg, 11)
    caches = allocate_caches(cfg, shape, settings)
    schedule = DMDSchedule(settings)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(1, 16, shape.lat_f, 4, 6, generator=gen)
    y = torch.cat([image_mask(shape), torch.randn(16, shape.lat_f, 4, 6, generator=gen)])[None]
    control = torch.randn(1, 7 * 64, shape.lat_f, 4, 6, generator=gen)
    held = []

    def trace(chunk, step, x_in, velocity, x0):
        if step == schedule.num_steps:
            held.append(caches.self_kv[0].frames(shape.frame_seqlen).tolist())

    latents = generate_latents(model, schedule, caches, shape, noise, y, control, torch.randn(1, 3, 16),
                               lambda c, k, like: torch.randn(like.shape, generator=gen), trace)
    assert latents.shape == noise.shape and torch.isfinite(latents).all()
    assert held == [[0, 1], [0, 1, 2, 3], [0, 1, 3, 4, 5], [0, 1, 5, 6, 7]]
