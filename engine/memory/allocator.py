"""Pin the C allocator's thresholds so that host memory stays constant from the first chunks.

Contract. ``pin_allocator()`` sets glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` to
``THRESHOLD_BYTES`` (480 KiB) through ``mallopt``, once per process, and returns an ``AllocatorPin``
saying whether it applied and why not. Elsewhere (musl, macOS, Windows) it does nothing and says so.

Why fixed. glibc starts with a *dynamic* mmap threshold: each time a block served by ``mmap`` is freed,
the threshold rises to that block's size (up to 32 MiB). After the first chunk, per-chunk working
buffers of a few MiB are then carved out of the heaps (one arena per thread) instead of being mapped and
unmapped, and the freed holes between longer-lived blocks keep those heaps' pages resident: measured, a
3000-chunk synthetic session grew from 0.77 GiB over its first 250 chunks to 1.06 GiB by chunk 1000
(+38 %), then stayed flat. That is fragmentation, not a leak. Setting either threshold explicitly
turns the dynamic adjustment off, which is what keeps it fixed.

Why 480 KiB. The threshold trades speed against flatness. Below it, every temporary is mapped, page
faulted and unmapped per operation: at 128 KiB a CPU model pays that on most of its activations (the
arena model's forward, 150 chunks on 2 shared cores: 61-65 ms a chunk at 128 KiB, 43 ms at 480 KiB,
41 ms at 4 MiB). Above it, a temporary made per chunk comes from the heap and fragments it. The store
itself makes none (quantiser, disk I/O and staging write into buffers made once:
``tests/memory/test_hot_path_buffers.py``), but a synthetic session still makes its frames per chunk
outside the store: the model's decode (fp32 [12, 3, 44, 80], 495 KiB) and the video writer's conversion
of them (five more of 495 KiB). ``bench memory`` (520 chunks, KV scale 0.034, 16 pool slots), drift of
the 100-chunk RSS medians: 256 KiB 0.30 %, 480 KiB 0.45-0.60 %, 512 KiB 1.9-5.9 %, 1 MiB 8.3 %,
2 MiB 9.8 %, 4 MiB 2.6-3.5 %. With the frames path making its buffers once (tried by patching it),
4 MiB measured 0.44 %: that is the threshold to move to then.

``WORLDPAGER_MALLOC=default`` leaves the allocator as the C library configured it (no ``mallopt``
call): the switch exists to show the growth above, e.g. in ``tests/memory/test_rss_flat.py``.
"""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import asdict, dataclass

from engine.errors import ConfigError

THRESHOLD_BYTES = 480 * 1024   # just under the synthetic session's 495 KiB per-chunk frames (see above)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3    # from glibc's <malloc.h>
ENV_VAR = "WORLDPAGER_MALLOC"                  # "pinned" (default) or "default"


@dataclass(frozen=True)
class AllocatorPin:
    """What ``pin_allocator`` did (recorded in the session log's header)."""

    applied: bool
    libc: str                     # e.g. "glibc 2.36", or "unknown"
    mmap_threshold: int | None    # bytes, when applied
    trim_threshold: int | None
    reason: str                   # why not applied ("" when applied)

    def as_record(self) -> dict:
        return asdict(self)


_lock = threading.Lock()
_result: AllocatorPin | None = None


def _glibc() -> tuple[ctypes.CDLL | None, str]:
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version
    except (OSError, AttributeError, TypeError):   # no C library to open, or not glibc
        return None, "unknown"
    version.restype = ctypes.c_char_p
    return libc, f"glibc {version().decode()}"


def pin_allocator(threshold: int = THRESHOLD_BYTES) -> AllocatorPin:
    """Fix glibc's mmap and trim thresholds at ``threshold`` bytes (once per process; idempotent)."""
    global _result
    with _lock:
        if _result is None:
            _result = _pin(threshold)
        return _result


def _pin(threshold: int) -> AllocatorPin:
    setting = os.environ.get(ENV_VAR, "pinned").strip().lower() or "pinned"
    if setting not in ("pinned", "default"):
        raise ConfigError(f"{ENV_VAR}={setting!r} (choose pinned or default)")
    libc, name = _glibc()
    if setting == "default":
        return AllocatorPin(False, name, None, None, f"{ENV_VAR}=default")
    if libc is None:
        return AllocatorPin(False, name, None, None, "not glibc: mallopt thresholds not set")
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, threshold) == 1 and mallopt(M_TRIM_THRESHOLD, threshold) == 1
    if not ok:
        return AllocatorPin(False, name, None, None, "mallopt refused the thresholds")
    return AllocatorPin(True, name, threshold, threshold, "")
