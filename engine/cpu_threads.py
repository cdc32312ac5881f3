"""How many threads torch computes with on a CPU (``--threads``, ``threads`` in the config).

Owns ``apply_cpu_threads(cfg, device)``: on a CPU, torch's intra-op threads are ``cfg.threads``, else
``OMP_NUM_THREADS`` when it is set (the user's or a batch worker's share), else ``DEFAULT_CPU_THREADS``.
Why not torch's own default (one thread per core): its OpenMP team waits at a barrier after every
operation, so each other process that takes a core for a moment stalls the whole team; on a 2-core
machine shared with anything else a session ran 3.7x slower with two threads than with one, and one
thread loses little on an idle machine (docs/performance.md, "CPU threads"). The decode worker and the
memory's transfer threads keep their own single threads. A GPU session is unaffected. Returns the
count in force, for the log's header. Owns ``decode_overlap(cfg, device)`` too: the decode worker
runs by default on a CPU (one intra-op thread for the model, the other core decodes: the setting that
won idle and beside CPU burners), off on a GPU (where decode would contend for the device's memory).
"""
from __future__ import annotations

import os

DEFAULT_CPU_THREADS = 1


def cpu_threads(cfg, environ=os.environ) -> int | None:
    """The intra-op threads a CPU session should use; None: leave torch's setting (OMP_NUM_THREADS)."""
    if cfg.threads is not None:
        return cfg.threads
    if environ.get("OMP_NUM_THREADS", "").strip():
        return None
    return DEFAULT_CPU_THREADS


def apply_cpu_threads(cfg, device) -> int:
    import torch

    if getattr(device, "type", str(device)) == "cpu":
        wanted = cpu_threads(cfg)
        if wanted is not None and torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)
    return torch.get_num_threads()


def decode_overlap(cfg, device) -> bool:
    """Whether chunk c is decoded on a worker while c+1 denoises: the config's ``decode_overlap``, or by
    default on a CPU device."""
    if cfg.decode_overlap is not None:
        return bool(cfg.decode_overlap)
    return getattr(device, "type", str(device)) == "cpu"
