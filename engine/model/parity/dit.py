"""Parity of our DiT, sampler and attention context against an official-code DiT fixture.

Owns the replay of a DiT case: rebuild the weights from the fixture's key list, then
(1) teacher-forced: feed every stored forward input and compare each velocity;
(2) free-running: run the chunks through ``denoise_chunk`` with the stored noise and re-noise draws and
compare x0s, re-noised inputs, final latents, and (with the ``_caches`` companion file) the
self-attention KV of the first and last layer after every chunk and one action block's caches.
Results are rows ``(name, relative error)`` with the error metric of ``engine.model.parity.fixture``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from engine.config import ModelConfig, SamplerConfig
from engine.model.chunk import ChunkInputs, denoise_chunk
from engine.model.parity.fixture import Fixture, relative_error
from engine.model.kv_context import AttentionContext
from engine.model.mg2 import CausalDiT
from engine.model.mg2_context import mg2_state
from engine.model.official_config import dit_config_from_official
from engine.model.scheduler import FlowMatchSampler

Row = tuple[str, float]


def fixture_model_config(fx: Fixture) -> ModelConfig:
    """Our ModelConfig for the fixture: its DiT config, its step list, its latent size."""
    dit = dit_config_from_official(fx.json("config"))
    steps = tuple(fx.json("denoising_step_list"))
    _, _, _, h, w = fx.tensor("inputs.noise").shape
    return dataclasses.replace(ModelConfig(), dit=dit, latent_height=h, latent_width=w,
                               sampler=dataclasses.replace(SamplerConfig(), denoising_step_list=steps))


def build_fixture_dit(fx: Fixture, cfg: ModelConfig) -> CausalDiT:
    model = CausalDiT(cfg.dit).eval()
    state = {k.removeprefix("model."): v for k, v in fx.weights("").items()}
    model.load_state_dict(state, strict=True)
    return model


def _chunk_inputs(fx: Fixture, cfg: ModelConfig, chunk: int) -> ChunkInputs:
    f = cfg.sampler.frames_per_chunk
    s = chunk * f
    return ChunkInputs(noise=fx.tensor("inputs.noise")[:, :, s:s + f],
                       cond_concat=fx.tensor("inputs.cond_concat")[:, :, s:s + f], start_frame=s,
                       keyboard=fx.tensor("inputs.keyboard"), mouse=fx.tensor("inputs.mouse"))


def _new_context(fx: Fixture, cfg: ModelConfig, model: CausalDiT) -> AttentionContext:
    ctx = AttentionContext(cfg.kv_layout())
    model.prepare_context(ctx, fx.tensor("inputs.visual_context"))
    return ctx


def teacher_forced_rows(fx: Fixture, cfg: ModelConfig, model: CausalDiT) -> list[Row]:
    ctx = _new_context(fx, cfg, model)
    sampler = FlowMatchSampler(cfg.sampler)
    velocity, renoised, x0 = (fx.tensor(k) for k in
                              ("forward.velocity", "forward.x_in_renoised", "forward.x0"))
    chunks, n = velocity.shape[0], sampler.num_steps
    rows = []
    for c in range(chunks):
        inp = _chunk_inputs(fx, cfg, c)
        for k in range(n + 1):
            x = inp.noise if k == 0 else renoised[c, k - 1] if k < n else x0[c, n - 1]
            t = (sampler.timestep_tensor(k, 1, x.shape[2], x.device) if k < n
                 else sampler.clean_timestep_tensor(1, x.shape[2], x.device))
            v = model(x, t, inp.cond_concat, ctx, inp.start_frame, inp.keyboard, inp.mouse)
            rows.append((f"teacher.velocity[{c},{k}]", relative_error(v, velocity[c, k])))
        ctx.commit()
    return rows


def _stored_renoise(fx: Fixture, chunk: int):
    draws = fx.tensor("inputs.renoise")[chunk]            # [steps-1, (B F), z, h, w]

    def source(next_step: int, like: torch.Tensor) -> torch.Tensor:
        eps = draws[next_step - 1]                          # rows are latent frames of the chunk
        return eps.unsqueeze(0).permute(0, 2, 1, 3, 4).reshape(like.shape)
    return source


def free_running_rows(fx: Fixture, cfg: ModelConfig, model: CausalDiT,
                      caches: Fixture | None) -> list[Row]:
    ctx = _new_context(fx, cfg, model)
    sampler = FlowMatchSampler(cfg.sampler)
    ref_x0, ref_in = fx.tensor("forward.x0"), fx.tensor("forward.x_in_renoised")
    latents, rows = [], []
    last_layer = cfg.dit.num_layers - 1
    for c in range(ref_x0.shape[0]):
        def trace(step, x_in, velocity, x0, c=c):
            n = sampler.num_steps
            if 0 < step < n:
                rows.append((f"chain.x_in_renoised[{c},{step - 1}]", relative_error(x_in, ref_in[c, step - 1])))
            if step < n:
                rows.append((f"chain.x0[{c},{step}]", relative_error(x0, ref_x0[c, step])))
            elif caches is not None:
                rows.extend(_cache_rows(caches, ctx, c, (0, last_layer)))
        latents.append(denoise_chunk(model, sampler, ctx, _chunk_inputs(fx, cfg, c),
                                     _stored_renoise(fx, c), trace))
        ctx.commit()
    out = torch.cat(latents, dim=2)
    ref = fx.tensor("output.latents")
    f = cfg.sampler.frames_per_chunk
    for c in range(len(latents)):
        rows.append((f"output.latents[chunk {c}]",
                     relative_error(out[:, :, c * f:(c + 1) * f], ref[:, :, c * f:(c + 1) * f])))
    return rows


def _cache_rows(caches: Fixture, ctx: AttentionContext, chunk: int, layers) -> list[Row]:
    """Compare the context as it stands during the clean pass (= MG2's cache after the chunk)."""
    rows = []
    names = set(caches.keys())
    for layer in layers:
        k, v = ctx.layers[layer].self_kv.context()
        for name, ours in (("k", k), ("v", v)):
            key = f"kv.layer{layer}.after_chunk{chunk}.{name}"
            if key in names:
                rows.append((key, relative_error(ours, caches.tensor(key))))
    for block, state in enumerate(ctx.layers):
        windows = mg2_state(state)
        for branch, rolling in (("keyboard", windows.keyboard), ("mouse", windows.mouse)):
            key = f"action.block{block}.{branch}.k"
            if rolling is None or key not in names:
                continue
            index = caches.tensor(f"action.block{block}.{branch}.index")
            if int(index[0]) != ctx.layout.frames_per_chunk * (chunk + 1):
                continue   # stored after a later chunk
            k, v = rolling.valid()
            rows.append((key, relative_error(k, caches.tensor(key))))
            rows.append((key[:-1] + "v", relative_error(v, caches.tensor(key[:-1] + "v"))))
    return rows


def dit_rows(path: Path) -> list[Row]:
    fx = Fixture.open(path)
    cfg = fixture_model_config(fx)
    model = build_fixture_dit(fx, cfg)
    companion = path.with_name(path.stem + "_caches.safetensors")
    caches = Fixture.open(companion) if companion.is_file() else None
    with torch.no_grad():
        return teacher_forced_rows(fx, cfg, model) + free_running_rows(fx, cfg, model, caches)
