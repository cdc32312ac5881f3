"""``AttentionContext(paging="layer")``: the context's K/V on the host, one layer's page on the device.

The same operations on a chunk-paged and a layer-paged context (write the chunk, attend, fill memory
slots, commit, save and load) give the same attended K/V bit for bit; the pager holds two pages (the
layer computed and the next one, prefetched as the layer is taken), counts what it copies, drops its pages
when the host side changes, and its size is ``engine.planner.kv_paging``'s formula.
"""
from __future__ import annotations

import subprocess
import sys

import torch

from engine.facts.layout import KVLayout
from engine.model.kv_context import AttentionContext
from engine.planner.kv_paging import context_tokens, paged_kv_bytes_per_layer, paged_kv_device_bytes

LAYOUT = KVLayout(layers=4, tokens_per_frame=3, frames_per_chunk=2, heads=2, head_dim=4, window_frames=4)
MEMORY_CHUNKS = 2


def _pair(paging: str, layout: KVLayout = LAYOUT) -> AttentionContext:
    return AttentionContext(layout, memory_chunks=MEMORY_CHUNKS, dtype=torch.bfloat16, paging=paging)


def _chunk_kv(seed: int, layer: int):
    g = torch.Generator().manual_seed(seed * 100 + layer)
    shape = (1, LAYOUT.tokens_per_chunk, LAYOUT.heads, LAYOUT.head_dim)
    return (torch.randn(shape, generator=g).to(torch.bfloat16), torch.randn(shape, generator=g).to(torch.bfloat16))


