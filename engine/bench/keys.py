"""How much of the keys int4 retains when the memory stores them before the rotation or after it.

Contract: :func:`capture_keys` runs an MG2- or LingBot-architecture model (``--kv-keys pre-rope``'s context, so both
conventions come from one run) for ``chunks`` chunks and keeps, per chunk and layer, the keys before
and after the rotation and the values, and the last chunk's queries (its clean pass, rotated at its
position). :func:`key_retention` stores every chunk but the last through the memory's own block code
(``engine.memory.quant``, bits as given) once as post-rope keys and once as pre-rope keys, stages them
as a session would (post-rope: as stored, moved by the difference when re-placed; pre-rope: rotated by
the model's ``place_keys`` at the position chosen) at two places — ``native`` (each chunk's own
position) and ``re-placed`` (every chunk just before the window, as ``rerotate`` does past the horizon)
— and compares with the same keys at full precision, pooled over chunks, layers and heads:

* ``key_rel`` — ‖K̂ − K‖ / ‖K‖ of the staged keys;
* ``logit_rel`` / ``logit_max`` — the last chunk's attention logits q·k/√D over the memory, relative and
  largest absolute error;
* ``out_rel`` — ‖Ô − O‖ / ‖O‖ of its attention output over the memory (values quantised alike both ways).

:func:`frame_psnr` runs whole sessions (int4 post-rope, int4 pre-rope, the kv16 reference) and gives each
int4 run's PSNR against the reference, pooled over all frames. Nothing here prints or asserts (the CLI
formats; benchmarks are never tests).
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.facts.kv_format import ChunkFormat
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into

KV = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Captured:
    model: object                       # the MG2 pipeline (its place_keys / rotate_time)
    raw: list[list[torch.Tensor]]       # [chunk][layer] keys before the rotation, [1, T, H, D]
    rotated: list[list[torch.Tensor]]   # [chunk][layer] keys as attended (own positions)
    values: list[list[torch.Tensor]]    # [chunk][layer] values
    queries: list[torch.Tensor]         # [layer] the last chunk's queries, [1, T, H, D], rotated
    offset_latent: float                # rerotate's offset, in latent frames


def _session_model(model: str, chunks: int, seed: int, device: torch.device, dtype: torch.dtype):
    from engine.io.image import default_start_image_path, load_image
    from engine.model.registry import build_world_model, model_spec
    from engine.settings.overlay import resolve_session_config
    from engine.session.observe import session_path

    cfg = resolve_session_config(None, {"model": model, "chunks": chunks, "seed": seed,
                                        "memory": {"keys": "pre-rope"}})
    spec = model_spec(cfg)
    image = load_image(default_start_image_path(), *spec.image_size)
    built = build_world_model(cfg, image, session_path(cfg, spec).trajectory, device, dtype)
    return cfg, built


@torch.no_grad()
def capture_keys(model: str = "micro", chunks: int = 8, seed: int = 0, device: str = "cpu") -> Captured:
    from engine.model.kv_context import AttentionContext

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    cfg, pipeline = _session_model(model, chunks, seed, dev, dtype)
    ctx = AttentionContext(pipeline.layout, keys_before_rotation=True, dtype=dtype, device=dev)
    pipeline.prepare_context(ctx)
    queries: dict[int, torch.Tensor] = {}

    def keep_queries(layer: int):
        def hook(module, args):   # SelfAttention(x, grid, start_frame, rope, state): the forward's own q
            x, grid, start_frame, rope = args[:4]   # LingBot's self-attention takes the same four first
            queries[layer] = rope.apply(module.queries(x), start_frame, *grid).clone()
        return hook

    dit = pipeline.dit if hasattr(pipeline, "dit") else pipeline.models.dit   # LingBot's, or MG2's
    hooks = [block.self_attn.register_forward_pre_hook(keep_queries(i)) for i, block in enumerate(dit.blocks)]
    raw, rotated, values = [], [], []
    try:
        for chunk in range(chunks):
            pipeline.denoise(chunk, ctx)   # its last forward is the clean pass: the queries kept are its
            raw.append([k.clone() for k, _ in ctx.stored_kv()])
            rotated.append([k.clone() for k, _ in ctx.current_kv()])
            values.append([v.clone() for _, v in ctx.current_kv()])
            ctx.commit()
    finally:
        for h in hooks:
            h.remove()
    video_per_latent = pipeline.grid.frames_per_chunk / pipeline.layout.frames_per_chunk
    return Captured(pipeline, raw, rotated, values, [queries[i] for i in range(len(dit.blocks))],
                    cfg.rerotate_offset_frames / video_per_latent)


def _round_trip(kv: KV, fmt: ChunkFormat) -> KV:
    block = torch.empty(fmt.slot_bytes, dtype=torch.uint8, device=kv[0][0].device)
    quantize_chunk_into(kv, fmt, block)
    out = [(torch.empty_like(k), torch.empty_like(v)) for k, v in kv]
    dequantize_chunk_into(block, fmt, out)
    return out


def _staged(cap: Captured, fmt: ChunkFormat, keys: str, place: str) -> tuple[list[KV], list[KV]]:
    """Per memory chunk, per layer: (staged keys, values) after the round trip, and the full-precision
    ones at the same positions."""
    model, f = cap.model, cap.model.layout.frames_per_chunk
    last = len(cap.raw) - 1
    target = last * f - cap.offset_latent - f
    got, want = [], []
    for c in range(last):
        stored = cap.raw[c] if keys == "pre-rope" else cap.rotated[c]
        back = _round_trip(list(zip(stored, cap.values[c])), fmt)
        at = float(c * f) if place == "native" else target
        chunk_got, chunk_want = [], []
        for layer, (k, v) in enumerate(back):
            if keys == "pre-rope":
                k = model.place_keys(layer, k, at)
            elif at != c * f:
                k = model.rotate_time(layer, k, at - c * f)
            chunk_got.append((k, v))
            chunk_want.append((model.place_keys(layer, cap.raw[c][layer], at), cap.values[c][layer]))
        got.append(chunk_got)
        want.append(chunk_want)
    return got, want


def _memory(kv_chunks: list[KV], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's memory K/V, [H, N, D] float64 (every memory chunk's tokens)."""
    k = torch.cat([c[layer][0] for c in kv_chunks], dim=1)[0].transpose(0, 1).double()
    v = torch.cat([c[layer][1] for c in kv_chunks], dim=1)[0].transpose(0, 1).double()
    return k, v


