"""The arena model's network: a causal DiT over pixel patches with camera-ray features and a copy head.

Owns the math of one forward, in two equivalent forms:

* ``chunk_forward`` — inference, one chunk at a time through the caller-owned attention context
  (``engine.model.kv_context``): layer l writes the chunk's K/V (keys after the time rotation) into
  ``ctx.layers[l]`` and attends [memory | window | current]; the extra last layer is the **copy
  layer**: keys are the tokens' camera-ray features (projected), values are their pixel patches, and
  the copy head reads it over [memory | window] only.
* ``train_forward`` — training, a batch of whole episodes in one pass with two streams: a clean stream
  at t = 0 (the KV every chunk leaves behind, as the clean pass writes it) and a noisy stream carrying
  the loss; each chunk of each stream attends the clean K/V of its context chunks (memory slots, possibly
  time-shifted as ``rerotate`` would, and the previous chunk) and its own tokens. This is the same
  computation as ``chunk_forward`` chunk by chunk (tested to 1e-5).

Tokens: each ``patch x patch`` pixel patch of a latent frame is one token: a linear embedding plus a
learned spatial position plus a projection of its **camera-ray features** (Fourier features of the
camera position, harmonics of the ray's heading and elevation through the patch centre), which is how a
query lines up with the matching part of a retrieved chunk. Conditioning (adaLN-zero, per latent frame):
the flow-matching time plus the frame's action (keys and mouse). Attention: RMS-normed queries/keys,
rotary time positions on the first ``rope_time_dims`` channels of each head. Output: x0 in pixel
patches; a per-token gate mixes in what the copy head fetched. Two options of the output
(``ArenaModelConfig``): ``warp`` adds a third source, the window's last frame warped pixel for pixel to
each frame's camera (``engine.arena.warp``; exact for a turn, nearest sampling), mixed per pixel by a
softmax over (generated, copied, warped); ``depth_head`` adds a per-pixel inverse-depth output (trained
against the renderer's depth; at inference with ``reproject_depth`` the pipeline stores it beside each
chunk's pixels in the depth layer and context frames are re-projected with it from anywhere:
``engine.arena.depth_reproject``; ``depth_kind``: a linear map of the final features, or a small conv net
over the x0's pixels, ``engine.arena.depth_net``); ``hypotheses`` > 1 gives each token several candidate
patches and a categorical over them (trained winner-takes-all: each candidate becomes one sharp mode
instead of their average), and the likeliest is kept. At inference, given its context frames' cameras
(``ChunkInputs.ctx_cam``), ``chunk_forward`` re-projects the pixels of context frames seen from the same
place into the x0 (``engine.arena.reproject``; ``ArenaModelConfig.reproject``, on by default).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from engine.arena import codebook
from engine.arena import depth_reproject
from engine.arena.config import ACTION_DIM, ArenaModelConfig
from engine.arena.depth_net import DepthNet
from engine.arena.patches import patchify, unpatchify
from engine.arena.reproject import reproject
from engine.arena.warp import warp_frames
from engine.model.weight_stream import blocks_in_order


# ---------------------------------------------------------------- geometry, time

def ray_geometry(cam: torch.Tensor, cfg: ArenaModelConfig) -> torch.Tensor:
    """Camera-ray features ``[..., tokens_per_frame, geom_dim]`` of camera states ``[..., 4]`` =
    (x, z, yaw, pitch) in world units and degrees."""
    dev = cam.device
    tan_h = math.tan(math.radians(cfg.hfov) / 2)
    tan_v = tan_h * cfg.height / cfg.width
    u = ((torch.arange(cfg.cols, device=dev) + 0.5) / cfg.cols * 2 - 1) * tan_h
    v = (1 - (torch.arange(cfg.rows, device=dev) + 0.5) / cfg.rows * 2) * tan_v
    col_angle = torch.atan(u).repeat(cfg.rows)                          # [N] radians
    row_angle = torch.atan(v).repeat_interleave(cfg.cols)               # [N]
    x, z, yaw, pitch = (cam[..., i:i + 1] for i in range(4))            # [..., 1]
    octaves = 2 * math.pi * (2.0 ** torch.arange(cfg.pos_freqs, device=dev)) / cfg.pos_period
    pos = torch.cat([x * octaves, z * octaves], dim=-1)                 # [..., 2P]
    pos = torch.cat([pos.sin(), pos.cos()], dim=-1)                     # [..., 4P]
    heading = torch.deg2rad(yaw) + col_angle                            # [..., N]
    elevation = torch.deg2rad(pitch) + row_angle
    m = torch.arange(1, cfg.ray_harmonics + 1, device=dev)
    e = torch.arange(1, cfg.elev_harmonics + 1, device=dev)
    hx = heading[..., None] * m
    ex = elevation[..., None] * e
    ray = torch.cat([hx.sin(), hx.cos(), ex.sin(), ex.cos()], dim=-1)   # [..., N, 2M + 2E]
    pos = pos[..., None, :].expand(*ray.shape[:-1], pos.shape[-1])
    return torch.cat([pos, ray], dim=-1)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features ``[..., dim]`` of flow times t in [0, 1]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
    args = (t[..., None] * 1000.0) * freqs
    return torch.cat([args.cos(), args.sin()], dim=-1)


class TimeRope:
    """Rotary time positions on the first ``dims`` channels of each head (float64 angles)."""

    def __init__(self, dims: int, theta: float):
        self.dims = dims
        # Explicit CPU device: a model built under ``torch.device("meta")`` still gets a real table.
        self.inv_freq = 1.0 / torch.pow(theta, torch.arange(0, dims, 2, dtype=torch.float64, device="cpu") / dims)

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) ``[..., T, 1, P]`` of latent-frame ``positions [..., T]``, for ``apply``."""
        ang = positions.to(torch.float64)[..., None] * self.inv_freq.to(positions.device)   # [..., T, P]
        return ang.cos().to(dtype)[..., None, :], ang.sin().to(dtype)[..., None, :]

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [..., T, H, D]`` by latent-frame ``positions`` broadcastable to ``[..., T]``."""
        return self.apply(x, self.tables(positions.to(x.device), x.dtype))

    def apply(self, x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        cos, sin = tables
        rot, rest = x[..., :self.dims], x[..., self.dims:]
        pairs = rot.unflatten(-1, (-1, 2))
        a, b = pairs[..., 0], pairs[..., 1]
        rot = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        return torch.cat([rot, rest], dim=-1)


# ---------------------------------------------------------------- the network

class ChunkInputs(NamedTuple):
    """Per-chunk tensors shared by the chunk's forwards (see ``ArenaDiT.chunk_inputs``)."""

    geom: torch.Tensor                          # [B, F, N, G] camera-ray features
    action_emb: torch.Tensor                    # [B, F, d]
    tables: tuple[torch.Tensor, torch.Tensor]   # rotary (cos, sin) of the chunk's tokens
    copy_k: torch.Tensor                        # [B, T, H, hd] copy-layer keys
    cam: torch.Tensor | None = None             # [B, F, 4] the chunk's cameras (the warp's targets)
    prev_cam: torch.Tensor | None = None        # [B, 4] the camera of the window's last frame (the warp's source)
    ctx_cam: torch.Tensor | None = None         # [B, S, 4] the cameras of the context's frames, copy-layer order
    reproject: float = 0.0                      # re-projection radius (engine.arena.reproject; 0: off)
    ctx_time: torch.Tensor | None = None        # [B, S] latent-frame index of each context frame
    depth: bool = False                         # re-project with the stored depth (engine.arena.depth_reproject)

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, cfg: ArenaModelConfig):
        super().__init__()
        d, hd = cfg.dim, cfg.head_dim
        self.heads = cfg.heads
        self.norm1 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(d, 3 * d)
        self.q_norm, self.k_norm = RMSNorm(hd), RMSNorm(hd)
        self.o = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d), nn.GELU(approximate="tanh"),
                                 nn.Linear(cfg.mlp_ratio * d, d))
        self.mod = nn.Linear(d, 6 * d)
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def modulation(self, cond: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(shift, scale, gate) x 2, each ``[..., F, 1, d]``, from per-frame conditioning ``[..., F, d]``
        (computed once per frame, broadcast over the frame's tokens)."""
        return tuple(m.unsqueeze(-2) for m in self.mod(F.silu(cond)).chunk(6, dim=-1))

    def qkv_of(self, h: torch.Tensor, shift, scale, rope: TimeRope, tables):
        x = modulate(self.norm1(h), shift, scale)
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, -1)).unbind(-3)  # [..., T, H, hd]
        return rope.apply(self.q_norm(q), tables), rope.apply(self.k_norm(k), tables), v

    def finish(self, h: torch.Tensor, attn: torch.Tensor, gate1, shift2, scale2, gate2) -> torch.Tensor:
        h = h + gated(self.o(attn.flatten(-2)), gate1)
        return h + gated(self.mlp(modulate(self.norm2(h), shift2, scale2)), gate2)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Tokens ``[..., F*N, d]`` modulated per frame by ``[..., F, 1, d]`` shift and scale."""
    frames = x.unflatten(-2, (shift.shape[-3], -1))
    return (frames * (1 + scale) + shift).flatten(-3, -2)


def gated(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return (x.unflatten(-2, (gate.shape[-3], -1)) * gate).flatten(-3, -2)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of ``q [B, Tq, H, D]`` over ``k, v [B, Tk, H, D]`` (mask ``[B, Tk]`` bool, True = attend)."""
    m = None if mask is None else mask[:, None, None, :]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=m)
    return out.transpose(1, 2)


