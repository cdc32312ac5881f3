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
And ``one_intra_op_thread(device)``, the scope the VAE computes in on a CPU: oneDNN's convolutions with a
bias, and its 3-D convolutions, sum in another order on two threads than on one (the tiny model's
start-image encoder: 1x1 conv 64 -> 192 with bias, one thread vs two), so a VAE run on the loop's N
threads and one run on the decode worker's single thread gave different frames, and a run resumed with
another ``--threads`` or decode overlap another MP4. On one thread everywhere the VAE's output depends on
neither (tests/unit/test_cpu_threads.py). The denoisers' matrix products are another matter: MKL splits a
long reduction between threads (LingBot's text projection, 4096 -> 128 features), so a CPU run resumed
with another ``--threads`` than its own may differ in the last bits from then on; resumed with its own
(the saved config's, what ``resume`` uses unless told otherwise) it is the same bytes.
"""
from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def one_intra_op_thread(device):
    """Compute on one intra-op thread inside the block (on a CPU; elsewhere nothing changes)."""
    import torch

    before = torch.get_num_threads()
    if getattr(device, "type", str(device)) != "cpu" or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
