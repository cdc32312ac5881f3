"""The named GPUs a plan can predict a chunk time for (``worldpager plan --gpu``), and the compute model.

Owns ``GPUS`` — a small table of assumed figures: the card's memory (GiB, as sold) and its dense bf16
tensor throughput with fp32 accumulation (TFLOPS, from the vendors' spec sheets and architecture
whitepapers; none measured here) — and ``compute_s``:

    compute = 2 x DiT parameters x tokens per chunk x passes per chunk / (TFLOPS x EFFICIENCY)

(passes: the denoising steps plus the clean pass that writes the chunk's KV). ``EFFICIENCY`` is one
figure for every card, calibrated so that MG2 universal on an RTX 4090 takes the paper's 1.2 s a chunk
(1.62 G DiT parameters, 2640 tokens, 4 passes: 34.2 TFLOP a chunk at 165.2 TFLOPS -> 0.1726). It
absorbs what the formula leaves out — the attention's own FLOPs, the VAE decode, the loop's overhead —
so other models and cards are extrapolations from that one point, marked assumed wherever shown.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ConfigError

PAPER_CHUNK_S = 1.2                 # MG2 universal on an RTX 4090 (the paper)
MG2_DIT_PARAMS = 1_619_242_304      # MG2 universal's DiT (engine.planner.block_shapes; a test keeps it equal)
MG2_TOKENS, MG2_PASSES = 2640, 4    # 3 latent frames of 22 x 40 patches; 3 denoising steps + the clean pass


@dataclass(frozen=True)
class GPU:
    name: str
    label: str
    memory_gib: float               # as sold
    bf16_tflops: float              # dense, fp32 accumulation (spec sheet; assumed)


GPUS = {g.name: g for g in (
    GPU("rtx4080", "RTX 4080 16 GB", 16, 97.5),
    GPU("rtx4090", "RTX 4090 24 GB", 24, 165.2),
    GPU("rtx5090", "RTX 5090 32 GB", 32, 209.5),
    GPU("a100-80g", "A100 80 GB", 80, 312.0),
    GPU("h100", "H100 SXM 80 GB", 80, 989.4),
)}

EFFICIENCY = round(2 * MG2_DIT_PARAMS * MG2_TOKENS * MG2_PASSES
                   / (GPUS["rtx4090"].bf16_tflops * 1e12 * PAPER_CHUNK_S), 4)


def gpu(name: str) -> GPU:
    try:
        return GPUS[name]
    except KeyError:
        raise ConfigError(f"unknown GPU {name!r} (choose from {', '.join(GPUS)})") from None


def compute_s(dit_params: int, tokens: int, passes: int, card: GPU, efficiency: float = EFFICIENCY) -> float:
    """Seconds of DiT compute for one chunk on ``card`` (the module docstring's formula)."""
    return 2 * dit_params * tokens * passes / (card.bf16_tflops * 1e12 * efficiency)
