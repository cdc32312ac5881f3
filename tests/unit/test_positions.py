"""Positions: the extended rotary table, re-rotation of retrieved keys, and the horizon modes."""
from __future__ import annotations

import dataclasses

import torch

from types import SimpleNamespace

from engine.config import model_config
from engine.model.facts import horizon_chunk
from engine.model.rope import DiTRope
from engine.settings.overlay import resolve_session_config
from engine.session.positions import Rerotation

CFG = model_config("mg2-universal")


def native_table(rope: DiTRope, length: int = 1024) -> torch.Tensor:
    """MG2's time table as the official code builds it: all 1024 rows at once."""
    return torch.outer(torch.arange(length), rope.inv_freq[0])


def test_extension_is_bit_identical_inside_the_native_table():
    rope = DiTRope(CFG.dit.head_dim, CFG.dit.rope_split, CFG.dit.rope_theta)
    table = native_table(rope)
    for start in (0, 3, 339, 1020, 1021):
        rows = rope.time_angles(torch.arange(start, start + 3, dtype=torch.float64))
        assert torch.equal(rows, table[start:start + 3]), start
    # and it keeps going past the end without a seam
    beyond = rope.time_angles(torch.arange(1023, 1026, dtype=torch.float64))
    assert torch.allclose(beyond[1:] - beyond[:-1], table[1:3] - table[:2], rtol=0, atol=1e-9)


def test_rerotation_equals_rope_at_the_new_position():
    rope = DiTRope(64, (24, 20, 20))
    x = torch.randn(1, 3 * 2 * 4, 2, 64, dtype=torch.float64)            # [B, F*h*w, H, D]
    at_p = rope.apply(x, 700, 3, 2, 4)
    for delta in (5.0, -693.5, 2000.25):
        moved = rope.rotate_time(at_p, delta)
        expected = rope.apply_at(x, 700 + delta, 3, 2, 4)
        assert torch.allclose(moved, expected, rtol=0, atol=1e-9), delta
    x32 = x.float()
    assert torch.allclose(rope.rotate_time(rope.apply(x32, 10, 3, 2, 4), 3.0), rope.apply(x32, 13, 3, 2, 4),
                          atol=2e-6)


class _Layer:
    def __init__(self, k):
        self.k = k

    def memory_slot(self, offset, tokens):
        return self.k[:, offset:offset + tokens], None


class _Ctx:
    def __init__(self, k):
        self.layers = [type("S", (), {"self_kv": _Layer(k)})()]


def micro_model():
    """The interface facts re-rotation reads, for MG2's micro configuration with MG2's 1024-frame
    rotary table, so the horizon is MG2's chunk 341 (no networks needed)."""
    micro = model_config("micro")
    micro = dataclasses.replace(micro, dit=dataclasses.replace(micro.dit, rope_table_frames=1024))
    assert horizon_chunk(micro) == 341
    rope = DiTRope(micro.dit.head_dim, micro.dit.rope_split, micro.dit.rope_theta)
    return SimpleNamespace(layout=micro.kv_layout(), grid=micro.video_grid(),
                           horizon_chunk=horizon_chunk(micro),
                           rotate_time=lambda layer, keys, delta: rope.rotate_time(keys, delta))


def test_rerotate_moves_entering_chunks_only_past_the_horizon():
    micro = model_config("micro")
    cfg = resolve_session_config(None, {"model": "micro", "positions": "rerotate"})
    rot = Rerotation.for_session(cfg, micro_model())
    tokens = micro.tokens_per_chunk
    k = torch.randn(1, 2 * tokens, micro.dit.num_heads, micro.dit.head_dim)
    ctx = _Ctx(k.clone())
    rot.entered(0, 300)
    assert rot.update(340, ctx, [300, None]) == 0 and torch.equal(ctx.layers[0].self_kv.k, k)
    rot.entered(1, 330)
    assert rot.update(345, ctx, [300, 330]) == 1                       # only the chunk that entered
    assert torch.equal(ctx.layers[0].self_kv.k[:, :tokens], k[:, :tokens])
    assert rot.position[1] == rot.target(345) == 345 * 3 - 7.5 - 3
    # a resident chunk is moved again once it would leave the native table's reach
    assert rot.update(300 + 342, ctx, [300, 330]) == 1
    assert rot.position[0] == rot.target(642)
    assert Rerotation.for_session(resolve_session_config(None, {"positions": "extend"}), micro_model()) is None