class ArenaDiT(nn.Module):
    def __init__(self, cfg: ArenaModelConfig = ArenaModelConfig()):
        super().__init__()
        self.cfg = cfg
        d = cfg.dim
        self.patch_in = nn.Linear(cfg.patch_dim, d)
        self.pos = nn.Parameter(torch.randn(cfg.tokens_per_frame, d) * 0.02)
        self.geom_in = nn.Linear(cfg.geom_dim, d)
        self.t_embed = nn.Sequential(nn.Linear(cfg.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.a_embed = nn.Sequential(nn.Linear(ACTION_DIM, d), nn.SiLU(), nn.Linear(d, d))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_mod = nn.Linear(d, 2 * d)
        self.head = nn.Linear(d, cfg.patch_dim)
        nn.init.zeros_(self.final_mod.weight)
        nn.init.zeros_(self.final_mod.bias)
        # Copy head: geometric keys (the same projection for queries at start: a lookup by ray).
        self.copy_k = nn.Linear(cfg.geom_dim, d, bias=False)
        self.copy_q = nn.Linear(cfg.geom_dim, d, bias=False)
        self.copy_q.weight.data.copy_(self.copy_k.weight.data)
        self.copy_qh = nn.Linear(d, d)
        nn.init.zeros_(self.copy_qh.weight)
        nn.init.zeros_(self.copy_qh.bias)
        self.copy_logit_scale = nn.Parameter(torch.full((cfg.heads,), 3.0))
        self.gate = nn.Linear(d, 1)
        if cfg.warp:                # per-pixel logit of the warped source (starts nearly unused)
            self.warp_gate = nn.Linear(d, cfg.patch * cfg.patch)
            nn.init.zeros_(self.warp_gate.weight)
            nn.init.constant_(self.warp_gate.bias, -4.0)
        if cfg.hypotheses > 1:      # the other candidates and the categorical over all of them
            self.head_extra = nn.Linear(d, (cfg.hypotheses - 1) * cfg.patch_dim)
            self.hyp_logits = nn.Linear(d, cfg.hypotheses)
            nn.init.zeros_(self.hyp_logits.weight)
            nn.init.zeros_(self.hyp_logits.bias)
        if cfg.codebook:            # per token, its sub-patches' logits over the codes (and the codes themselves)
            subs = (cfg.patch // cfg.code_patch) ** 2
            self.code_head = nn.Linear(d, subs * cfg.codebook)
            self.register_buffer("codes", torch.zeros(cfg.codebook, 3 * cfg.code_patch ** 2))
        if cfg.depth_head and cfg.depth_kind == "linear":   # inverse depth (1 / world units; sky 0) per patch pixel
            self.depth_out = nn.Linear(d, cfg.patch * cfg.patch)
            nn.init.zeros_(self.depth_out.weight)
            nn.init.zeros_(self.depth_out.bias)
        elif cfg.depth_head:  # the conv head: inverse depth of a frame's pixels (engine.arena.depth_net)
            self.depth_net = DepthNet(cfg)
        if cfg.observed_depth:  # a wider conv head for observed frames only (engine.arena.observed_depth_train)
            self.observed_depth_net = DepthNet(cfg, cfg.observed_depth)
        self.rope = TimeRope(cfg.rope_time_dims, cfg.rope_theta)

    def init_new_parts(self, missing: list[str], generator: torch.Generator | None = None) -> None:
        """After loading weights of a model without them: extra candidates start as the generated head
        plus a little noise (winner-takes-all then pulls them apart)."""
        if "head_extra.weight" in missing:
            n = self.cfg.hypotheses - 1
            with torch.no_grad():
                w, b = self.head.weight, self.head.bias
                noise = torch.randn((n, *w.shape), generator=generator) * 0.1 * w.std()
                self.head_extra.weight.copy_((w[None] + noise.to(w)).flatten(0, 1))
                self.head_extra.bias.copy_(b.repeat(n))
        if "code_head.weight" in missing:   # codes fitted on training renders; the head starts as their nearest
            self.codes.copy_(codebook.fit_codes(self.cfg))
            codebook.init_head(self.code_head, self.head, self.codes, self.cfg)

    # ---- shared pieces (shapes: [..., F, ...] per frame, [..., T, ...] per token with T = F * N)

    def embed(self, frames: torch.Tensor, geom: torch.Tensor) -> torch.Tensor:
        """Frames ``[..., F, 3, H, W]`` + ray features ``[..., F, N, G]`` -> tokens ``[..., F*N, d]``."""
        x = self.patch_in(patchify(frames, self.cfg.patch)) + self.pos + self.geom_in(geom)
        return x.flatten(-3, -2)

    def condition(self, t: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Per-frame conditioning ``[..., F, d]`` from times ``[...]`` and actions ``[..., F, A]``."""
        return self.condition_embedded(t, self.a_embed(actions))

    def condition_embedded(self, t: torch.Tensor, action_emb: torch.Tensor) -> torch.Tensor:
        emb = timestep_embedding(t.float(), self.cfg.freq_dim).to(action_emb.dtype)   # angles in float32
        return self.t_embed(emb)[..., None, :] + action_emb

    def token_positions(self, start_frame: torch.Tensor) -> torch.Tensor:
        """Latent-frame index of every token of a chunk starting at ``start_frame [...]`` -> ``[..., T]``."""
        f = torch.arange(self.cfg.frames_per_chunk, device=start_frame.device, dtype=torch.float64)
        per_frame = start_frame.to(torch.float64)[..., None] + f
        return per_frame.repeat_interleave(self.cfg.tokens_per_frame, dim=-1)

    def copy_keys(self, geom: torch.Tensor) -> torch.Tensor:
        """Copy-layer keys ``[..., T, H, hd]`` from ray features ``[..., F, N, G]``."""
        return self.copy_k(geom).flatten(-3, -2).unflatten(-1, (self.cfg.heads, -1))

    def copy_values(self, frames: torch.Tensor) -> torch.Tensor:
        """Copy-layer values: the pixel patches ``[..., T, H, hd]`` of frames ``[..., F, 3, H, W]``."""
        return patchify(frames, self.cfg.patch).flatten(-3, -2).unflatten(-1, (self.cfg.heads, -1))

    def output(self, h: torch.Tensor, cond: torch.Tensor, geom: torch.Tensor, copy_k: torch.Tensor | None,
               copy_v: torch.Tensor | None, copy_mask: torch.Tensor | None,
               warp: tuple[torch.Tensor, torch.Tensor] | None = None,
               parts: dict | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x0 candidates ``[B, T, hypotheses, patch_dim]`` and their logits ``[B, T, hypotheses]`` (None
        for one): the generated patch mixed with what the copy head fetched and, with ``warp``
        (warped patches ``[B, T, patch_dim]``, valid pixels ``[B, T, patch**2]``), the warped pixels.
        ``parts`` (training): filled with the generated candidates, the copy gate's logits, which rows
        have context and what a hard copy would fetch (no gradient), for a loss on the copy decision, and
        with a depth head the predicted inverse depth ``inv_depth [B, T, patch**2]``."""
        cfg = self.cfg
        shift, scale = (m.unsqueeze(-2) for m in self.final_mod(F.silu(cond)).chunk(2, dim=-1))
        z = modulate(self.final_norm(h), shift, scale)
        gen = self.head(z)[..., None, :]                                        # [B, T, 1, P]
        logits = None
        if cfg.depth_head and cfg.depth_kind == "linear" and parts is not None:
            parts["inv_depth"] = self.depth_out(z)                              # [B, T, patch**2]
        if cfg.codebook:
            code_logits = self.code_head(z)                                     # [B, T, S * codes]
            if parts is not None:
                parts["code_logits"] = code_logits
            if not self.training:   # a real patch per sub-patch: its likeliest code
                gen = codebook.decode(code_logits, self.codes, cfg)[..., None, :]
        if cfg.hypotheses > 1:
            extra = self.head_extra(z).unflatten(-1, (cfg.hypotheses - 1, cfg.patch_dim))
            gen = torch.cat([gen, extra], dim=-2)                                # [B, T, K, P]
            logits = self.hyp_logits(z)
        fetched, has_copy = self._fetch(h, geom, copy_k, copy_v, copy_mask)
        if parts is not None and fetched is not None:
            with torch.no_grad():
                hard = self._fetch(h, geom, copy_k, copy_v, copy_mask, hard=True)[0]
            parts.update(gen=gen, gate=self.gate(h), has=has_copy, hard=hard)
        if warp is None:
            if fetched is None:
                return gen, logits
            g = torch.sigmoid(self.gate(h))
            if self.cfg.hard_copy and not self.training:
                g = (g > 0.5).to(g.dtype)
            if has_copy is not None:
                g = g * has_copy.to(g.dtype)
            return gen + g[..., None, :] * (fetched[..., None, :] - gen), logits
        warped, valid = warp
        pixels = cfg.patch * cfg.patch
        zero = torch.zeros(*h.shape[:-1], pixels, dtype=h.dtype, device=h.device)
        l_copy = (self.gate(h).expand_as(zero) if fetched is not None else torch.full_like(zero, -math.inf))
        if has_copy is not None:
            l_copy = l_copy.masked_fill(~has_copy, -math.inf)
        l_warp = self.warp_gate(h).masked_fill(~valid, -math.inf)
        w = torch.softmax(torch.stack([zero, l_copy, l_warp], dim=-1), dim=-1)  # [B, T, pixels, 3]
        w = w.repeat(1, 1, 3, 1)[..., None, :, :]                               # [B, T, 1, P, 3] (channel-major P)
        out = w[..., 0] * gen + w[..., 2] * warped[..., None, :]
        if fetched is not None:
            out = out + w[..., 1] * fetched[..., None, :]
        return out, logits

    def _fetch(self, h, geom, copy_k, copy_v, copy_mask, hard: bool = False):
        """What the copy head fetched ``[B, T, P]`` (None without context) and which rows have any
        context ``[B, 1, 1]`` bool (None: all)."""
        if copy_k is None or copy_k.shape[1] == 0:
            return None, None
        cfg = self.cfg
        q = (self.copy_q(geom).flatten(-3, -2) + self.copy_qh(self.final_norm(h))).unflatten(-1, (cfg.heads, -1))
        q = q * self.copy_logit_scale.exp()[:, None] / math.sqrt(cfg.head_dim)
        m, has = None, None
        if copy_mask is not None:
            # Rows without any context (chunk 0) would softmax over nothing: let them see token 0
            # and zero their gate.
            has = copy_mask.any(-1, keepdim=True)[:, None, :]
            m = copy_mask.clone()
            m[:, 0] |= ~copy_mask.any(-1)
            m = m[:, None, None, :]
        if hard or (self.cfg.hard_copy and not self.training):
            return self._fetch_hard(q, copy_k, copy_v, m), has
        fetched = F.scaled_dot_product_attention(q.transpose(1, 2), copy_k.transpose(1, 2), copy_v.transpose(1, 2),
                                                 attn_mask=m, scale=1.0).transpose(1, 2).flatten(-2)
        return fetched, has

    @staticmethod
    def _fetch_hard(q, k, v, mask) -> torch.Tensor:
        """Per token the value of the one key its heads attend most (their attention averaged), whole: a
        real patch, never a blend of several nor a mosaic of the heads' choices."""
        scores = torch.einsum("bthd,bshd->bhts", q, k)                              # [B, H, T, S]
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        best = scores.softmax(-1).mean(1).argmax(-1)                               # [B, T]
        b = torch.arange(v.shape[0], device=v.device)[:, None]
        return v[b, best].flatten(-2)                                              # [B, T, P]

    @staticmethod
    def likeliest(x0: torch.Tensor, logits: torch.Tensor | None) -> torch.Tensor:
        """Per token the candidate with the highest logit: ``[B, T, K, P]`` -> ``[B, T, P]``."""
        if logits is None:
            return x0[..., 0, :]
        pick = logits.argmax(-1)[..., None, None].expand(*x0.shape[:-2], 1, x0.shape[-1])
        return x0.gather(-2, pick)[..., 0, :]

    def warp_patches(self, src: torch.Tensor, src_cam: torch.Tensor, cam: torch.Tensor,
                     ok: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``src [B, 3, H, W]`` warped to the cameras ``cam [B, F, 4]`` from ``src_cam [B, 4]``, as tokens:
        patches ``[B, F*N, P]`` and valid pixels ``[B, F*N, patch**2]`` (``ok [B]``: sources that exist)."""
        p = self.cfg.patch
        frames, valid = warp_frames(src, src_cam, cam, self.cfg.hfov)
        if ok is not None:
            valid = valid & ok[:, None, None, None]
        patches = patchify(frames, p).flatten(-3, -2)
        return patches, patchify(valid[:, :, None].to(frames.dtype), p).flatten(-3, -2) > 0.5

    # ---- inference: one chunk through the attention context

    def chunk_inputs(self, actions: torch.Tensor, cam: torch.Tensor, start_frame: int,
                     prev_cam: torch.Tensor | None = None, ctx_cam: torch.Tensor | None = None,
                     reproject: float = 0.0, ctx_time: torch.Tensor | None = None, depth: bool = False) -> ChunkInputs:
        """What every forward of one chunk shares: ray features, action embedding, rotary tables, copy keys,
        the cameras (and ``prev_cam [B, 4]``, the window's last frame's: the warp's source; ``ctx_cam
        [B, S, 4]``, those of the context's frames in the copy layer's order, with the ``reproject``
        radius: the re-projection's sources; with ``depth``, re-projection with the depth layer's depth, the
        context frames' latent-frame indices ``ctx_time [B, S]`` ranking them).

        ``actions`` come in the model's dtype; the ray features are computed from ``cam`` in float32 and
        then cast to it (in bf16 a position of a few world units times the highest octave's frequency
        is an angle bf16 cannot resolve)."""
        dtype = actions.dtype
        geom = ray_geometry(cam.float(), self.cfg).to(dtype)                   # [B, F, N, G]
        pos = self.token_positions(torch.full((cam.shape[0],), float(start_frame), device=cam.device))
        return ChunkInputs(geom, self.a_embed(actions), self.rope.tables(pos, dtype), self.copy_keys(geom),
                           cam.float(), None if prev_cam is None else prev_cam.float(),
                           None if ctx_cam is None else ctx_cam.float(), float(reproject), ctx_time, depth)

    def _window_warp(self, copy_state, inputs: ChunkInputs) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The window's last frame (the copy layer's stored pixels) warped to the chunk's cameras."""
        cfg = self.cfg
        if not cfg.warp or inputs.prev_cam is None or inputs.cam is None:
            return None
        _, v_win = copy_state.window()                                         # [B, Nw, H, hd]
        v_win = v_win.to(inputs.cam.device)   # --kv-paging layer: the window waits on the host
        if v_win.shape[1] < cfg.tokens_per_frame:
            return None
        last = v_win[:, -cfg.tokens_per_frame:].flatten(-2)                    # [B, N, P]
        src = unpatchify(last, cfg.patch, cfg.height, cfg.width)
        patches, valid = self.warp_patches(src, inputs.prev_cam, inputs.cam)
        return patches.to(v_win.dtype), valid

    def chunk_forward(self, frames: torch.Tensor, t: torch.Tensor, inputs: ChunkInputs, ctx,
                      output: bool = True, with_depth: bool = False):
        """x0 ``[B, F, 3, H, W]`` for input frames ``[B, F, 3, H, W]`` at flow time ``t [B]``.

        Writes the chunk's K/V (and copy-layer K/V) into the context's current region; ``ctx.commit()``
        by the caller makes them history. ``output=False`` (the clean pass) only writes the K/V: the
        last layer's attention and MLP, the copy head and the output head feed nothing stored, so they
        are skipped and None is returned. ``with_depth`` (a depth head): returns ``(x0, inverse depth
        [B, F, H, W])``, the head's, or where depth re-projection replaced a pixel the depth it moved."""
        cfg = self.cfg
        h = self.embed(frames, inputs.geom)
        cond = self.condition_embedded(t, inputs.action_emb)
        for i, (block, state) in enumerate(zip(blocks_in_order(self.blocks), ctx.layers)):
            s1, sc1, g1, s2, sc2, g2 = block.modulation(cond)
            q, k, v = block.qkv_of(h, s1, sc1, self.rope, inputs.tables)
            state.self_kv.write_current(k, v)
            if not output and i == cfg.layers - 1:
                break
            k_ctx, v_ctx = state.self_kv.context()
            h = block.finish(h, _attend(q, k_ctx, v_ctx), g1, s2, sc2, g2)
        copy_state = ctx.layers[cfg.layers].self_kv
        copy_state.write_current(inputs.copy_k, self.copy_values(frames))
        if not output:
            return None
        k_all, v_all = copy_state.context()
        n_ctx = k_all.shape[1] - cfg.tokens_per_chunk
        x0, logits = self.output(h, cond, inputs.geom, k_all[:, :n_ctx], v_all[:, :n_ctx], None,
                                 self._window_warp(copy_state, inputs))
        x0 = self.likeliest(x0, logits)
        x0 = unpatchify(x0.unflatten(1, (cfg.frames_per_chunk, -1)), cfg.patch, cfg.height, cfg.width)
        inv = None
        late = with_depth and inputs.depth and cfg.depth_kind == "conv"   # after the splat, where it leaves holes
        if with_depth and not late:   # the linear head reads the final features, the conv head the x0
            inv = self.inverse_depth(h, cond) if cfg.depth_kind == "linear" else self.frame_depth(x0, inputs.cam)
        if inputs.depth:
            x0, inv = self._depth_reprojected(x0, inv, v_all[:, :n_ctx], ctx, inputs, late)
        else:
            x0 = self._reprojected(x0, v_all[:, :n_ctx], inputs)
        return (x0, inv) if with_depth else x0

    def inverse_depth(self, h: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """The depth head's inverse depth ``[B, F, H, W]`` of the final hidden states ``h [B, T, d]``."""
        cfg = self.cfg
        assert cfg.depth_head, "inverse depth needs the depth head"
        shift, scale = (m.unsqueeze(-2) for m in self.final_mod(F.silu(cond)).chunk(2, dim=-1))
        inv = self.depth_out(modulate(self.final_norm(h), shift, scale))                # [B, T, p*p]
        inv = inv.unflatten(1, (cfg.frames_per_chunk, -1))
        return unpatchify(torch.cat([inv] * 3, -1), cfg.patch, cfg.height, cfg.width)[:, :, 0]

    def frame_depth(self, frames: torch.Tensor, cam: torch.Tensor) -> torch.Tensor:
        """The conv depth head's inverse depth ``[B, F, H, W]`` of frames ``[B, F, 3, H, W]`` seen from
        ``cam [B, F, 4]`` (an observed chunk's truth, or a generated chunk's x0)."""
        assert self.cfg.depth_head and self.cfg.depth_kind == "conv", "frame depth needs the conv depth head"
        return self.depth_net(frames, cam.to(frames.device))

    def observed_frame_depth(self, frames: torch.Tensor, cam: torch.Tensor) -> torch.Tensor:
        """Inverse depth ``[B, F, H, W]`` of observed (true) frames: the observed head's where the model has
        one (``observed_depth`` > 0), else the conv depth head's (``frame_depth``)."""
        if self.cfg.observed_depth:
            return self.observed_depth_net(frames, cam.to(frames.device))
        return self.frame_depth(frames, cam)

    def write_depth(self, ctx, inv_depth: torch.Tensor, kind: int) -> None:
        """The chunk's inverse depth ``[B, F, H, W]`` (``kind``: observed or generated) into the context's
        depth layer (``engine.arena.depth_reproject``), beside the K/V the chunk's passes wrote."""
        k, v = depth_reproject.pack(inv_depth, kind, self.cfg)
        state = ctx.layers[self.cfg.layers + 1].self_kv
        state.write_current(k.to(state.k.dtype), v.to(state.v.dtype))

    def _depth_reprojected(self, x0: torch.Tensor, inv: torch.Tensor | None, v_ctx: torch.Tensor, ctx,
                           inputs: ChunkInputs, head: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x0`` with the context frames (pixels ``v_ctx``, depth and kind from the depth layer) moved into
        its views with their depth (``engine.arena.depth_reproject``); ``inv`` where a pixel was moved:
        its depth in the target. Then the frames within the rotation-only radius are warped in over it as
        ``engine.arena.reproject`` does, observed ones last (``depth_reproject.same_place``). ``head``: ``inv``
        is the conv head's of ``x0``, run here on the frames the splat leaves holes in only."""
        cfg = self.cfg
        if inputs.ctx_cam is None or v_ctx.shape[1] == 0:
            return x0, (self.frame_depth(x0, inputs.cam) if head else inv)
        assert len(ctx.layers) > cfg.layers + 1, "depth re-projection needs the context's depth layer"
        d_ctx = ctx.layers[cfg.layers + 1].self_kv.context()[1][:, :v_ctx.shape[1]]
        frames = unpatchify(v_ctx.flatten(-2).unflatten(1, (-1, cfg.tokens_per_frame)), cfg.patch, cfg.height,
                            cfg.width)
        if frames.shape[1] != inputs.ctx_cam.shape[1]:
            raise ValueError(f"{frames.shape[1]} context frames but {inputs.ctx_cam.shape[1]} context cameras")
        ctx_inv, kind = depth_reproject.unpack(d_ctx, cfg)
        # then frames from the very same place (depth_reproject.same_place_radius): exact for a turn, no splat
        out, hit, z = depth_reproject.reproject_with_depth(x0, frames, ctx_inv, kind, inputs.ctx_time, inputs.ctx_cam,
                                                           inputs.cam, cfg.hfov,
                                                           depth_reproject.same_place_radius(inputs.reproject))
        if head:
            cam = inputs.cam.to(x0.device)
            inv = depth_reproject.moved_inverse_depth(hit, z, x0.dtype,
                                                      lambda need: self.frame_depth(x0[need], cam[need]))
        elif inv is not None:
            inv = torch.where(hit, z.reciprocal().to(inv.dtype), inv)
        return out, inv

    def _reprojected(self, x0: torch.Tensor, v_ctx: torch.Tensor, inputs: ChunkInputs) -> torch.Tensor:
        """``x0 [B, F, 3, H, W]`` with the context frames' pixels (the copy layer's values ``v_ctx``) seen
        from the same place re-projected into it (``engine.arena.reproject``), when asked for."""
        cfg = self.cfg
        if inputs.reproject <= 0 or inputs.ctx_cam is None or v_ctx.shape[1] == 0:
            return x0
        frames = v_ctx.flatten(-2).unflatten(1, (-1, cfg.tokens_per_frame))          # [B, S, N, P]
        if frames.shape[1] != inputs.ctx_cam.shape[1]:
            raise ValueError(f"{frames.shape[1]} context frames but {inputs.ctx_cam.shape[1]} context cameras")
        frames = unpatchify(frames, cfg.patch, cfg.height, cfg.width)
        return reproject(x0, frames, inputs.ctx_cam, inputs.cam, inputs.reproject, cfg.hfov)[0]

    # ---- training: whole episodes, two streams

    def train_forward(self, clean: torch.Tensor, noisy: torch.Tensor, t: torch.Tensor, actions: torch.Tensor,
                      cam: torch.Tensor, start: torch.Tensor, ctx_ids: torch.Tensor,
                      mem_shift: torch.Tensor) -> torch.Tensor:
        """x0 predicted for every noisy chunk, ``[B, C, F, 3, H, W]`` (the likeliest candidate, as
        inference keeps; arguments as ``train_candidates``)."""
        cfg = self.cfg
        x0, logits = self.train_candidates(clean, noisy, t, actions, cam, start, ctx_ids, mem_shift)
        x0 = self.likeliest(x0, logits).unflatten(2, (cfg.frames_per_chunk, -1))
        return unpatchify(x0, cfg.patch, cfg.height, cfg.width)

    def train_candidates(self, clean: torch.Tensor, noisy: torch.Tensor, t: torch.Tensor, actions: torch.Tensor,
                         cam: torch.Tensor, start: torch.Tensor, ctx_ids: torch.Tensor,
                         mem_shift: torch.Tensor, parts: dict | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x0 candidates of every noisy chunk as patches ``[B, C, T, K, P]`` and their logits ``[B, C, T, K]``
        (None for one candidate); ``parts``: see ``output`` (flattened over ``B * C``).

        clean, noisy: ``[B, C, F, 3, H, W]``; t: ``[B, C]`` flow time of each noisy chunk; actions
        ``[B, C, F, A]``; cam ``[B, C, F, 4]``; start ``[B]`` latent-frame index of chunk 0;
        ctx_ids ``[B, C, S]`` context chunks of each chunk (S - 1 memory slots, then the window chunk;
        -1 = empty); mem_shift ``[B, C, S - 1]`` latent frames by which each memory slot's keys are
        moved (0 = stored position; ``rerotate`` moves them near the chunk)."""
        cfg = self.cfg
        b, c = clean.shape[:2]
        s = ctx_ids.shape[-1]
        n_tok = cfg.tokens_per_chunk
        geom = ray_geometry(cam, cfg)                                          # [B, C, F, N, G]
        h_c, h_n = self.embed(clean, geom), self.embed(noisy, geom)            # [B, C, T, d]
        cond_c = self.condition(torch.zeros_like(t), actions)
        cond_n = self.condition(t, actions)
        chunk_start = start[:, None].to(torch.float64) + cfg.frames_per_chunk * torch.arange(c, device=clean.device)
        tables = self.rope.tables(self.token_positions(chunk_start), clean.dtype)   # positions [B, C, T]
        valid = ctx_ids >= 0
        idx = ctx_ids.clamp(min=0)
        gather_b = torch.arange(b, device=clean.device)[:, None, None]
        key_mask = torch.cat([valid.repeat_interleave(n_tok, dim=-1),
                              torch.ones(b, c, n_tok, dtype=torch.bool, device=clean.device)], dim=-1)
        key_mask = key_mask.flatten(0, 1)                                      # [B*C, (S+1) T]
        shift_pos = torch.cat([mem_shift, torch.zeros_like(mem_shift[..., :1])], dim=-1)   # [B, C, S]

        def context(k_all, v_all):
            """Per chunk: its S context chunks' clean K/V [B, C, S*T, H, hd], memory keys shifted."""
            k_ctx, v_ctx = k_all[gather_b, idx], v_all[gather_b, idx]          # [B, C, S, T, H, hd]
            shifted = self.rope.rotate(k_ctx, shift_pos[..., None].expand(*shift_pos.shape, n_tok))
            return shifted.flatten(2, 3), v_ctx.flatten(2, 3)

        for block in self.blocks:
            mc, mn = block.modulation(cond_c), block.modulation(cond_n)
            q_c, k_c, v_c = block.qkv_of(h_c, mc[0], mc[1], self.rope, tables)
            q_n, k_n, v_n = block.qkv_of(h_n, mn[0], mn[1], self.rope, tables)
            k_ctx, v_ctx = context(k_c, v_c)
            outs = []
            for q, k_own, v_own in ((q_c, k_c, v_c), (q_n, k_n, v_n)):
                k = torch.cat([k_ctx, k_own], dim=2).flatten(0, 1)
                v = torch.cat([v_ctx, v_own], dim=2).flatten(0, 1)
                outs.append(_attend(q.flatten(0, 1), k, v, key_mask).unflatten(0, (b, c)))
            h_c = block.finish(h_c, outs[0], mc[2], mc[3], mc[4], mc[5])
            h_n = block.finish(h_n, outs[1], mn[2], mn[3], mn[4], mn[5])
        copy_k = self.copy_keys(geom)[gather_b, idx].flatten(2, 3).flatten(0, 1)       # [B*C, S*T, H, hd]
        copy_v = self.copy_values(clean)[gather_b, idx].flatten(2, 3).flatten(0, 1)
        warp = None
        if cfg.warp:          # the window chunk's last clean frame, warped to each frame's camera
            win, bb = idx[..., -1], gather_b[..., 0]                                   # [B, C]
            src, src_cam = clean[bb, win, -1], cam[bb, win, -1]                        # [B, C, 3, H, W], [B, C, 4]
            patches, ok = self.warp_patches(src.flatten(0, 1), src_cam.flatten(0, 1), cam.flatten(0, 1),
                                            valid[..., -1].flatten())
            warp = (patches, ok)
        x0, logits = self.output(h_n.flatten(0, 1), cond_n.flatten(0, 1), geom.flatten(0, 1), copy_k, copy_v,
                                 key_mask[:, :s * n_tok], warp, parts)
        return x0.unflatten(0, (b, c)), None if logits is None else logits.unflatten(0, (b, c))
