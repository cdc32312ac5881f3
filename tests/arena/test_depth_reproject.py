"""Re-projection with predicted depth at inference (``engine.arena.depth_reproject``, ``--arena-reproject-depth``).

Off by default: the store's layout and every output stay as they were, and nothing predicts depth. On: the
depth layer carries each chunk's inverse depth and kind through the store's formats and its disk tier; an
observed view beats a session's own frame of the same surface; and with correct depth (the renderer's,
given to the pipeline through its test-only hook in place of the depth head's) a walk brings the observed
view back from half a unit away, where the rotation-only re-projection cannot.
"""
from __future__ import annotations

import dataclasses
import math
import subprocess

import numpy as np
import pytest
import torch

from engine.arena import depth_reproject
from engine.arena.config import ArenaModelConfig
from engine.arena.depth_reproject import GENERATED, OBSERVED, pack, reproject_with_depth, unpack, z_depth
from engine.arena.model import ArenaDiT
from engine.arena.pipeline import ArenaPipeline
from engine.arena.render import depth, render
from engine.arena.weights import config_of, init_from, packaged_weights_path
from engine.arena.world import Arena
from engine.config import MemoryConfig, SessionConfig
from engine.facts.kv_format import ChunkFormat
from engine.memory.disk import DiskTier
from engine.memory.host_pool import HostPool
from engine.memory.quant import dequantize_chunk_into, quantize_chunk_into
from engine.quality.metrics import psnr

CFG = ArenaModelConfig()
ARENA = Arena.generate(1500003)
FLOOR_DB = 22.5        # measured 24.3 dB on every frame of chunks 2-4 (nearest sampling's limit is ~26 dB)
GAIN_DB = 1.5          # measured 2.9 dB over the rotation-only re-projection
SAME_PLACE_DB = 40.0   # measured 48.6 dB back at the observed camera (int4 pixels); a splat alone gave 30.6


def _view(cam) -> torch.Tensor:
    return torch.from_numpy(render(ARENA, *cam, CFG.height, CFG.width, CFG.hfov))


def _inv(cam) -> torch.Tensor:
    return torch.from_numpy(1.0 / depth(ARENA, *cam, CFG.height, CFG.width, CFG.hfov)).float()


def _cams(*cams) -> torch.Tensor:
    return torch.tensor([cams], dtype=torch.float32)


# ---- off by default -------------------------------------------------------------------------------

def test_off_by_default_the_layout_is_unchanged_and_on_it_has_one_more_layer():
    assert CFG.reproject_depth is False and config_of(packaged_weights_path()).reproject_depth is False
    assert CFG.kv_layout().layers == CFG.layers + 1
    assert CFG.kv_layout(True).layers == CFG.layers + 2
    assert dataclasses.replace(CFG, reproject_depth=True).kv_layout().layers == CFG.layers + 2
    from engine.arena.family import layout
    assert layout(SessionConfig(model="arena")).layers == CFG.layers + 1
    assert layout(SessionConfig(model="arena", arena_reproject_depth=True)).layers == CFG.layers + 2


