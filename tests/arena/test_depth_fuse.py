"""Observed frames of one place share one depth per direction (engine.arena.depth_fuse)."""
from __future__ import annotations

import torch

import engine.arena.depth_reproject as depth_reproject
from engine.arena.config import ArenaModelConfig
from engine.arena.depth_fuse import fuse_observed
from engine.arena.render import depth, render
from engine.arena.source_rank import GENERATED, OBSERVED
from engine.arena.weights import load_model, packaged_depth_weights_path
from engine.arena.world import Arena
from moved_views import reached_psnr

CFG = ArenaModelConfig()
ARENA = Arena.generate(1510001)                  # held out
LOOK = [(0.0, 0.0, float(y), 0.0) for y in range(0, 360, 20)]


def _look(cams=LOOK):
    frames = torch.stack([torch.from_numpy(render(ARENA, *c, CFG.height, CFG.width, CFG.hfov)) for c in cams])
    z = torch.stack([torch.from_numpy(depth(ARENA, *c, CFG.height, CFG.width, CFG.hfov)) for c in cams])
    return frames[None], z[None], torch.tensor(cams)[None]


def test_true_depth_stays_true_and_what_is_not_fused_is_untouched():
    _, z, cams = _look()
    observed = torch.ones(1, len(LOOK), dtype=torch.bool)
    fused = fuse_observed(z, observed, cams, CFG.hfov)
    finite = torch.isfinite(z)
    flipped = torch.isfinite(fused) != finite                               # only at a wall's top edge
    assert flipped.float().mean() < 0.01, flipped.float().mean()
    rel = ((fused - z).abs() / z)[finite & ~flipped]
    assert rel.median() < 0.005 and rel.mean() < 0.01, (rel.median(), rel.mean())   # neighbouring points
    noisy = z * (1 + 0.05 * torch.randn(z.shape, generator=torch.Generator().manual_seed(0)))
    kind_gen = torch.zeros_like(observed)
    assert torch.equal(fuse_observed(noisy, kind_gen, cams, CFG.hfov), noisy)         # generated: their own
    apart = cams.clone()
    apart[0, :, 0] = torch.arange(len(LOOK), dtype=torch.float32) * 0.5                  # no two at one place
    assert torch.equal(fuse_observed(noisy, observed, apart, CFG.hfov), noisy)


def test_fused_head_depth_moves_a_look_around_nearer_the_truth(monkeypatch):
    frames, _, cams = _look()
    model = load_model(packaged_depth_weights_path()).eval()
    with torch.no_grad():
        inv = model.observed_frame_depth(frames, cams)
    targets = [(1.5, -2.0, 30.0, 0.0), (-3.0, 1.0, 250.0, 0.0), (2.5, 2.5, 140.0, 0.0), (-1.0, -3.0, 320.0, 0.0)]
    scores = {}
    for fuse in (False, True):
        monkeypatch.setattr(depth_reproject, "FUSE", fuse)
        scores[fuse] = reached_psnr(ARENA, frames, inv, cams, targets)
    assert scores[True] > scores[False] + 0.5, scores


def test_a_generated_frame_beside_them_keeps_its_depth():
    _, z, cams = _look(LOOK[:3])
    noisy = z * (1 + 0.05 * torch.randn(z.shape, generator=torch.Generator().manual_seed(1)))
    kind = torch.tensor([[True, False, True]])
    fused = fuse_observed(noisy, kind, cams, CFG.hfov)
    assert torch.equal(fused[0, 1], noisy[0, 1]) and not torch.equal(fused[0, 0], noisy[0, 0])
    _ = (GENERATED, OBSERVED)


def test_the_last_fusion_is_reused_only_for_the_same_frames():
    _, z, cams = _look(LOOK[:4])
    noisy = z * (1 + 0.05 * torch.randn(z.shape, generator=torch.Generator().manual_seed(2)))
    observed = torch.ones(1, 4, dtype=torch.bool)
    first = fuse_observed(noisy, observed, cams, CFG.hfov)
    assert torch.equal(fuse_observed(noisy.clone(), observed, cams, CFG.hfov), first)
    other = noisy.clone()
    other[0, 1] *= 1.02
    again = fuse_observed(other, observed, cams, CFG.hfov)
    assert not torch.equal(again, first)
    import engine.arena.depth_fuse as depth_fuse
    depth_fuse._last.clear()
    assert torch.equal(fuse_observed(other, observed, cams, CFG.hfov), again)