def key_retention(cap: Captured, bits: int = 4, keys: str = "post-rope", place: str = "native",
                  max_queries: int = 512) -> dict:
    """Errors of the staged memory against full precision (see the module docstring); the last chunk's
    queries are taken at an even stride, at most ``max_queries`` of them (the logits of a full-size chunk
    against its memory would not fit a small machine)."""
    layout = cap.model.layout
    fmt = ChunkFormat.from_layout(layout, bits=bits, raw_dtype=str(cap.raw[0][0].dtype).removeprefix("torch."))
    got, want = _staged(cap, fmt, keys, place)
    sums = dict.fromkeys(("dk", "k", "dl", "l", "do", "o"), 0.0)
    logit_max = 0.0
    for layer, q in enumerate(cap.queries):
        stride = -(-q.shape[1] // max_queries)
        qh = q[0, ::stride].transpose(0, 1).double()             # [H, Tq, D]
        (kg, vg), (kw, vw) = _memory(got, layer), _memory(want, layer)
        scale = 1.0 / math.sqrt(qh.shape[-1])
        lg, lw = qh @ kg.transpose(1, 2) * scale, qh @ kw.transpose(1, 2) * scale   # [H, Tq, N]
        og, ow = torch.softmax(lg, -1) @ vg, torch.softmax(lw, -1) @ vw
        for name, a, b in (("k", kg, kw), ("l", lg, lw), ("o", og, ow)):
            sums["d" + name] += (a - b).pow(2).sum().item()
            sums[name] += b.pow(2).sum().item()
        logit_max = max(logit_max, (lg - lw).abs().max().item())
    rel = lambda n: math.sqrt(sums["d" + n] / sums[n]) if sums[n] else 0.0  # noqa: E731
    return {"keys": keys, "place": place, "bits": bits, "key_rel": rel("k"), "logit_rel": rel("l"),
            "logit_max": logit_max, "out_rel": rel("o"), "memory_chunks": len(got), "layers": layout.layers}


class RopePlacement:
    """The staging side of an MG2 configuration without its network: its layout and its 3D RoPE, placed
    exactly as ``MG2Pipeline.place_keys`` / ``rotate_time`` do (for keys that no run produced)."""

    def __init__(self, cfg):
        from engine.model.rope import DiTRope

        self.cfg, self.layout = cfg, cfg.kv_layout()
        self.rope = DiTRope(cfg.dit.head_dim, cfg.dit.rope_split, cfg.dit.rope_theta)
        _, ph, pw = cfg.dit.patch_size
        self.grid = (cfg.sampler.frames_per_chunk, cfg.latent_height // ph, cfg.latent_width // pw)

    def place_keys(self, layer: int, keys: torch.Tensor, start_frame: float) -> torch.Tensor:
        return self.rope.apply_at(keys, start_frame, *self.grid)

    def rotate_time(self, layer: int, keys: torch.Tensor, delta_frames: float) -> torch.Tensor:
        return self.rope.rotate_time(keys, delta_frames)


def synthetic_keys(model: str = "mg2-universal", chunks: int = 4, seed: int = 0, outlier_channels: int = 8,
                   outlier_scale: float = 10.0, layers: int = 1) -> Captured:
    """Keys and queries of the shape of ``model``'s chunks with the channel structure KIVI reports for
    trained transformers' keys: every channel its own mean and scale (log-normal), and a few outlier
    channels per head ``outlier_scale`` times larger, at unit RMS per head (MG2 normalises keys by their
    RMS); queries and values standard normal. Rotated with the
    configuration's own RoPE at each chunk's position. For a model whose weights are not here (the
    seeded ones give keys without that structure)."""
    from engine.config import model_config

    cfg = model_config(model)
    placement = RopePlacement(cfg)
    lay = placement.layout
    gen = torch.Generator().manual_seed(seed)
    shape = (1, lay.tokens_per_chunk, lay.heads, lay.head_dim)   # [1, T, H, D]

    def channel_stats() -> tuple[torch.Tensor, torch.Tensor]:
        scale = torch.exp(0.5 * torch.randn(lay.heads, lay.head_dim, generator=gen))
        picks = torch.rand(lay.heads, lay.head_dim, generator=gen).argsort(dim=1)[:, :outlier_channels]
        scale.scatter_(1, picks, scale.gather(1, picks) * outlier_scale)
        mean = torch.randn(lay.heads, lay.head_dim, generator=gen) * scale
        rms = (mean.pow(2) + scale.pow(2)).mean(dim=1, keepdim=True).sqrt()   # unit RMS per head, as
        return mean / rms, scale / rms                                         # after MG2's RMS norm

    stats = [channel_stats() for _ in range(layers)]
    f = lay.frames_per_chunk
    raw, rotated, values = [], [], []
    for c in range(chunks):
        k = [mean + scale * torch.randn(shape, generator=gen) for mean, scale in stats]
        raw.append(k)
        rotated.append([placement.place_keys(i, x, float(c * f)) for i, x in enumerate(k)])
        values.append([torch.randn(shape, generator=gen) for _ in range(layers)])
    queries = [placement.place_keys(i, torch.randn(shape, generator=gen), float((chunks - 1) * f))
               for i in range(layers)]
    placement.layout = dataclasses.replace(lay, layers=layers)
    video_per_latent = cfg.video_grid().frames_per_chunk / f
    return Captured(placement, raw, rotated, values, queries, 30.0 / video_per_latent)


def frame_psnr(model: str = "micro", chunks: int = 12, positions: str = "rerotate", bits: int = 4,
               seed: int = 0, trajectory: Path | None = None) -> dict:
    """PSNR (dB, pooled over every frame, values in [-1, 1]) of int4 sessions with post- and pre-rope
    keys against the kv16 session; memory through an on-demand store with a small pool and a spill."""
    from engine.settings.overlay import resolve_session_config
    from engine.session.loop import Session

    def frames(root: Path, name: str, kv_bits: int, keys: str) -> torch.Tensor:
        cfg = resolve_session_config(None, {
            "model": model, "device": "cpu", "chunks": chunks, "seed": seed, "positions": positions,
            "save_every": 0, "out": str(root / f"{name}.mp4"),
            **({"trajectory": str(trajectory)} if trajectory is not None else {}),
            "memory": {"store": "on-demand", "kv_bits": kv_bits, "retrieve_k": 3, "pool_slots": 8,
                       "spill": str(root / f"{name}-spill"), "keys": keys}})
        session = Session(cfg)
        kept: list[torch.Tensor] = []
        write = session.writer.write

        def capture(video: torch.Tensor) -> None:
            kept.append(video.float().clone())
            write(video)
        session.writer.write = capture
        session.run()
        return torch.cat(kept)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = frames(root, "kv16", 16, "post-rope")
        out = {"model": model, "chunks": chunks, "positions": positions, "bits": bits}
        for keys in ("post-rope", "pre-rope"):
            mse = (frames(root, keys, bits, keys) - reference).double().pow(2).mean().item()
            out[keys] = math.inf if mse == 0 else 10 * math.log10(4.0 / mse)
    return out
