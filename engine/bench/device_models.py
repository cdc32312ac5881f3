"""The device check's model steps: tiny / micro on the device against the CPU, MG2's full-size DiT on
random weights, and the arena model's chunk time (``bench device``; contract in
``engine.bench.device_steps``).

These run the models through the one interface the session uses (``engine.model.registry``), chunk by
chunk into an ``AttentionContext`` of the local window only: denoise, commit, decode, without the MP4
(so they need no PyAV; ``session_mp4`` runs a whole session). The start image is a seeded random
picture, the trajectory the model's packaged default.

Parity: the same model and seed on the device in bf16 and on the CPU in float32; the figure is the
largest relative L2 distance of a chunk's latents and the mean absolute distance of its frames; the
step fails past ``PARITY_REL`` (bf16 keeps 8 bits of mantissa; four forwards a chunk and a few chunks
of history compound it).

The full-size DiT: MG2's ``CausalDiT`` built straight on the device in bf16 with random weights (never
materialised on the CPU), a context at the real size (3 retrieved chunks + the local window + the
chunk: 13,200 tokens a layer), one warm-up chunk, then timed chunks of 3 denoising forwards and the
clean pass; against the paper's 1.2 s a chunk on an RTX 4090.
"""
from __future__ import annotations

import dataclasses
import time

import torch

from engine.bench.device_steps import GiB, StepContext, StepFailed, plural

PARITY_REL = 0.05            # largest relative L2 distance of a chunk's latents, bf16 device vs fp32 CPU
PAPER_CHUNK_S = 1.2          # MG2 on an RTX 4090 (the paper)
RETRIEVED_CHUNKS = 3         # the memory region of the real context (k = 3)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_model(name: str, device: torch.device, dtype: torch.dtype, chunks: int, seed: int = 0):
    """The named model through the registry, with a seeded random start image and its default path."""
    from engine.config import SessionConfig
    from engine.io.trajectory import packaged_trajectory
    from engine.model.registry import build_world_model, model_spec
    from engine.session.observe import session_path

    cfg = SessionConfig(model=name, chunks=chunks, seed=seed, device=str(device))
    spec = model_spec(cfg)
    cfg = dataclasses.replace(cfg, trajectory=packaged_trajectory(spec.default_trajectory))
    image = None
    if spec.uses_image:
        h, w = spec.image_size
        image = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed)) * 2 - 1  # [1, 3, H, W]
    return build_world_model(cfg, image, session_path(cfg, spec).trajectory, device, dtype)


def run_chunks(name: str, device: torch.device, dtype: torch.dtype, chunks: int) -> dict:
    """``chunks`` chunks of the model: latents and frames (float32 on the CPU) and per-chunk times."""
    from engine.model.kv_context import AttentionContext

    model = build_model(name, device, dtype, chunks)
    ctx = AttentionContext(model.layout, memory_chunks=0, dtype=dtype, device=device)
    out = {"latents": [], "frames": [], "denoise_s": [], "decode_s": []}
    with torch.no_grad():
        model.prepare_context(ctx)
        for chunk in range(chunks):
            _sync(device)
            t0 = time.perf_counter()
            latents = model.denoise(chunk, ctx)
            ctx.commit()
            _sync(device)
            t1 = time.perf_counter()
            frames = model.decode(latents, chunk)
            _sync(device)
            out["denoise_s"].append(t1 - t0)
            out["decode_s"].append(time.perf_counter() - t1)
            out["latents"].append(latents.float().cpu())
            out["frames"].append(frames.float().cpu())
    return out


