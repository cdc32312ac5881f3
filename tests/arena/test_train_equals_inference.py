"""Training equals inference: the two-stream whole-episode forward gives, chunk by chunk, the outputs of
the chunked inference path through the attention context (memory slots, window, current chunk) — also
with the pixel warp of the window's last frame and several candidates per token."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.arena.config import ArenaModelConfig
from engine.arena.data import training_episode
from engine.arena.model import ArenaDiT
from engine.arena.patches import patchify
from engine.model.kv_context import AttentionContext

CFG = ArenaModelConfig(layers=2)
K = 3


def _episode(chunks=6):
    # A training episode with its augmentations (stale slots, time-shifted memory) but a fixed draw.
    for step in range(50):
        ep = training_episode(7, step, 0, CFG, chunks, K)
        if (ep.ctx_ids[:, :K] >= 0).sum() >= 3 and (ep.mem_shift != 0).any():
            return ep
    raise AssertionError("no episode with memory in 50 draws")


DESIGNS = {"x0": CFG, "warp+hypotheses": dataclasses.replace(CFG, warp=True, hypotheses=3)}


def _inference(model, ep, noisy, t):
    """Chunk by chunk: fill memory slots from stored clean KV, predict the noisy chunk, then the clean pass."""
    cfg = model.cfg
    layout = cfg.kv_layout()
    ctx = AttentionContext(layout, memory_chunks=K)
    stored, preds = {}, []
    n_tok = layout.tokens_per_chunk
    fpc = cfg.frames_per_chunk
    for c in range(ep.frames.shape[0]):
        mem = [(s, int(j)) for s, j in enumerate(ep.ctx_ids[c, :K].tolist()) if j >= 0]
        for i, (s, j) in enumerate(mem):
            slot = K - len(mem) + i                      # valid memory is right-aligned
            for layer, state in enumerate(ctx.layers):
                k_dst, v_dst = state.self_kv.memory_slot(slot * n_tok, n_tok)
                k, v = stored[j][layer]
                if layer < cfg.layers:
                    k = model.rope.rotate(k, torch.tensor(float(ep.mem_shift[c, s])))
                k_dst.copy_(k)
                v_dst.copy_(v)
        for state in ctx.layers:
            state.self_kv.set_memory_valid(len(mem) * n_tok)
        prev_cam = ep.cam[c - 1, -1][None] if c else None
        inputs = model.chunk_inputs(ep.actions[c][None], ep.cam[c][None], c * fpc, prev_cam)
        preds.append(model.chunk_forward(noisy[c][None], t[c][None], inputs, ctx)[0])
        model.chunk_forward(ep.frames[c][None], torch.zeros(1), inputs, ctx, output=False)   # clean pass
        stored[c] = [(k.clone(), v.clone()) for k, v in ctx.current_kv()]
        ctx.commit()
    return torch.stack(preds)


@pytest.mark.parametrize("design", list(DESIGNS))
def test_training_forward_equals_chunked_inference(design):
    torch.manual_seed(0)
    model = ArenaDiT(DESIGNS[design]).eval()
    for p in model.parameters():                 # zero-initialised gates would hide most of the network
        p.data.add_(torch.randn_like(p) * 0.05)
    ep = _episode()
    gen = torch.Generator().manual_seed(1)
    t = torch.rand(ep.frames.shape[0], generator=gen)
    noisy = (1 - t.view(-1, 1, 1, 1, 1)) * ep.frames + t.view(-1, 1, 1, 1, 1) * torch.randn(ep.frames.shape, generator=gen)
    with torch.no_grad():
        trained = model.train_forward(ep.frames[None], noisy[None], t[None], ep.actions[None], ep.cam[None],
                                      torch.zeros(1, dtype=torch.long), ep.ctx_ids[None], ep.mem_shift[None])[0]
        chunked = _inference(model, ep, noisy, t)
    assert trained.shape == chunked.shape
    diff = (trained - chunked).abs().max().item()
    assert diff <= 1e-5, diff
    # and the comparison is not vacuous: the memory changes the output
    assert (trained[3:] - trained[3:].mean()).abs().max() > 0.01


def test_memory_reaches_the_output():
    """Dropping the memory slots changes the chunks that had memory, and only those."""
    torch.manual_seed(0)
    model = ArenaDiT(CFG).eval()
    for p in model.parameters():
        p.data.add_(torch.randn_like(p) * 0.05)
    ep = _episode()
    t = torch.ones(ep.frames.shape[0])
    noisy = torch.randn(ep.frames.shape, generator=torch.Generator().manual_seed(2))
    args = (ep.frames[None], noisy[None], t[None], ep.actions[None], ep.cam[None], torch.zeros(1, dtype=torch.long))
    with torch.no_grad():
        with_memory = model.train_forward(*args, ep.ctx_ids[None], ep.mem_shift[None])[0]
        no_memory_ids = ep.ctx_ids.clone()
        no_memory_ids[:, :K] = -1
        without = model.train_forward(*args, no_memory_ids[None], ep.mem_shift[None])[0]
    had_memory = (ep.ctx_ids[:, :K] >= 0).any(-1)
    changed = (with_memory - without).flatten(1).abs().max(-1).values
    assert (changed[had_memory] > 1e-3).all() and (changed[~had_memory] == 0).all(), (changed, had_memory)


def test_the_warp_reaches_the_output_pixel_for_pixel():
    """With its gate wide open, the warp source is the output: a frame at the window's last camera is that
    frame's copy, every pixel (nearest sampling: no blend), and a turned camera sees it moved."""
    torch.manual_seed(0)
    model = ArenaDiT(DESIGNS["warp+hypotheses"]).eval()
    with torch.no_grad():
        model.warp_gate.bias.fill_(40.0)
        model.gate.bias.fill_(-40.0)
    ep = _episode()
    cam = ep.cam.clone()
    cam[1] = cam[0, -1]                                   # chunk 1 holds chunk 0's last camera ...
    cam[2] = cam[0, -1]
    cam[2, :, 2] += 18.0                                  # ... chunk 2 turns 18 degrees from it
    noisy = torch.randn(ep.frames.shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model.train_forward(ep.frames[None], noisy[None], torch.ones(1, ep.frames.shape[0]), ep.actions[None],
                                  cam[None], torch.zeros(1, dtype=torch.long), ep.ctx_ids[None], ep.mem_shift[None])[0]
    assert torch.allclose(out[1], ep.frames[0, -1].expand_as(out[1]), atol=1e-5)
    # turned 18 degrees right: the source's column at that heading (tan 18 = 0.325 of the half-width
    # tangent 1: column 53 of 80 for the ray through column 40) is the output's column 40
    assert torch.allclose(out[2, 0][..., CFG.height // 2, CFG.width // 2], ep.frames[1, -1][..., CFG.height // 2, 53],
                          atol=1e-5)
    assert not torch.allclose(out[2, 0], ep.frames[1, -1], atol=1e-3)


def test_hard_copy_outputs_real_patches_and_training_stays_soft():
    """``hard_copy``: at inference a copied token is one context patch whole (no blend of several, no
    mosaic of the heads' choices); in training the copy head is the differentiable softmax it was."""
    torch.manual_seed(0)
    cfg = dataclasses.replace(CFG, hard_copy=True)
    model = ArenaDiT(cfg)
    with torch.no_grad():
        model.gate.bias.fill_(40.0)                                    # every token copied
        model.copy_logit_scale.fill_(0.0)                              # a soft copy would blend many
    ep = _episode()
    no_memory = ep.ctx_ids.clone()
    no_memory[:, :K] = -1                                              # the window chunk only
    args = (ep.frames[None], torch.randn(ep.frames.shape)[None], torch.ones(1, ep.frames.shape[0]), ep.actions[None],
            ep.cam[None], torch.zeros(1, dtype=torch.long), no_memory[None], ep.mem_shift[None])
    with torch.no_grad():
        hard = model.eval().train_forward(*args)[0]
        soft = model.train().train_forward(*args)[0]
    p = cfg.patch
    for c in (1, 4):
        window = patchify(ep.frames[c - 1], p).flatten(0, 1)                       # [T, P]
        out = patchify(hard[c], p).flatten(0, 1)
        dist = torch.cdist(out, window, compute_mode="donot_use_mm_for_euclid_dist")
        assert dist.min(-1).values.max() < 1e-5                        # every token: one window patch
        assert not torch.allclose(hard[c], soft[c], atol=1e-3)
