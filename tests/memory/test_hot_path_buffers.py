"""The store's per-chunk path allocates nothing KV-sized: buffers are made once and written through.

What would fail here is a temporary per chunk (a quantiser scale widened to fp32, a min/max tensor, a
fresh block): each is host memory churn that, depending on the allocator's mmap threshold, costs page
faults every chunk or fragments the heap until RSS creeps (``tests/memory/test_rss_flat.py``).
"""
from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from engine.config import model_config
from engine.kernels import ops, reference
from engine.facts.kv_format import ChunkFormat
from engine.memory import quant
from engine.memory.store import KVStore

CFG = model_config("tiny")
LAYOUT = CFG.kv_layout()
INT4 = ChunkFormat.from_layout(LAYOUT, bits=4)
SHAPE = (1, LAYOUT.tokens_per_chunk, LAYOUT.heads, LAYOUT.head_dim)   # [B, T, H, D]


def chunk_kv(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(SHAPE, generator=g), torch.randn(SHAPE, generator=g)) for _ in range(LAYOUT.layers)]


def allocated_bytes(fn) -> list[int]:
    """Sizes of the CPU allocations torch records while ``fn`` runs (on this thread)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return [e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0]


def test_a_chunk_is_quantised_and_read_back_without_temporaries():
    block = torch.empty(INT4.slot_bytes, dtype=torch.uint8)   # a pool slot
    out = [(torch.empty(SHAPE), torch.empty(SHAPE)) for _ in range(LAYOUT.layers)]   # staging views

    def one_chunk(seed: int) -> None:
        quant.quantize_chunk_into(chunk_kv(seed), INT4, block)
        quant.dequantize_chunk_into(block, INT4, out)

    kv = chunk_kv(1)
    one_chunk(0)   # the first chunk makes this thread's working buffers
    sizes = allocated_bytes(lambda: (quant.quantize_chunk_into(kv, INT4, block),
                                     quant.dequantize_chunk_into(block, INT4, out)))
    # Scalars only (a few bytes each); one [T, C/group] fp32 temporary alone would be kilobytes.
    smallest_temporary = LAYOUT.tokens_per_chunk * LAYOUT.heads * LAYOUT.head_dim // INT4.value_group * 4
    assert sum(sizes) < 1024 < smallest_temporary, sorted(sizes, reverse=True)[:8]


def test_working_buffers_are_made_once_per_thread():
    x = chunk_kv(2)[0][1][0].reshape(LAYOUT.tokens_per_chunk, -1)   # [T, C]
    codes, scale, zero = ops.quantize_values(x, 4, INT4.value_group)
    ptrs = {name: reference._work(name, (1,), torch.float32, x.device).data_ptr()
            for name in ("encode", "min", "max")}
    again = ops.quantize_values(x * 2, 4, INT4.value_group, codes, scale, zero)
    assert [t.data_ptr() for t in again] == [codes.data_ptr(), scale.data_ptr(), zero.data_ptr()]
    assert ptrs == {name: reference._work(name, (1,), torch.float32, x.device).data_ptr() for name in ptrs}


def test_staged_chunks_are_views_of_the_staging_banks_made_at_start():
    with KVStore(LAYOUT, INT4, n_slots=8, k_slots=2) as store:
        banks = store._banks
        lo, hi = banks.data_ptr(), banks.data_ptr() + banks.numel() * banks.element_size()
        seen = set()
        for c in range(4):
            store.put(c, chunk_kv(c))
            staged = store.load_now([c])
            k, v = staged.kv[c][0]
            assert lo <= k.data_ptr() < hi and lo <= v.data_ptr() < hi
            seen.add(k.data_ptr())
        assert len(seen) == 1   # one bank, staging slot 0 every time: the same memory
        assert store._banks is banks