def parity(name: str, ctx: StepContext, chunks: int) -> tuple[str, dict]:
    """The model on the device in bf16 against the CPU in float32 (dry run: one float32 run on the CPU
    compared with itself, the comparison's flow only: bf16 convolutions on a CPU take seconds a chunk)."""
    device = torch.device(ctx.device)
    dtype = torch.float32 if ctx.dry_run else torch.bfloat16
    ref = run_chunks(name, torch.device("cpu"), torch.float32, chunks)
    got = ref if (device.type, dtype) == ("cpu", torch.float32) else run_chunks(name, device, dtype, chunks)
    rel = [float((g - r).norm() / r.norm().clamp_min(1e-12)) for g, r in zip(got["latents"], ref["latents"])]
    frame_mean = [float((g - r).abs().mean()) for g, r in zip(got["frames"], ref["frames"])]
    frame_max = [float((g - r).abs().max()) for g, r in zip(got["frames"], ref["frames"])]
    figures = {"model": name, "chunks": chunks, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
               "reference": "cpu float32",
               "latents_rel_l2": rel, "frames_mean_abs": frame_mean, "frames_max_abs": frame_max,
               "tolerance_rel_l2": PARITY_REL, "denoise_s": got["denoise_s"], "decode_s": got["decode_s"],
               "cpu_denoise_s": ref["denoise_s"], "finite": all(bool(t.isfinite().all()) for t in got["latents"])}
    summary = (f"{name}, {plural(chunks, 'chunk')}: latents rel {max(rel):.2g} (<= {PARITY_REL}), frames mean |d| "
               f"{max(frame_mean):.2g}, chunk {_median(got['denoise_s']) * 1e3:.0f} ms vs CPU "
               f"{_median(ref['denoise_s']) * 1e3:.0f} ms")
    if not figures["finite"] or max(rel) > PARITY_REL:
        raise StepFailed(f"{name} on {device} in {figures['dtype']} differs from the CPU: latents rel {max(rel):.3g} > "
                         f"{PARITY_REL}" if figures["finite"] else f"{name} on {device}: non-finite latents",
                         summary, figures)
    return summary, figures


def parity_tiny_step(ctx: StepContext) -> tuple[str, dict]:
    """tiny (176x320 video) on the device against the CPU; the dry run takes micro (tiny's VAE at 176x320
    takes ~15 s a chunk on a 2-core CPU)."""
    return parity("micro" if ctx.dry_run else "tiny", ctx, 1 if ctx.dry_run else 3)


def parity_micro_step(ctx: StepContext) -> tuple[str, dict]:
    return parity("micro", ctx, 1 if ctx.dry_run else 6)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


# ---- MG2's full-size DiT ------------------------------------------------------------------------------

def dit_step(ctx: StepContext) -> tuple[str, dict]:
    """MG2's DiT at full size on random weights (dry run: micro's), timed per forward and per chunk."""
    from engine.config import model_config

    cfg = model_config("micro" if ctx.dry_run else "mg2-universal")
    device = torch.device(ctx.device)
    dtype = torch.float32 if ctx.dry_run else torch.bfloat16
    figures = time_dit(cfg, device, dtype, warmup_chunks=1 if ctx.dry_run else 2, timed_chunks=1 if ctx.dry_run else 3)
    summary = (f"{cfg.name} DiT ({figures['params'] / 1e6:,.0f} M params, {figures['context_tokens']} context "
               f"tokens): step {figures['step_s'] * 1e3:.0f} ms, chunk {figures['chunk_s'] * 1e3:.0f} ms "
               f"(paper: {PAPER_CHUNK_S * 1e3:.0f} ms on an RTX 4090), peak "
               f"{figures['device_peak_bytes'] / GiB:.1f} GiB")
    if not figures["finite"]:
        raise StepFailed("the DiT's output is not finite", summary, figures)
    return summary, figures


