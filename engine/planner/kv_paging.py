"""The device's context K/V under ``--kv-paging layer``, as a number (torch-free; the planner imports it).

Owns the formula: with layer paging the device holds ``buffers`` layers' self-attention context (two: the
layer being computed and the next one, prefetched), each ``[ memory | window | current ]`` tokens of
keys and values over every head. With chunk paging it is the same with ``buffers = layers``.
"""
from __future__ import annotations

from engine.facts.layout import KVLayout


def context_tokens(layout: KVLayout, memory_chunks: int) -> int:
    """Tokens of one layer's context: retrieved memory (and sink) chunks, the local window, the chunk."""
    assert memory_chunks >= 0
    return (memory_chunks + 1) * layout.tokens_per_chunk + layout.window_tokens


def paged_kv_device_bytes(layout: KVLayout, memory_chunks: int, buffers: int = 2, value_bytes: int = 2) -> int:
    """Bytes of context K/V on the device: buffers x (memory + window + current tokens) x heads x head_dim
    x 2 (K and V) x value_bytes."""
    assert buffers >= 1 and value_bytes >= 1
    return buffers * context_tokens(layout, memory_chunks) * layout.heads * layout.head_dim * 2 * value_bytes


def paged_kv_bytes_per_layer(layout: KVLayout, memory_chunks: int, value_bytes: int = 2) -> int:
    """Bytes copied to the device per layer and forward once the window and memory are full: the memory
    and window tokens' K and V (the current chunk is computed there)."""
    tokens = context_tokens(layout, memory_chunks) - layout.tokens_per_chunk
    return tokens * layout.heads * layout.head_dim * 2 * value_bytes
