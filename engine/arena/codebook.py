"""The arena model's categorical output: a codebook of the renderer's small patches.

Owns the codebook design (``ArenaModelConfig.codebook`` codes of ``code_patch`` x ``code_patch`` pixels;
each 8 x 8 token is ``(patch / code_patch)**2`` sub-patches, each a choice among the codes): fitting
the codes (k-means over sub-patches of training arenas' renders, deterministic for a seed), the layout
between a token's patch vector and its sub-patches, the choice at inference (the likeliest code of each
sub-patch: a real patch of the renderer, never an average of several), the cross-entropy target (the
code nearest the truth) and the head's start (from the MSE head: the likeliest code at step 0 is the
one nearest the mean it predicts, so fine-tuning starts from the vector-quantised model).

Why: an MSE x0 head averages what it cannot know, and the average is fog; a choice among real patches
stays sharp. What it costs: quantising the truth itself with 1024 codes of 4 x 4 pixels keeps 24.7 dB
and 0.72 of the truth's detail (8 x 8 codes: 21.7 dB, 0.32), the ceiling of this design.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.patches import patchify

FIT_PER_CODE = 500         # sub-patches of training renders per code the k-means sees (1024 codes: 60 episodes)
FIT_ITERATIONS = 25
EPISODE_CHUNKS = 12
INIT_TEMPERATURE = 1.0     # the head's start: logits = -|mean - code|^2 / (2 * this) (the best calibrated at step 0)


def sub_index(cfg: ArenaModelConfig) -> torch.Tensor:
    """``[S, 3 * c * c]``: where each sub-patch's pixels sit in a token's patch vector (channel-major).
    Built once per shape (inference decodes every chunk through it); callers must not write to it."""
    return _sub_index(cfg.patch, cfg.code_patch)


@lru_cache(maxsize=None)
def _sub_index(p: int, c: int) -> torch.Tensor:
    n = p // c
    ch, qy, qx = torch.meshgrid(torch.arange(3), torch.arange(c), torch.arange(c), indexing="ij")
    rows = []
    for sy in range(n):
        for sx in range(n):
            rows.append((ch * p * p + (sy * c + qy) * p + (sx * c + qx)).flatten())
    return torch.stack(rows)


def split(patches: torch.Tensor, cfg: ArenaModelConfig) -> torch.Tensor:
    """Token patches ``[..., P]`` -> sub-patches ``[..., S, 3 c c]``."""
    return patches[..., sub_index(cfg).to(patches.device)]


def join(subs: torch.Tensor, cfg: ArenaModelConfig) -> torch.Tensor:
    """Sub-patches ``[..., S, 3 c c]`` -> token patches ``[..., P]``."""
    order = sub_index(cfg).flatten().to(subs.device)
    out = torch.empty(*subs.shape[:-2], cfg.patch_dim, dtype=subs.dtype, device=subs.device)
    out[..., order] = subs.flatten(-2)
    return out


def nearest(subs: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Index of the code nearest each sub-patch ``[..., D]`` -> ``[...]``."""
    flat = subs.reshape(-1, subs.shape[-1]).to(codes.dtype)
    d = (flat * flat).sum(1, keepdim=True) - 2 * flat @ codes.T + (codes * codes).sum(1)
    return d.argmin(1).view(subs.shape[:-1])


def decode(logits: torch.Tensor, codes: torch.Tensor, cfg: ArenaModelConfig) -> torch.Tensor:
    """Logits ``[..., S * K]`` -> token patches ``[..., P]`` of each sub-patch's likeliest code."""
    pick = logits.unflatten(-1, (-1, cfg.codebook)).argmax(-1)                 # [..., S]
    return join(codes[pick].to(logits.dtype), cfg)


def fit_codes(cfg: ArenaModelConfig, seed: int = 0, iterations: int = FIT_ITERATIONS) -> torch.Tensor:
    """k-means codes ``[K, 3 c c]`` of the sub-patches of training arenas' renders (deterministic)."""
    from engine.arena.data import training_episode

    per_episode = EPISODE_CHUNKS * cfg.frames_per_chunk * (cfg.height * cfg.width) // cfg.code_patch ** 2
    episodes = -(-cfg.codebook * FIT_PER_CODE // per_episode)
    frames = torch.cat([training_episode(seed, 100_000 + e, 0, cfg, EPISODE_CHUNKS, 3, None).frames.flatten(0, 1)
                        for e in range(episodes)])
    subs = patchify(frames, cfg.code_patch).reshape(-1, 3 * cfg.code_patch ** 2)
    gen = torch.Generator().manual_seed(seed)
    codes = subs[torch.randperm(subs.shape[0], generator=gen)[:cfg.codebook]].clone()
    for _ in range(iterations):
        pick = nearest(subs, codes)
        count = torch.bincount(pick, minlength=cfg.codebook).to(subs.dtype)
        total = torch.zeros_like(codes).index_add_(0, pick, subs)
        empty = count == 0          # a code nobody chose takes a random sub-patch
        fresh = subs[torch.randint(0, subs.shape[0], (cfg.codebook,), generator=gen)]
        codes = torch.where(empty[:, None], fresh, total / count.clamp_min(1)[:, None])
    return codes


def init_head(code_head: torch.nn.Linear, head: torch.nn.Linear, codes: torch.Tensor, cfg: ArenaModelConfig) -> None:
    """The code head's start: per sub-patch, the logit of code k is ``-|mean - code_k|^2 / (2 T)`` up to
    a constant, ``mean`` being what the MSE ``head`` predicts there (a linear function of the features)."""
    idx = sub_index(cfg)                                                        # [S, D]
    with torch.no_grad():
        w = head.weight[idx]                                                     # [S, D, d]
        b = head.bias[idx]                                                       # [S, D]
        weight = torch.einsum("kD,sDd->skd", codes, w) / INIT_TEMPERATURE
        bias = (b @ codes.T - 0.5 * (codes * codes).sum(1)) / INIT_TEMPERATURE   # [S, K]
        code_head.weight.copy_(weight.flatten(0, 1))
        code_head.bias.copy_(bias.flatten())