def time_dit(cfg, device: torch.device, dtype: torch.dtype, warmup_chunks: int, timed_chunks: int) -> dict:
    """Build ``cfg``'s DiT on ``device`` in ``dtype``, run ``warmup_chunks`` (at least 1: the window
    fills), then fill the memory region and time ``timed_chunks`` chunks."""
    assert warmup_chunks >= 1
    from engine.model.action import first_window_frame
    from engine.model.chunk import ChunkInputs, denoise_chunk, generator_noise
    from engine.model.kv_context import AttentionContext
    from engine.model.mg2 import CausalDiT
    from engine.model.scheduler import FlowMatchSampler

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            dit = CausalDiT(cfg.dit).eval()        # random init, on the device from the start
    finally:
        torch.set_default_dtype(before)
    weights_bytes = sum(p.numel() * p.element_size() for p in dit.parameters())
    layout = cfg.kv_layout()
    ctx = AttentionContext(layout, memory_chunks=RETRIEVED_CHUNKS, dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(0)
    clip = torch.randn(1, cfg.clip.num_tokens, cfg.dit.clip_dim, generator=gen)   # [B, N, clip_dim]
    sampler = FlowMatchSampler(cfg.sampler)
    noise = generator_noise(gen)
    f = cfg.sampler.frames_per_chunk
    frames = cfg.video_frames_total(64)
    kdim = cfg.dit.action.keyboard_dim_in if cfg.dit.action else 4
    keyboard = torch.randint(0, 2, (frames, kdim), generator=gen).float()     # [T, kdim] per video frame
    mouse = torch.randn(frames, 2, generator=gen) * 0.1                     # [T, 2]

    def inputs(chunk: int) -> ChunkInputs:
        first = first_window_frame(chunk * f, cfg.dit.action) if cfg.dit.action else 0
        last = 1 + cfg.vae.temporal_factor * (chunk * f + f - 1)
        shape = (1, cfg.dit.out_dim, f, cfg.latent_height, cfg.latent_width)          # [B, z, F, h, w]
        cond = (1, cfg.dit.in_dim - cfg.dit.out_dim, f, cfg.latent_height, cfg.latent_width)
        to = dict(device=device, dtype=dtype)
        return ChunkInputs(noise=torch.randn(shape, generator=gen).to(**to), cond_concat=torch.randn(cond, generator=gen).to(**to),
                           start_frame=chunk * f, keyboard=keyboard[None, first:last].to(**to),
                           mouse=mouse[None, first:last].to(**to), action_offset=first)

    forwards = sampler.num_steps + 1
    times, finite = [], True
    with torch.no_grad():
        dit.prepare_context(ctx, clip.to(device))
        for chunk in range(warmup_chunks + timed_chunks):
            if chunk == warmup_chunks:     # the window is full: the retrieved chunks join the context
                _fill_memory(ctx, gen)
            _sync(device)
            t0 = time.perf_counter()
            latents = denoise_chunk(dit, sampler, ctx, inputs(chunk), noise)
            ctx.commit()
            _sync(device)
            if chunk >= warmup_chunks:
                times.append(time.perf_counter() - t0)
                finite = finite and bool(latents.isfinite().all())
    k, _ = ctx.layers[0].self_kv.context()
    chunk_s = _median(times)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {"model": cfg.name, "dtype": str(dtype).removeprefix("torch."), "device": str(device),
            "params": sum(p.numel() for p in dit.parameters()), "weights_bytes": weights_bytes,
            "layers": cfg.dit.num_layers, "chunk_tokens": layout.tokens_per_chunk, "context_tokens": k.shape[1],
            "forwards_per_chunk": forwards, "chunk_s_all": times, "chunk_s": chunk_s, "step_s": chunk_s / forwards,
            "chunk_vs_paper": chunk_s / PAPER_CHUNK_S, "device_peak_bytes": peak, "finite": finite}


def _fill_memory(ctx, gen: torch.Generator) -> None:
    """Random retrieved chunks in every layer's memory region, all of it valid."""
    for state in ctx.layers:
        kv = state.self_kv
        n = kv.layout.memory_tokens
        k, v = kv.memory_slot(0, n)
        k.copy_(torch.randn(k.shape, generator=gen))
        v.copy_(torch.randn(v.shape, generator=gen))
        kv.set_memory_valid(n)


# ---- the arena model -------------------------------------------------------------------------------------

def arena_step(ctx: StepContext) -> tuple[str, dict]:
    """The arena model (the default of ``worldpager generate``): chunk time on the device and the CPU."""
    chunks = 2 if ctx.dry_run else 8
    device = torch.device(ctx.device)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16     # what a session picks
    got = run_chunks("arena", device, dtype, chunks)
    cpu = got if device.type == "cpu" else run_chunks("arena", torch.device("cpu"), torch.float32, min(chunks, 3))
    steady = got["denoise_s"][1:] or got["denoise_s"]
    figures = {"chunks": chunks, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
               "chunk_s": _median(steady), "decode_s": _median(got["decode_s"][1:] or got["decode_s"]),
               "chunk_s_all": got["denoise_s"], "cpu_chunk_s": _median(cpu["denoise_s"][1:] or cpu["denoise_s"]),
               "finite": all(bool(t.isfinite().all()) for t in got["latents"])}
    summary = (f"{plural(chunks, 'chunk')}: {figures['chunk_s'] * 1e3:.0f} ms a chunk + decode {figures['decode_s'] * 1e3:.0f} ms "
               f"on {device} {figures['dtype']}; CPU {figures['cpu_chunk_s'] * 1e3:.0f} ms")
    if not figures["finite"]:
        raise StepFailed("the arena model's latents are not finite", summary, figures)
    return summary, figures
