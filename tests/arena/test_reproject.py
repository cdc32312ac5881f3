"""Re-projection from memory (``engine.arena.reproject``, ``--arena-reproject``).

The function on rendered frames: a source at the very same camera is copied exactly, a turned one is
warped into the pixels it sees, a source from another place is never used, the cheapest source wins.
Then a real session (prefetch, int4, a spill directory): the camera turns away from its first view and
comes back after the window has moved on, so the first view can only come back from the memory; with
re-projection the frames there are the observed pixels (up to int4), without it the model's own haze.
"""
from __future__ import annotations

import numpy as np
import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.render import render
from engine.arena.reproject import reproject, source_cost
from engine.arena.world import Arena
from engine.config import MemoryConfig, SessionConfig
from engine.quality.metrics import psnr

CFG = ArenaModelConfig()
ARENA = Arena.generate(1500003)


def _view(x=0.0, z=0.0, yaw=0.0, pitch=0.0) -> torch.Tensor:
    return torch.from_numpy(render(ARENA, x, z, yaw, pitch, CFG.height, CFG.width, CFG.hfov))


def _cams(*cams) -> torch.Tensor:
    return torch.tensor([cams], dtype=torch.float32)


def test_a_source_at_the_same_camera_is_copied_exactly():
    x0 = torch.zeros(1, 1, 3, CFG.height, CFG.width)
    cam = (0.0, 0.0, 30.0, 0.0)
    out, hit = reproject(x0, _view(*cam)[None, None], _cams(cam), _cams(cam), 0.15, CFG.hfov)
    assert hit.all() and torch.equal(out[0, 0], _view(*cam))


def test_a_turned_source_fills_what_it_sees_and_leaves_the_rest():
    x0 = torch.full((1, 1, 3, CFG.height, CFG.width), 0.5)
    src, dst = (0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 30.0, 0.0)
    out, hit = reproject(x0, _view(*src)[None, None], _cams(src), _cams(dst), 0.15, CFG.hfov)
    share = hit.float().mean().item()
    assert 0.3 < share < 0.9                                         # a turn of a third of the field of view
    assert torch.equal(out[0, 0][:, ~hit[0, 0]], x0[0, 0][:, ~hit[0, 0]])
    truth = _view(*dst)
    err = ((out[0, 0] - truth) ** 2)[:, hit[0, 0]].mean()
    assert 10 * torch.log10(4 / err) > 20                            # the warped pixels are the true view's
    assert psnr(out[0, 0][None], truth[None]).item() > psnr(x0[0, 0][None], truth[None]).item()


def test_a_source_from_another_place_is_not_used():
    x0 = torch.zeros(1, 1, 3, CFG.height, CFG.width)
    src, dst = (0.5, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)
    out, hit = reproject(x0, _view(*src)[None, None], _cams(src), _cams(dst), 0.15, CFG.hfov)
    assert not hit.any() and torch.equal(out, x0)
    assert torch.isinf(source_cost(_cams(src), _cams(dst), 0.15)).all()


def test_the_same_pose_wins_over_a_turned_one_and_ties_go_to_the_earlier_frame():
    dst = (0.0, 0.0, 10.0, 0.0)
    turned, same = (0.0, 0.0, 0.0, 0.0), dst
    frames = torch.stack([_view(*turned), _view(*same), -_view(*same)])[None]
    out, _ = reproject(torch.zeros(1, 1, 3, CFG.height, CFG.width), frames, _cams(turned, same, same),
                       _cams(dst), 0.15, CFG.hfov)
    assert torch.equal(out[0, 0], _view(*same))


# ---- a session ---------------------------------------------------------------------------------------

# 12 chunks: hold the first view (chunk 0), turn 90 degrees right, hold, turn back, hold the first view
# again from chunk 9 on: the window then holds chunk 8, so chunk 0's pixels come from the memory (once
# the retrieval, staged from the pose extrapolated a chunk ahead, has brought chunk 0 back).
PATH = """segments:
  - {frames: 9}
  - {mouse: [0, 0.2], frames: 30}
  - {frames: 36}
  - {mouse: [0, -0.2], frames: 30}
  - {frames: 36}
"""


def _session(tmp_path, reproject_radius):
    from engine.session.loop import Session

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "path.yaml").write_text(PATH)
    tag = f"r{reproject_radius}"
    cfg = SessionConfig(model="arena", arena_seed=1500003, trajectory=tmp_path / "path.yaml", chunks=12,
                        out=tmp_path / f"{tag}.mp4", save_every=0, look_around=0, arena_reproject=reproject_radius,
                        memory=MemoryConfig(kv_bits=4, pool_slots=4, spill=tmp_path / f"{tag}.spill",
                                            late_prefetch="wait")).validate()
    latents, memory = {}, {}
    session = Session(cfg, on_output=lambda chunk, x0: latents.__setitem__(chunk, x0[0].float().cpu()),
                      on_chunk=lambda r: memory.__setitem__(r["chunk"], r.get("memory", [])))
    assert session.run().status == "done"
    return latents, memory, session.model


def _returns(tmp_path, radius) -> list[float]:
    """PSNR against the first view's truth of every frame back at the first view with chunk 0 in memory."""
    latents, memory, pipeline = _session(tmp_path, radius)
    fpc = CFG.frames_per_chunk
    at_start = [c for c in range(9, 12) if np.allclose(pipeline.cam[c * fpc:(c + 1) * fpc], pipeline.cam[0], atol=1e-6)]
    back = [c for c in at_start if 0 in memory[c]]                   # the first view is in the memory
    assert at_start == [9, 10, 11] and len(back) >= 2, memory
    truth = pipeline.truth(0)[0]
    return [psnr(latents[c][i][None], truth[None]).item() for c in back for i in range(fpc)]


def test_preferred_sources_win_as_a_second_pass_over_them_alone_would():
    """``preferred``: the cheapest preferred source wherever one sees the pixel, else the cheapest of all,
    exactly what a second call over the preferred sources alone gives, and not what one call gives."""
    cams = [(0.0, 0.0, 0.0, 0.0), (0.05, 0.0, 25.0, 0.0), (0.02, 0.03, -20.0, 5.0), (0.0, 0.05, 40.0, 0.0)]
    frames = torch.stack([_view(*c) + 0.1 * i for i, c in enumerate(cams)])[None]
    targets = _cams((0.01, 0.0, 10.0, 0.0), (0.0, 0.01, 30.0, -3.0))
    preferred = torch.tensor([[False, True, False, True]])
    x0 = torch.zeros(1, 2, 3, CFG.height, CFG.width)
    one, hit = reproject(x0, frames, _cams(*cams), targets, 0.15, CFG.hfov, preferred=preferred)
    first, first_hit = reproject(x0, frames, _cams(*cams), targets, 0.15, CFG.hfov)
    far = torch.where(preferred[..., None], _cams(*cams), torch.full((1, 4, 4), 1e9))
    two, second_hit = reproject(first, frames, far, targets, 0.15, CFG.hfov)
    assert torch.equal(one, two) and torch.equal(hit, first_hit | second_hit)
    assert not torch.equal(one, first)


def test_a_return_to_the_first_view_brings_back_its_pixels_from_the_memory(tmp_path):
    with_it, without = _returns(tmp_path / "on", 0.15), _returns(tmp_path / "off", 0.0)
    assert min(with_it) > 30                                         # the observed pixels, through int4
    assert min(with_it) > max(without) + 2, (with_it, without)       # the model's own copy is hazier