def test_off_nothing_predicts_or_moves_depth(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("depth used with depth re-projection off")
    monkeypatch.setattr(ArenaDiT, "inverse_depth", refuse)
    monkeypatch.setattr(depth_reproject, "reproject_with_depth", refuse)
    latents, _, pipeline = _session(tmp_path, False, chunks=3)
    assert len(latents) == 3 and pipeline.layout.layers == CFG.layers + 1


def test_weights_without_a_depth_head_are_refused_in_one_line(tmp_path):
    from tests.tests_support import WORLDPAGER

    done = subprocess.run([*WORLDPAGER, "generate", "--arena-reproject-depth", "--chunks", "2", "--out",
                           str(tmp_path / "o.mp4"), "--arena-weights", str(packaged_weights_path())],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("worldpager: error: --arena-reproject-depth needs weights with a depth head")
    assert "Traceback" not in done.stderr and not (tmp_path / "o.mp4").exists()


# ---- the depth layer through the store --------------------------------------------------------------

@pytest.mark.parametrize("bits", [4, 8])
def test_the_depth_layer_round_trips_through_a_quantised_block_and_the_disk_tier(tmp_path, bits):
    cams = [(0.0, 0.0, 0.0, 0.0), (0.5, 0.3, 40.0, 5.0), (-0.4, 0.2, 200.0, -5.0)]
    inv = torch.stack([_inv(c) for c in cams])[None]                          # [1, F, H, W]
    k, v = pack(inv, GENERATED, CFG)
    fmt = ChunkFormat(layers=1, tokens=CFG.tokens_per_chunk, heads=CFG.heads, head_dim=CFG.head_dim, bits=bits)
    pool = HostPool(2, fmt.slot_bytes)                                       # disk I/O needs aligned slots
    block, back = pool.slot(0), pool.slot(1)
    quantize_chunk_into([(k, v)], fmt, block)
    with DiskTier(tmp_path / "spill", fmt.slot_bytes, format_tag="depth", direct=False) as tier:
        tier.write(0, block)
        tier.read(0, back)
    assert torch.equal(back, block)
    k2, v2 = torch.zeros_like(k), torch.zeros_like(v)
    dequantize_chunk_into(back, fmt, [(k2, v2)])
    inv2, kind = unpack(v2, CFG)
    assert kind.tolist() == [[GENERATED] * 3]
    # per patch: min/max quantisation over its own pixels (2**bits levels; half a step of error at most)
    patches = inv.unfold(-2, CFG.patch, CFG.patch).unfold(-2, CFG.patch, CFG.patch)
    spread = (patches.amax((-1, -2)) - patches.amin((-1, -2))).repeat_interleave(CFG.patch, -2) \
        .repeat_interleave(CFG.patch, -1)
    assert ((inv2 - inv).abs() <= spread / (2 ** bits - 1) * 0.51 + 2e-3).all()
    assert torch.equal(torch.isinf(z_depth(inv2)), torch.isinf(z_depth(inv)))   # the sky stays sky


# ---- the ranking --------------------------------------------------------------------------------

def test_an_observed_view_beats_the_sessions_own_frame_of_the_same_surface():
    cam = (0.0, 0.0, 20.0, 0.0)
    observed, hazy = _view(cam), torch.zeros(3, CFG.height, CFG.width)
    frames = torch.stack([hazy, observed, hazy])[None]                         # the generated ones first
    inv = torch.stack([_inv(cam)] * 3)[None]
    kind = torch.tensor([[GENERATED, OBSERVED, GENERATED]])
    time = torch.tensor([[0, 5, 1]])                                           # and earlier
    x0 = torch.full((1, 1, 3, CFG.height, CFG.width), 0.5)
    out, hit, _ = reproject_with_depth(x0, frames, inv, kind, time, _cams(cam, cam, cam), _cams(cam), CFG.hfov)
    assert hit.all() and torch.equal(out[0, 0], observed)


def test_a_return_to_a_generated_place_shows_its_first_visit_and_an_observation_still_wins():
    cam, away = (0.0, 0.0, 20.0, 0.0), (0.4, 0.3, 20.0, 0.0)
    first_visit = torch.rand(3, CFG.height, CFG.width, generator=torch.Generator().manual_seed(0))
    observed_far = _view(away)
    splat = torch.full((1, 1, 3, CFG.height, CFG.width), 0.5)           # what the depth splat made of it
    frames = torch.stack([observed_far, first_visit])[None]
    kind = torch.tensor([[OBSERVED, GENERATED]])
    out = depth_reproject.same_place(splat, frames, kind, _cams(away, cam), _cams(cam), CFG.reproject, CFG.hfov)
    assert torch.equal(out[0, 0], first_visit)        # the observed frame 0.5 units off is not within reach
    observed_here = _view(cam)
    frames = torch.stack([observed_here, first_visit])[None]
    out = depth_reproject.same_place(splat, frames, kind, _cams(cam, cam), _cams(cam), CFG.reproject, CFG.hfov)
    assert torch.equal(out[0, 0], observed_here)     # from the same place, the observation wins


def test_the_same_place_pass_in_the_call_is_same_place_over_the_splat():
    cam, near, away = (0.0, 0.0, 20.0, 0.0), (0.05, 0.05, 26.0, 2.0), (0.6, -0.4, 10.0, 0.0)
    frames = torch.stack([_view(away), _view(near), _view(cam)])[None]
    frames[0, 2] = torch.rand(3, CFG.height, CFG.width, generator=torch.Generator().manual_seed(2))
    inv = torch.stack([_inv(away), _inv(near), _inv(cam)])[None]
    kind, time = torch.tensor([[OBSERVED, OBSERVED, GENERATED]]), torch.tensor([[0, 1, 2]])
    ctx, targets = _cams(away, near, cam), _cams(cam, (0.3, -0.2, 15.0, 0.0), (0.02, 0.0, 24.0, 1.0))
    x0 = torch.full((1, 3, 3, CFG.height, CFG.width), 0.5)
    splat, hit, z = reproject_with_depth(x0, frames, inv, kind, time, ctx, targets, CFG.hfov)
    want = depth_reproject.same_place(splat, frames, kind, ctx, targets, CFG.reproject, CFG.hfov)
    out, hit2, z2 = reproject_with_depth(x0, frames, inv, kind, time, ctx, targets, CFG.hfov, CFG.reproject)
    assert torch.equal(out, want) and torch.equal(hit, hit2) and torch.equal(z, z2)
    assert not torch.equal(out, splat)                         # the same-place pass moved pixels of its own
    assert not out.is_inference() and not hit2.is_inference()  # usable outside inference mode


def test_the_depth_head_runs_on_the_frames_the_splat_leaves_holes_in_only():
    gen = torch.Generator().manual_seed(4)
    hit = torch.ones(1, 3, 4, 5, dtype=torch.bool)
    hit[0, 1, 2, 3] = False                                                  # a hole in frame 1 only
    z = 1.0 + torch.rand(1, 3, 4, 5, generator=gen)
    z[0, 2, 0, 0] = math.inf                                                 # sky moved in: inverse depth 0
    head_all = torch.rand(1, 3, 4, 5, generator=gen)
    asked = []

    def head(need):
        asked.append(need.clone())
        return head_all[need]
    inv = depth_reproject.moved_inverse_depth(hit, z, torch.float32, head)
    assert torch.equal(inv, torch.where(hit, z.reciprocal(), head_all))      # as the head run on every frame
    assert len(asked) == 1 and asked[0].tolist() == [[False, True, False]]
    asked.clear()
    inv = depth_reproject.moved_inverse_depth(torch.ones_like(hit), z, torch.float32, head)
    assert torch.equal(inv, z.reciprocal()) and not asked                  # no hole: no head


def test_the_conv_head_of_some_frames_is_its_head_of_all_frames_on_those():
    from engine.arena.depth_net import DepthNet

    torch.manual_seed(0)
    net = DepthNet(CFG).eval()
    gen = torch.Generator().manual_seed(6)
    frames = torch.rand(1, 3, 3, CFG.height, CFG.width, generator=gen) * 2 - 1
    cam = torch.tensor([[[0.0, 0.0, 20.0, 0.0], [0.3, 0.1, 50.0, 5.0], [-0.2, 0.4, -70.0, -8.0]]])
    need = torch.tensor([[True, False, True]])
    with torch.no_grad():
        assert torch.equal(net(frames[need], cam[need]), net(frames, cam)[need])


# ---- sessions -----------------------------------------------------------------------------------

# Chunk 0 (observed) at the start; then half a unit forward and hold: in chunks 2-4 every frame is 0.49
# units in front of chunk 0's camera, facing the same way, with chunk 0 in the memory; then back to the
# start (chunk 5's last two frames and chunk 6).
WALK = """segments:
  - {frames: 9}
  - {keys: [w], frames: 4}
  - {frames: 44}
  - {keys: [s], frames: 4}
  - {frames: 24}
"""


def _true_inverse_depth(pipeline: ArenaPipeline, chunk: int) -> torch.Tensor:
    f = pipeline.cfg.frames_per_chunk
    cams = pipeline.cam[chunk * f:(chunk + 1) * f]
    return torch.from_numpy(np.stack([1.0 / depth(pipeline.arena, *c, CFG.height, CFG.width, CFG.hfov)
                                      for c in cams])).float()


def _session(tmp_path, on: bool, chunks: int = 5):
    from engine.session.loop import Session

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "walk.yaml").write_text(WALK)
    cfg = SessionConfig(model="arena", arena_seed=1500003, trajectory=tmp_path / "walk.yaml", chunks=chunks,
                        out=tmp_path / "o.mp4", save_every=0, look_around=0, arena_reproject_depth=on,
                        memory=MemoryConfig(kv_bits=4, pool_slots=2, spill=tmp_path / "spill",
                                            late_prefetch="wait")).validate()
    latents, memory = {}, {}
    session = Session(cfg, on_output=lambda chunk, x0: latents.__setitem__(chunk, x0[0].float().cpu()),
                      on_chunk=lambda r: memory.__setitem__(r["chunk"], r.get("memory", [])))
    assert session.run().status == "done"
    return latents, memory, session.model


def _walk_psnr(tmp_path, on: bool, monkeypatch) -> tuple[list[float], list[float]]:
    """PSNR of the frames half a unit away (chunks 2-4) and back at the start (chunks 5, 6)."""
    if on:
        monkeypatch.setattr(ArenaPipeline, "depth_source", staticmethod(_true_inverse_depth))
    latents, memory, pipeline = _session(tmp_path, on, chunks=7)
    monkeypatch.setattr(ArenaPipeline, "depth_source", None)
    fpc = CFG.frames_per_chunk
    start = pipeline.cam[0]
    for c in (2, 3, 4):
        assert 0 in memory[c], memory
        moved = np.hypot(*(pipeline.cam[c * fpc:(c + 1) * fpc, :2] - start[:2]).T)
        assert np.allclose(moved, 0.494, atol=0.01) and np.allclose(pipeline.cam[c * fpc:(c + 1) * fpc, 2:], 0)
    away = [psnr(latents[c][i][None], pipeline.truth(c)[i][None]).item() for c in (2, 3, 4) for i in range(fpc)]
    back = [(c, i) for c in (5, 6) for i in range(fpc) if np.allclose(pipeline.cam[c * fpc + i], start, atol=1e-6)]
    assert len(back) == 5 and all(0 in memory[c] for c, _ in back), (back, memory)
    return away, [psnr(latents[c][i][None], pipeline.truth(c)[i][None]).item() for c, i in back]


def test_with_correct_depth_a_walk_brings_back_the_observed_view_from_half_a_unit(tmp_path, monkeypatch):
    with_depth, back = _walk_psnr(tmp_path / "on", True, monkeypatch)
    without, back_without = _walk_psnr(tmp_path / "off", False, monkeypatch)
    assert min(with_depth) > FLOOR_DB, with_depth
    assert min(with_depth) > max(without) + GAIN_DB, (with_depth, without)
    # back where it was observed: the observed pixels themselves (through int4), as without depth; no
    # splat of a generated frame bleeds over them
    assert min(back) > SAME_PLACE_DB and min(back_without) > SAME_PLACE_DB, (back, back_without)


def test_a_depth_head_fills_the_depth_layer_with_its_depth_and_each_chunks_kind(tmp_path):
    """The head's own path (no hook): a head whose output is a constant inverse depth of 0.25 (4 units)."""
    from engine.model.kv_context import AttentionContext
    from engine.model.registry import model_spec
    from engine.session.observe import session_path

    (tmp_path / "walk.yaml").write_text(WALK)
    cfg = SessionConfig(model="arena", trajectory=tmp_path / "walk.yaml", chunks=2, out=tmp_path / "o.mp4")
    trajectory = session_path(cfg, model_spec(cfg)).trajectory

    model = ArenaDiT(dataclasses.replace(config_of(packaged_weights_path()), depth_head=True))
    init_from(model, packaged_weights_path(), torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.depth_out.bias.fill_(0.25)
    model.eval()
    pipeline = ArenaPipeline(model, ARENA, trajectory, 0, "rerotate", torch.device("cpu"),
                             torch.float32, "test", reproject_depth=True)
    ctx = AttentionContext(pipeline.layout, memory_chunks=0)
    layer = ctx.layers[CFG.layers + 1].self_kv
    pipeline.observe(0, ctx)
    inv, kind = unpack(layer.current()[1], CFG)
    assert kind.tolist() == [[OBSERVED] * 3] and torch.allclose(inv, torch.full_like(inv, 0.25))
    ctx.commit()
    pipeline.denoise(1, ctx)
    inv, kind = unpack(layer.current()[1], CFG)
    assert kind.tolist() == [[GENERATED] * 3] and torch.isfinite(inv).all()


# ---- training the head alone --------------------------------------------------------------------

def test_head_only_training_with_a_depth_weight_moves_the_depth_head_alone(tmp_path):
    from engine.arena.train import Recipe, flow_times, train

    cfg = ArenaModelConfig(layers=1, depth_head=True)
    recipe = Recipe(steps=2, batch=1, chunks=3, warmup=1, self_context=0.0, depth_weight=1.0, head_only=True,
                    clean_share=0.5)
    t = flow_times(torch.Generator().manual_seed(0), (4000,), dataclasses.replace(recipe, p_pure_noise=0.0))
    assert 0.4 < (t == 0).float().mean() < 0.6                              # the clean share: given frames
    torch.manual_seed(recipe.seed)
    before = ArenaDiT(cfg).state_dict()
    train(tmp_path / "run", recipe, cfg, save_every=1, quiet=True)
    after = torch.load(tmp_path / "run" / "last.pt", weights_only=True)["model"]
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == {"depth_out.weight", "depth_out.bias"}, moved


@pytest.mark.parametrize("on", [False, True])
def test_a_depth_session_retrieves_observed_chunks_first(tmp_path, on, monkeypatch):
    """With depth an observed frame's pixels are moved in from anywhere and outrank generated ones, so its
    memory is spent on observed views first (``FovOverlapPolicy.observed_bonus``); without depth as before."""
    import engine.session.loop as loop
    from engine.retrieval.retriever import OBSERVED_FIRST

    made = []

    class Recording(loop.Retriever):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(loop, "Retriever", Recording)
    _session(tmp_path, on, chunks=2)
    (retriever,) = made
    assert retriever.observed == range(1 if on else 0)          # chunk 0: the start view, observed
    assert retriever.policy.observed_bonus == (OBSERVED_FIRST if on else 0.0)


def test_with_depth_the_rotation_only_pass_keeps_to_the_very_same_place():
    """0.13 units off the look-around, rotation alone misplaces near surfaces the splat places; at the very
    same place it still gives the observed view exactly."""
    look = [(0.0, 0.0, float(y), 0.0) for y in range(0, 360, 30)]
    frames = torch.stack([_view(c) for c in look])[None]
    inv = torch.stack([_inv(c) for c in look])[None]
    kind = torch.full((1, len(look)), OBSERVED)
    time = torch.arange(len(look))[None]
    cams = torch.tensor([look], dtype=torch.float32)
    radius = depth_reproject.same_place_radius(CFG.reproject)
    assert 0 < radius < 0.01 and depth_reproject.same_place_radius(0.0) == 0.0
    x0 = torch.zeros(1, 1, 3, CFG.height, CFG.width)
    scores = {}
    for r in (CFG.reproject, radius):
        total = 0.0
        for yaw in (10.0, 100.0, 220.0):
            cam = (0.13 * np.cos(yaw), 0.13 * np.sin(yaw), yaw, 0.0)
            out, _, _ = reproject_with_depth(x0, frames, inv, kind, time, cams, _cams(cam), CFG.hfov, r)
            total += psnr(out[0, :1], _view(cam)[None]).item()
        scores[r] = total / 3
    assert scores[radius] > scores[CFG.reproject] + 1.0, scores
    out, _, _ = reproject_with_depth(x0, frames, inv, kind, time, cams, _cams(look[3]), CFG.hfov, radius)
    assert torch.equal(out[0, 0], frames[0, 3])