def _forward(ctx: AttentionContext, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """What a model's forward does per layer: write the chunk's K/V, then attend the context."""
    seen = []
    for layer, state in enumerate(ctx.layers):
        state.self_kv.write_current(*_chunk_kv(seed, layer))
        k, v = state.self_kv.context()
        seen.append((k.clone(), v.clone()))
    return seen


def _fill_memory(ctx: AttentionContext, seed: int, slots: int) -> None:
    tokens = LAYOUT.tokens_per_chunk
    for slot in range(slots):
        for layer, state in enumerate(ctx.layers):
            k_dst, v_dst = state.self_kv.memory_slot((MEMORY_CHUNKS - 1 - slot) * tokens, tokens)
            k, v = _chunk_kv(1000 + seed * 10 + slot, layer)
            k_dst.copy_(k)
            v_dst.copy_(v)
    for state in ctx.layers:
        state.self_kv.set_memory_valid(slots * tokens)


def _session(ctx: AttentionContext, chunks: int = 5, passes: int = 2):
    out = []
    for chunk in range(chunks):
        if chunk >= 3:   # the window is full: retrieved chunks are attended (refilled every chunk)
            _fill_memory(ctx, chunk, 1 + chunk % 2)
        for p in range(passes):
            out.append(_forward(ctx, chunk * 10 + p))
        ctx.commit()
    return out


def test_layer_paging_attends_the_same_bytes_as_chunk_paging():
    whole, paged = _pair("chunk"), _pair("layer")
    a, b = _session(whole), _session(paged)
    assert len(a) == len(b) == 10
    for pass_a, pass_b in zip(a, b):
        for (ka, va), (kb, vb) in zip(pass_a, pass_b):
            assert torch.equal(ka, kb) and torch.equal(va, vb)
    assert any(k.shape[1] == context_tokens(LAYOUT, MEMORY_CHUNKS) for p in a for k, _ in p)   # memory + window attended
    for sa, sb in zip(whole.state_tensors().items(), paged.state_tensors().items()):   # save points: same bytes
        assert sa[0] == sb[0] and torch.equal(sa[1], sb[1])
    for (ka, va), (kb, vb) in zip(whole.stored_kv(), paged.stored_kv()):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_the_context_lives_on_the_host_and_two_pages_on_the_device():
    paged = _pair("layer")
    assert all(s.self_kv.k.device.type == "cpu" for s in paged.layers)
    assert len(paged.pager.pages) == 2
    assert paged.kv_device_bytes == paged_kv_device_bytes(LAYOUT, MEMORY_CHUNKS, buffers=2, value_bytes=2)
    assert _pair("chunk").kv_device_bytes == paged_kv_device_bytes(LAYOUT, MEMORY_CHUNKS, buffers=LAYOUT.layers)
    assert paged.kv_bytes_to_device == 0 and _pair("chunk").kv_bytes_to_device == 0


def test_taking_a_layer_prefetches_the_next():
    paged = _pair("layer")
    _session(paged, chunks=4, passes=1)
    pager = paged.pager
    state = paged.layers[1].self_kv
    state.write_current(*_chunk_kv(7, 1))
    assert sorted(p.layer for p in pager.pages) == [1, 2]      # layer 1 computed, layer 2 on its way
    assert pager.active.layer == 1
    paged.layers[2].self_kv.write_current(*_chunk_kv(7, 2))
    assert sorted(p.layer for p in pager.pages) == [2, 3]
    paged.layers[3].self_kv.write_current(*_chunk_kv(7, 3))
    assert sorted(p.layer for p in pager.pages) == [2, 3]      # the last layer: nothing after it


def test_bytes_copied_are_the_memory_and_window_per_layer_and_forward():
    paged = _pair("layer")
    _session(paged, chunks=3, passes=1)                      # the window fills up
    before = paged.kv_bytes_to_device
    _fill_memory(paged, 9, MEMORY_CHUNKS)
    _forward(paged, 99)
    moved = paged.kv_bytes_to_device - before
    assert moved == LAYOUT.layers * paged_kv_bytes_per_layer(LAYOUT, MEMORY_CHUNKS)


def test_a_change_on_the_host_drops_the_pages():
    """Without the drop, the second forward would attend the previous memory (two layers: both pages
    still hold a layer from the forward before)."""
    two = KVLayout(layers=2, tokens_per_frame=3, frames_per_chunk=2, heads=2, head_dim=4, window_frames=4)
    whole, paged = _pair("chunk", two), _pair("layer", two)
    for ctx in (whole, paged):
        _session(ctx, chunks=4, passes=1)
        _forward(ctx, 1)
        _fill_memory(ctx, 42, MEMORY_CHUNKS)                  # new chunks in the slots, between forwards
    for (ka, va), (kb, vb) in zip(_forward(whole, 2), _forward(paged, 2)):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_a_context_without_a_write_takes_the_current_chunk_from_the_host():
    whole, paged = _pair("chunk"), _pair("layer")
    for ctx in (whole, paged):
        _session(ctx, chunks=2, passes=1)
        _forward(ctx, 5)
    for layer in (0, 3, 1):   # out of order, no write before: the arena's depth layer does this
        ka, va = whole.layers[layer].self_kv.context()
        kb, vb = paged.layers[layer].self_kv.context()
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_the_planner_formula_is_torch_free():
    code = ("import sys; from engine.planner.kv_paging import paged_kv_device_bytes; "
            "from engine.facts.layout import KVLayout; "
            "print(paged_kv_device_bytes(KVLayout(40, 1560, 3, 40, 128, 12), 3), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # LingBot-fast, 3 retrieved chunks: 2 x (3 x 4680 + 18720 + 4680) tokens x 40 x 128 x 2 x 2 bytes
    assert out.stdout.split() == [str(2 * 37440 * 40 * 128 * 2 * 2), "False"]


def test_a_stored_chunk_reaches_the_store_one_layer_at_a_time():
    """With layer paging the chunk's K/V are on the host; the store reads them per layer on its device
    (here the CPU: the same bytes as the plain list; on the meta device: one layer held at a time)."""
    from engine.facts.kv_format import ChunkFormat
    from engine.memory.quant import quantize_chunk_into
    from engine.session.memory import LayersOnDevice

    kv = [tuple(t.float() for t in _chunk_kv(3, layer)) for layer in range(LAYOUT.layers)]
    fmt = ChunkFormat.from_layout(LAYOUT, bits=4, value_group=4, raw_dtype="float32")
    plain, lazy = (torch.zeros(fmt.slot_bytes, dtype=torch.uint8) for _ in range(2))
    quantize_chunk_into(kv, fmt, plain)
    quantize_chunk_into(LayersOnDevice(kv, torch.device("cpu")), fmt, lazy)
    assert torch.equal(plain, lazy)
    layers = LayersOnDevice(kv, torch.device("meta"))
    seen = []
    for index, (k, v) in enumerate(layers):
        assert k.device.type == "meta" and k.shape == kv[index][0].shape
        seen.append(layers._last[0])
    assert seen == list(range(LAYOUT.layers)) and len(layers) == LAYOUT.layers
