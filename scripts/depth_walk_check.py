"""Re-projection with depth in a walking session, against the truth: ``python3 scripts/depth_walk_check.py
--weights W [--arenas N]``.

Per held-out arena one short session (int4 memory, a spill directory) on a walk that leaves the observed
first view and comes back to places near it (half a unit forward, back past the start, forward to it), in
three arms: ``rotation`` (today's default: rotation-only re-projection within 0.15 units, the weights'
x0 otherwise), ``depth`` (``--arena-reproject-depth`` with the weights' depth head) and ``oracle`` (the
same wiring fed the renderer's true depth: what a perfect head would give; a measurement, never
inference). PSNR of every generated latent frame against the true view, per arm (mean of per-frame PSNR), split by
class: ``moved`` (at least ``MOVED`` units from every observed camera: only depth can bring the observed
view there) and ``at_obs`` (back within it: rotation-only re-projection copies the observed pixels).
``--path turn``: instead two whole turns on the spot after the observed view (every frame ``at_obs``; the
second turn returns to views the first generated).
Prints a table and a last line of JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.arena.data import TRAIN_ARENAS  # noqa: E402
from engine.arena.pipeline import ArenaPipeline  # noqa: E402
from engine.arena.render import depth  # noqa: E402
from engine.config import MemoryConfig, SessionConfig  # noqa: E402
from engine.quality.metrics import psnr  # noqa: E402

ARENA_BASE = TRAIN_ARENAS + 3000
WALK = """segments:
  - {frames: 9}
  - {keys: [w], frames: 4}
  - {frames: 20}
  - {keys: [s], frames: 8}
  - {frames: 20}
  - {keys: [w], frames: 4}
  - {frames: 20}
"""
TURN = """segments:
  - {frames: 9}
  - {mouse: [0, 0.2], frames: 240}
"""
PATHS = {"walk": (WALK, 8), "turn": (TURN, 21)}   # path, chunks
MOVED = 0.15     # world units from every observed camera: a frame the rotation-only re-projection cannot fill
BITS = 4


def _true_inverse_depth(pipeline: ArenaPipeline, chunk: int) -> torch.Tensor:
    cfg, f = pipeline.cfg, pipeline.cfg.frames_per_chunk
    cams = pipeline.cam[chunk * f:(chunk + 1) * f]
    return torch.from_numpy(np.stack([1.0 / depth(pipeline.arena, *c, cfg.height, cfg.width, cfg.hfov)
                                      for c in cams])).float()


def session_psnr(root: Path, arena_seed: int, weights: Path, arm: str, path: str = "walk") -> list[float]:
    from engine.session.loop import Session

    root.mkdir(parents=True, exist_ok=True)
    walk, chunks = PATHS[path]
    (root / "walk.yaml").write_text(walk)
    ArenaPipeline.depth_source = staticmethod(_true_inverse_depth) if arm == "oracle" else None
    try:
        cfg = SessionConfig(model="arena", arena_seed=arena_seed, arena_weights=weights, trajectory=root / "walk.yaml",
                            chunks=chunks, out=root / "o.mp4", save_every=0, arena_reproject_depth=arm != "rotation",
                            look_around=0,   # chunk 0 is the one observed view (no look-around first)
                            memory=MemoryConfig(kv_bits=BITS, pool_slots=2, spill=root / "spill",
                                                late_prefetch="wait")).validate()
        latents: dict = {}
        session = Session(cfg, on_output=lambda c, x0: latents.__setitem__(c, x0[0].float().cpu()))
        assert session.run().status == "done"
    finally:
        ArenaPipeline.depth_source = None
    p = session.model
    f = p.cfg.frames_per_chunk
    observed = p.cam[:f, :2]                                        # chunk 0: the observed view
    out = []
    for c in range(1, chunks):
        for i in range(f):
            moved = float(np.hypot(*(observed - p.cam[c * f + i, :2]).T).min())
            out.append((psnr(latents[c][i][None], p.truth(c)[i][None]).item(), moved >= MOVED))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", type=Path, required=True, help="arena weights with a depth head")
    ap.add_argument("--arenas", type=int, default=3)
    ap.add_argument("--path", choices=sorted(PATHS), default="walk",
                    help="walk: out and back (default); turn: two whole turns on the spot at 3 degrees a frame")
    a = ap.parse_args(argv)
    arms = ("rotation", "depth", "oracle")
    scores = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for e in range(a.arenas):
            for arm in arms:
                scores[arm] += session_psnr(Path(tmp) / f"{e}-{arm}", ARENA_BASE + e, a.weights, arm, a.path)
    result = {}
    print(f"{'arm':<10} {'class':<8} {'frames':>7} {'PSNR (dB)':>10} {'worst':>7}")
    for arm in arms:
        for name, want in (("moved", True), ("at_obs", False)):
            s = [v for v, moved in scores[arm] if moved == want]
            if not s:
                continue
            result.setdefault(arm, {})[name] = {"psnr": float(np.mean(s)), "worst": float(np.min(s)), "frames": len(s)}
            print(f"{arm:<10} {name:<8} {len(s):7d} {np.mean(s):10.2f} {np.min(s):7.2f}")
    print(json.dumps({"weights": str(a.weights), "arenas": a.arenas, "path": a.path, "chunks": PATHS[a.path][1],
                      **result}))


if __name__ == "__main__":
    main()
