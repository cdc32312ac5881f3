"""The small version of ``worldpager bench quality`` (``--quick``, and the tests): a CI smoke test.

Owns the quick plan: one held-out arena, one short episode of each kind (``revisit_paths.QUICK``: 13
chunks, 2 observed, a faster spin and shorter holds and walks than the benchmark's, so that a few
frames come back 10 chunks later), the arms ``QUICK_ARMS`` (or those asked for, with window-only and
bf16), the positions and drift experiments at a few chunks. It checks that everything runs and is
reported; its figures come from a handful of frames and are not the benchmark's. Running past the
arena model's native horizon (chunk 80) takes 80 chunks; the quick positions experiment instead runs
the same network from a copy of its weights file whose config puts the native horizon at chunk
``QUICK_HORIZON`` (``rope_table_frames`` only sets where the horizon is: the rotary angles are computed
from the same formula for any position), so every position arm runs past a horizon in a dozen chunks.
"""
from __future__ import annotations

import json
from pathlib import Path

from engine.quality.arms import BF16, INT4, WINDOW, Arm
from engine.quality.revisit_paths import QUICK
from engine.quality.run import Plan

QUICK_HORIZON = 4
QUICK_ARMS = (WINDOW, BF16, INT4)


def weights_with_horizon(src: Path, horizon_chunk: int, out: Path) -> Path:
    """A copy of the arena weights file ``src`` whose native horizon is chunk ``horizon_chunk``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from engine.arena.weights import read_metadata

    read_metadata(src)   # the input gate and a readable file, before safetensors opens it
    with safe_open(str(src), framework="pt") as fh:
        meta = dict(fh.metadata() or {})
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    cfg = json.loads(meta["config"])
    frames = cfg.get("frames_per_chunk", 3)
    cfg["rope_table_frames"] = horizon_chunk * frames
    meta["config"] = json.dumps(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    return out


def quick_plan(workdir: Path, weights: Path | None = None, arms: tuple[Arm, ...] = QUICK_ARMS) -> Plan:
    from engine.arena.weights import packaged_weights_path

    moved = weights_with_horizon(weights or packaged_weights_path(), QUICK_HORIZON,
                                 workdir / "arena-horizon4.safetensors")
    return Plan(seeds=1, shape=QUICK, arms=arms, smoke_test=True, position_gap=3, prefix_chunks=QUICK_HORIZON,
                position_seeds=1, drift_chunks=10, drift_gap=3, block=5, ssim_every=2, weights=weights,
                position_weights=moved, workdir=workdir)
