"""Where ``worldpager plan`` takes the host process baseline from: a figure, a session log's header, or
the assumed one (MG2 on CUDA, ``engine.planner.model.HOST_BASELINE_GIB``).

Owns ``log_baseline`` (the ``host_baseline_bytes`` a session's store measured, from its log's header; a
FIFO or a /proc file is refused, not waited on) and ``baseline_bytes`` (which of the sources applies; two
given at once is one line). No torch.
"""
from __future__ import annotations

import math
from pathlib import Path

from engine.errors import ConfigError
from engine.planner import model as planner

GiB = 1 << 30


def log_baseline(path: Path) -> int:
    """The process baseline a session's store measured (``host_baseline_bytes`` in its log header)."""
    from engine.files.input_files import open_input
    from engine.runtime.telemetry import MAX_LINE_BYTES, line_problem
    try:
        with open_input(path, "--baseline-from") as f:   # a FIFO or /proc file: refused, not waited on
            header, problem = line_problem(f.readline(MAX_LINE_BYTES + 2) or b"{}")
    except OSError as exc:
        raise ConfigError(f"--baseline-from {path}: not a readable session log ({exc.strerror or exc})") from None
    if problem is not None:
        raise ConfigError(f"--baseline-from {path}: not a readable session log (line 1 is {problem})")
    value = header.get("host_baseline_bytes") if isinstance(header, dict) and header.get("type") == "header" else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"--baseline-from {path}: its header has no host_baseline_bytes "
                          "(not a session log, or a session without a host pool)")
    return value


def baseline_bytes(baseline_gib: float | None, baseline_from: Path | None, measured=None) -> int:
    if baseline_gib is not None and baseline_from is not None:
        raise ConfigError("give only one of --baseline-gib, --baseline-from")
    if baseline_from is not None:
        return log_baseline(baseline_from)
    if baseline_gib is None and measured is not None and measured.host_baseline is not None:
        return measured.host_baseline
    gib = planner.HOST_BASELINE_GIB if baseline_gib is None else baseline_gib
    if not (math.isfinite(gib) and gib >= 0):
        raise ConfigError(f"--baseline-gib must be a non-negative number of GiB, got {gib}")
    return int(gib * GiB)
