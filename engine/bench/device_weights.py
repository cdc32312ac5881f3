"""The device check's ``weights`` step: resident vs streamed vs int8 DiT blocks, on the device.

Owns one step (the contract of ``engine.bench.device_steps``): MG2's full-size DiT on random weights
runs the same chunks three times, each from a fresh build of the same seeded weights: every block
resident; half of the blocks streamed through the two device slots (``engine.model.weight_stream``);
every block's large linears int8 (``engine.model.weight_quant``). Dry run: micro's DiT on the CPU in
float32, both blocks streamed through one slot (so that it is rewritten).
Figures: each variant's median chunk time and device peak, the bytes streamed per chunk, whether the
streamed chunks equal the resident ones bit for bit (a fault otherwise: the step fails), and the int8
chunks' error against the resident ones (max |int8 - bf16| / std(bf16) and the relative L2), the
full-size figure of ``scripts/weights_error.py``'s tiny ones. Nothing here asserts a speed.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from engine.bench.device_models import RETRIEVED_CHUNKS, _fill_memory, _median, _sync
from engine.bench.device_steps import GiB, StepContext, StepFailed


def _build(cfg, device: torch.device, dtype: torch.dtype):
    from engine.model.mg2 import CausalDiT

    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return CausalDiT(cfg.dit).eval()
    finally:
        torch.set_default_dtype(before)


def run_variant(cfg, device: torch.device, dtype: torch.dtype, place: Callable, chunks: int) -> dict:
    """Build the DiT, ``place(dit)`` its weights, then denoise ``chunks`` chunks (the first fills the
    window; the retrieved memory joins after it): the outputs, per-chunk times, the device peak."""
    from engine.model.chunk import ChunkInputs, denoise_chunk, generator_noise
    from engine.model.kv_context import AttentionContext
    from engine.model.scheduler import FlowMatchSampler

    dit = _build(cfg, device, dtype)
    streamer = place(dit)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    ctx = AttentionContext(cfg.kv_layout(), memory_chunks=RETRIEVED_CHUNKS, dtype=dtype, device=device)
    gen = torch.Generator().manual_seed(0)
    clip = torch.randn(1, cfg.clip.num_tokens, cfg.dit.clip_dim, generator=gen)
    sampler = FlowMatchSampler(cfg.sampler)
    noise = generator_noise(gen)
    f = cfg.sampler.frames_per_chunk
    outputs, times, streamed = [], [], []
    with torch.no_grad():
        dit.prepare_context(ctx, clip.to(device))
        for chunk in range(chunks):
            if chunk == 1:
                _fill_memory(ctx, gen)
            shape = (1, cfg.dit.out_dim, f, cfg.latent_height, cfg.latent_width)
            cond = (1, cfg.dit.in_dim - cfg.dit.out_dim, f, cfg.latent_height, cfg.latent_width)
            frames = 1 + cfg.vae.temporal_factor * (chunk * f + f - 1)
            kdim = cfg.dit.action.keyboard_dim_in if cfg.dit.action else 4
            to = dict(device=device, dtype=dtype)
            inputs = ChunkInputs(noise=torch.randn(shape, generator=gen).to(**to),
                                 cond_concat=torch.randn(cond, generator=gen).to(**to), start_frame=chunk * f,
                                 keyboard=torch.zeros(1, frames, kdim, **to), mouse=torch.zeros(1, frames, 2, **to),
                                 action_offset=0)
            before = streamer.streamed_bytes if streamer is not None else 0
            _sync(device)
            t0 = time.perf_counter()
            latents = denoise_chunk(dit, sampler, ctx, inputs, noise)
            ctx.commit()
            _sync(device)
            times.append(time.perf_counter() - t0)
            streamed.append((streamer.streamed_bytes if streamer is not None else 0) - before)
            outputs.append(latents.float().cpu())
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    del dit, ctx
    return {"outputs": outputs, "chunk_s": _median(times[1:] or times), "device_peak_bytes": peak,
            "streamed_bytes_per_chunk": _median(streamed[1:] or streamed)}


def _errors(ours: list[torch.Tensor], ref: list[torch.Tensor]) -> dict:
    a, b = torch.cat([o.flatten() for o in ours]).double(), torch.cat([r.flatten() for r in ref]).double()
    return {"max_over_std": float((a - b).abs().max() / b.std()), "rel_l2": float((a - b).norm() / b.norm())}


def weights_step(ctx: StepContext) -> tuple[str, dict]:
    from engine.config import model_config
    from engine.model.weight_quant import quantise_blocks
    from engine.model.weight_stream import attach_streamer

    cfg = model_config("micro" if ctx.dry_run else "mg2-universal")
    device = torch.device(ctx.device)
    dtype = torch.float32 if ctx.dry_run else torch.bfloat16
    chunks = 2 if ctx.dry_run else 3
    # half the blocks stream (dry run: micro's two blocks, through one slot, so that it is rewritten)
    half, buffers = (0, 1) if ctx.dry_run else (cfg.dit.num_layers // 2, 2)
    def int8(dit):
        quantise_blocks(dit.blocks, "int8")

    def streamed(dit):
        return attach_streamer(dit.blocks, half, device, buffers)

    variants = {"resident": lambda dit: None, "streamed": streamed, "int8": int8}
    runs = {name: run_variant(cfg, device, dtype, place, chunks) for name, place in variants.items()}
    exact = all(torch.equal(a, b) for a, b in zip(runs["streamed"]["outputs"], runs["resident"]["outputs"]))
    figures = {"model": cfg.name, "dtype": str(dtype).removeprefix("torch."), "layers": cfg.dit.num_layers,
               "streamed_blocks": cfg.dit.num_layers - half, "streamed_exact": exact,
               "int8_error": _errors(runs["int8"]["outputs"], runs["resident"]["outputs"]),
               **{name: {k: v for k, v in run.items() if k != "outputs"} for name, run in runs.items()}}
    r, s, q = (figures[n] for n in ("resident", "streamed", "int8"))
    summary = (f"{cfg.name} chunk: resident {r['chunk_s'] * 1e3:.0f} ms ({r['device_peak_bytes'] / GiB:.1f} GiB), "
               f"{figures['streamed_blocks']}/{cfg.dit.num_layers} blocks streamed {s['chunk_s'] * 1e3:.0f} ms "
               f"({s['streamed_bytes_per_chunk'] / GiB:.2f} GiB/chunk, {s['device_peak_bytes'] / GiB:.1f} GiB), "
               f"int8 {q['chunk_s'] * 1e3:.0f} ms ({q['device_peak_bytes'] / GiB:.1f} GiB, error "
               f"{figures['int8_error']['rel_l2']:.2e} rel. L2); streamed exact: {exact}")
    if not exact:
        raise StepFailed("streamed blocks computed other chunks than resident ones", summary, figures)
    return summary, figures
