"""``--kv-paging layer`` makes the same session as ``--kv-paging chunk``, bit for bit, on every model family.

Short sessions of the arena model, MG2 ``micro`` and ``tiny`` and ``lingbot-tiny``, long enough for the
window to fill and for retrieved chunks to be attended (hits), run with each paging: the model's output
latents are ``torch.equal`` chunk for chunk and the MP4s are the same bytes. The log says which paging
ran (header) and, per chunk, the context K/V copied to the device and the device's K/V buffers. A run
with layer paging stopped and resumed from its save point equals the uninterrupted chunk-paged run.
"""
from __future__ import annotations

import pytest
import torch

from engine.settings.overlay import resolve_session_config
from engine.session.loop import Session
from engine.runtime.telemetry import read_log
from tests_support import resumed_equals_uninterrupted


def _config(root, model: str, paging: str, chunks: int, save_every: int = 0, **memory):
    name = f"{model}-{paging}"
    return resolve_session_config(None, {
        "model": model, "device": "cpu", "chunks": chunks, "save_every": save_every, "out": str(root / f"{name}.mp4"),
        "memory": {"pool_slots": 4, "late_prefetch": "wait", "retrieve_k": 2, "kv_paging": paging,
                   "spill": str(root / f"{name}.spill"), **memory}})


def _run(cfg) -> tuple[list[torch.Tensor], list[dict], dict]:
    latents: list[torch.Tensor] = []
    assert Session(cfg, on_output=lambda chunk, x: latents.append(x.clone())).run().status == "done"
    records = read_log(cfg.log_path)
    return latents, [r for r in records if r.get("type") == "chunk"], records[0]


@pytest.mark.parametrize("model, chunks, memory", [
    ("arena", 7, {}),
    ("micro", 6, {}),
    ("micro", 8, {"keys": "pre-rope", "sink": True}),   # keys rotated as they enter, a sink, past the horizon
    ("micro", 5, {"store": "device-only"}),              # the resident chunks stay on the device
    ("lingbot-tiny", 5, {}),
    ("tiny", 3, {}),
], ids=["arena", "micro", "micro-pre-rope-sink", "micro-device-only", "lingbot-tiny", "tiny"])
def test_layer_paging_equals_chunk_paging(tmp_path, model, chunks, memory):
    whole, whole_chunks, whole_header = _run(_config(tmp_path, model, "chunk", chunks, **memory))
    paged, paged_chunks, paged_header = _run(_config(tmp_path, model, "layer", chunks, **memory))
    assert len(whole) == len(paged) == chunks
    for a, b in zip(whole, paged):
        assert torch.equal(a, b)
    assert (tmp_path / f"{model}-chunk.mp4").read_bytes() == (tmp_path / f"{model}-layer.mp4").read_bytes()
    assert sum(r["hits"] for r in paged_chunks) > 0                   # retrieved chunks were attended
    assert [r["memory"] for r in whole_chunks] == [r["memory"] for r in paged_chunks]
    assert (whole_header["kv_paging"], paged_header["kv_paging"]) == ("chunk", "layer")
    assert all(r["kv_bytes_to_device"] == 0 for r in whole_chunks)   # it stays on the device
    assert paged_chunks[0]["kv_bytes_to_device"] == 0                 # nothing in the window yet
    assert all(r["kv_bytes_to_device"] > 0 for r in paged_chunks[1:])
    assert paged_chunks[-1]["kv_device_bytes"] <= whole_chunks[-1]["kv_device_bytes"]


def test_a_layer_paged_run_resumed_equals_the_chunk_paged_run(tmp_path):
    whole = _config(tmp_path, "micro", "chunk", 6, sink=True)
    cut = _config(tmp_path, "micro", "layer", 6, save_every=1, sink=True)
    assert resumed_equals_uninterrupted(whole, cut, 3).chunk == 4
