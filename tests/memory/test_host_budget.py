"""Host RSS never exceeds ``--host-mem``: the pool is sized from the budget less the process's measured
baseline, the CPU staging slots and the margin, allocated (pre-faulted) at start-up, and nothing else
grows past the budget.

A fresh process (the CLI), so that the baseline is a session's own and not this test runner's.
"""
from __future__ import annotations

import subprocess

from engine.facts.kv_format import ChunkFormat
from engine.memory.budget import pool_slots
from engine.model.registry import model_kv_layout
from engine.settings.overlay import resolve_session_config
from engine.planner.session_kv import staging_chunks
from engine.runtime.telemetry import read_log
from tests_support import WORLDPAGER

GiB = 1 << 30
HOST_MEM_GIB = 3.25
CHUNKS = 30    # more than the budget's slots (about 22 unquantised chunks of 33 MB): the pool is budget-bound
FLAGS = ["--model", "synthetic", "--chunk-ms", "0", "--kv-scale", "0.034", "--kv-bits", "16", "--chunks",
         str(CHUNKS), "--host-mem", str(HOST_MEM_GIB), "--save-every", "0"]


def test_every_chunk_rss_stays_under_host_mem(tmp_path):
    out = tmp_path / "budget.mp4"
    run = subprocess.run(WORLDPAGER + ["generate", *FLAGS, "--spill", str(tmp_path / "spill"), "--out", str(out),
                                       "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    records = read_log(out.with_suffix(".log.jsonl"))
    header, summary = records[0], records[-1]
    chunks = [r for r in records if r["type"] == "chunk"]
    cfg = resolve_session_config(None, {"model": "synthetic", "kv_scale": 0.034, "chunks": CHUNKS, "out": out,
                                        "memory": {"host_mem_gib": HOST_MEM_GIB, "kv_bits": 16}})
    layout = model_kv_layout(cfg)
    slot = ChunkFormat.from_layout(layout, bits=16, raw_dtype="float32").slot_bytes
    staging = staging_chunks(cfg, layout) * layout.bytes_per_chunk(4)
    budget = int(HOST_MEM_GIB * GiB)
    # the pool is what the budget leaves after the measured baseline, the staging slots and the margin
    # (fewer slots than chunks: the budget, not the length, sized it) ...
    want = pool_slots(budget, header["host_baseline_bytes"] + staging, slot)
    assert want < CHUNKS and summary["pool_bytes"] == want * slot
    # ... and every chunk's resident memory, the pre-faulted pool included, stays under the budget
    rss = [r["rss_bytes"] for r in chunks]
    assert len(rss) == CHUNKS and max(rss) <= budget, [round(r / GiB, 3) for r in rss]
    assert summary["rss_bytes"]["max"] <= budget
