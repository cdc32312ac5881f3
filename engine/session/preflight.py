"""Checks of a session's settings that must pass before any output file exists (no torch).

Owns three refusals, each a one-line ``WorldPagerError`` naming the bad value and the fix:

* ``check_output_paths(cfg)`` — the video, the log and the resolved config are three different files,
  none of them an input (``--log`` equal to ``--out`` would interleave JSON with the MP4's bytes), and
  the log can be created (not a directory, in an existing, writable directory); each is a regular file
  or not there yet, and neither the log nor the config is a file another process writes under any
  name (``engine.files.output_files``; the video's claim checks the video).
* ``check_spill_drive(cfg, block_bytes)`` — the ``--spill`` directory (of a store mode that uses it)
  is a directory, or can be created under an existing one, can be written (a probe file made and
  removed, with O_DIRECT where the file system takes it: a read-only mount is refused whoever runs
  it; ``spill_home``, which ``worldpager doctor --spill`` asks too), and its drive has room for one stored chunk and the index's reserve. A file system that reports no size at all (ramfs: 0 blocks) has free space
  unknown, not 0: it is not refused for it (``usable_free_bytes``). The room the directory's own tier
  already holds counts as free (``engine.memory.room.tier_room``: a fresh run truncates its block file,
  a resumed one writes into the file's allocated room past its blocks), so a small drive the tier filled
  before a kill is not refused. A probe that fails for a reason other than absence (EIO, ENOMEM, EACCES
  on a parent) is one line naming the path and the errno (``engine.files.probe``).
* ``check_spill_quota(cfg, layout, dtype_name)`` — a ``--spill-max`` that can be read and that holds at
  least what the session pins at once (``engine.memory.quota.check_quota``); without ``--spill`` it is
  refused too (a quota of no drive is a mistake, not a no-op).
* ``check_memory(cfg, grid, layout, ...)`` — what the settings will allocate fits the memory budget.
  The estimate (``estimate_memory``) counts what grows with a setting, not the process itself:

  - trajectory: ``TRAJECTORY_BYTES_PER_FRAME`` per video frame of the whole session — set-up expands
    the trajectory to every frame up front (actions, poses, the per-frame camera states integrated
    in Python, the model's per-frame copies); measured ≈ 0.5 KiB per frame for the arena, micro and
    synthetic models, doubled to cover what grows per chunk while the session runs (the summary's
    values, the retrieval keys). This is what ``--chunks``/``--seconds``/``--minutes`` cost.
  - attention context: ``layout.bytes_per_chunk`` at the model dtype per chunk of tokens it holds:
    ``retrieve_k`` (+ 1 with the sink) memory slots, the local window and the current chunk.
  - staging slots (store modes with a tiered store): ``max(retrieve_k, 1)`` more chunks, the hedges'
    and the device cache (``engine.planner.session_kv``).
  - host pool: ``--pool-slots`` x the stored slot size, or its minimum of ``MIN_SLOTS`` slots when the
    pool is sized from the budget (it then takes what the budget leaves, by construction).

  On a CPU everything is host memory; on CUDA the context and the staging slots are device memory,
  checked against ``--device-mem`` (else the device's free memory) — with ``--kv-paging layer`` only
  the two layer pages are, every layer's context and the staging slots count as host memory. The host
  budget is ``--host-mem`` less this process's resident memory now and the 2 GiB margin (the pool-sizing
  rule, ``engine.memory.budget``), else the memory available now. Not counted: the model's weights and
  per-chunk working buffers — the margin is for those, and the pool's own check at start-up still
  applies once the model is loaded.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from engine.files import probe
from engine.config import SessionConfig
from engine.errors import ConfigError, OutputError
from engine.facts.kv_format import ChunkFormat
from engine.facts.layout import KVLayout, VideoGrid
from engine.memory.budget import DEFAULT_MARGIN, MIN_SLOTS
from engine.memory.quota import QuotaPlan, check_quota, format_tag, parse_spill_max
from engine.memory.room import tier_room
from engine.files.output_files import check_output_file, refuse_in_use
from engine.planner.session_kv import (TIERED_STORES, all_staging_chunks, context_chunks, context_device_bytes,
                                       context_host_bytes, host_staging_chunks, staging_chunks)

GiB, MiB = 1 << 30, 1 << 20
TRAJECTORY_BYTES_PER_FRAME = 1024
SPILL_RESERVE_BYTES = MiB   # the disk tier keeps this free for its index (engine.memory.disk.RESERVE_BYTES)
SPILL_FIX = "check or replace the drive, or choose another --spill"


# ---- output paths ------------------------------------------------------------------------------

def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def check_output_paths(cfg: SessionConfig) -> None:
    """Refuse outputs that collide with one another or with an input, and a log that cannot be made."""
    log, out, config = cfg.log_path, cfg.out, cfg.config_path
    if _same_file(log, out):
        raise OutputError(f"--log {log} is the video file (--out {out}); give the log its own name "
                          f"(default: {out.with_suffix('.log.jsonl')})")
    if _same_file(log, config):
        raise OutputError(f"--log {log} is where the resolved config is written (beside --out {out}); "
                          f"give the log another name (default: {out.with_suffix('.log.jsonl')})")
    if _same_file(out, config):
        raise OutputError(f"--out {out}: the resolved config would be written to the same file; "
                          f"give the video a .mp4 name")
    for flag, source in (("--image", cfg.image), ("--trajectory", cfg.trajectory)):
        for name, path in (("--out", out), ("--log", log), ("the resolved config", config)):
            if source is not None and _same_file(path, source):
                raise OutputError(f"{name} {path} is the {flag} file: it would be overwritten; "
                                  f"write the outputs elsewhere")
    _check_log_path(log)
    for name, path in (("--out", out), ("--log", log), ("the resolved config", config)):
        check_output_file(path, name, None if name.startswith("--") else "move it away, or choose another --out")
        if path is not out:   # the video's writer is probed by its claim (engine.session.ownership)
            refuse_in_use(path, name)


def _check_log_path(log: Path) -> None:
    parent = log.parent
    if log.is_dir():
        raise OutputError(f"--log {log} is a directory; give a file name, e.g. --log {log / 'session.log.jsonl'}")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"--log {log}: {parent} {what}; create the directory or choose another --log")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"--log {log}: directory {parent} is not writable; choose another --log")


# ---- the spill drive ----------------------------------------------------------------------------

def usable_free_bytes(st: os.statvfs_result) -> int | None:
    """Bytes an unprivileged writer may still use; None when the file system reports no size (ramfs)."""
    if st.f_blocks == 0:
        return None
    return st.f_bavail * st.f_frsize


def check_spill_drive(cfg: SessionConfig, block_bytes: int, reopening: bool = False) -> None:
    """Refuse a ``--spill`` the disk tier could not use (see the module docstring); creates nothing.
    ``reopening``: a resume that goes on in the directory (its tier's room past its blocks is its own)."""
    spill = cfg.memory.spill
    if spill is None or cfg.memory.store not in TIERED_STORES or cfg.memory.store == "dram-only":
        return
    spill = Path(spill)
    existing = spill_home(spill)
    free = usable_free_bytes(probe.statvfs(existing, "--spill", SPILL_FIX))
    need = block_bytes + SPILL_RESERVE_BYTES
    if free is not None and free < need:
        room = tier_room(spill, resume=reopening, fix=SPILL_FIX) if existing == spill else 0
        if free + room < need:
            held = f" (and {room / MiB:.1f} MiB inside its blocks file)" if room else ""
            raise OutputError(f"--spill {spill}: its drive has {free / MiB:.1f} MiB free{held}; one stored chunk "
                              f"and the index need {need / MiB:.1f} MiB; free space or choose another --spill")


def spill_home(spill: Path) -> Path:
    """The directory ``--spill`` is, or the existing one it will be created under (the disk tier makes
    the missing levels); refuses a file in the way or a directory that cannot be written. Creates nothing.
    ``worldpager doctor --spill`` asks the same question through here."""
    if probe.exists(spill, "--spill", SPILL_FIX) and not probe.is_dir(spill, "--spill", SPILL_FIX):
        raise OutputError(f"--spill {spill} is a file, not a directory; give a directory (it is created if missing)")
    if probe.is_dir(spill, "--spill", SPILL_FIX):
        probe.look_inside(spill, "--spill", SPILL_FIX)   # its lock, index and blocks: opened once outputs exist
    existing = spill
    while not probe.exists(existing, "--spill", SPILL_FIX):
        existing = existing.parent
    if not probe.is_dir(existing, "--spill", SPILL_FIX):
        raise OutputError(f"--spill {spill}: {existing} is a file, so the directory cannot be created")
    _probe_writable(spill, existing)
    return existing


def spill_block_bytes(cfg: SessionConfig, layout: KVLayout, dtype_name: str) -> int:
    """Bytes one stored chunk takes on the spill drive."""
    return ChunkFormat.from_layout(layout, bits=cfg.memory.kv_bits, raw_dtype=dtype_name).slot_bytes


def check_spill_quota(cfg: SessionConfig, layout: KVLayout, dtype_name: str) -> None:
    """Refuse a ``--spill-max`` the session cannot keep (see the module docstring); creates nothing."""
    text = cfg.memory.spill_max
    if text is None:
        return
    if cfg.memory.spill is None or cfg.memory.store not in TIERED_STORES or cfg.memory.store == "dram-only":
        raise ConfigError(f"--spill-max {text} needs a disk tier: give --spill DIR (store mode "
                          f"{cfg.memory.store} writes no chunks to a drive without it)")
    fmt = ChunkFormat.from_layout(layout, bits=cfg.memory.kv_bits, raw_dtype=dtype_name)
    plan = QuotaPlan.of(parse_spill_max(text, Path(cfg.memory.spill)), fmt.slot_bytes, format_tag(fmt),
                        cfg.save_every)
    check_quota(text, plan, cfg.memory.retrieve_k, layout.window_chunks, format_tag(fmt), cfg.save_every)


def _probe_writable(spill: Path, existing: Path) -> None:
    """Make and remove a file where the spill directory is (or will be): with O_DIRECT, else buffered
    (the disk tier's own fallback, which it reports when it opens the directory)."""
    probe_file = existing / f".worldpager-probe-{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        try:
            fd = os.open(probe_file, flags | getattr(os, "O_DIRECT", 0), 0o600)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            fd = os.open(probe_file, os.O_WRONLY | os.O_CREAT, 0o600)   # ramfs: made, then refused O_DIRECT
    except OSError as exc:
        where = "" if existing == spill else f" (it would be created under {existing})"
        raise OutputError(f"--spill {spill} is not writable{where}: {exc.strerror or exc}; "
                          f"choose another --spill") from None
    os.close(fd)
    with probe.probing(spill, "--spill", SPILL_FIX):
        probe_file.unlink()


# ---- memory ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes the settings allocate (see the module docstring); context and staging on the device, and
    beside a device in host memory (``--kv-paging layer``: every layer's context, the staging)."""

    trajectory: int
    context: int
    staging: int
    pool: int
    frames: int
    chunk_bytes: int          # one chunk of KV at the model dtype
    context_chunks: float     # chunks of tokens the attention context holds
    staging_chunks: int       # wherever they live
    host_context: int = 0
    host_staging: int = 0

    def total(self, on_device: bool) -> tuple[int, int]:
        """(host bytes, device bytes)."""
        device = self.context + self.staging
        host = self.trajectory + self.pool + self.host_context + self.host_staging
        return (host, device) if on_device else (host + device, 0)

    def retrieval(self, where: str, on_device: bool) -> int:
        """The context's and the staging's bytes in ``where`` (host or device)."""
        device = self.context + self.staging
        if where == "device":
            return device
        return self.host_context + self.host_staging + (0 if on_device else device)


def pool_bytes(cfg: SessionConfig, layout: KVLayout, dtype_name: str) -> int:
    """The host pool: ``--pool-slots`` slots, else its minimum (the budget-sized rest is free by rule)."""
    if cfg.memory.store not in TIERED_STORES:
        return 0
    fmt = ChunkFormat.from_layout(layout, bits=cfg.memory.kv_bits, raw_dtype=dtype_name)
    slots = cfg.memory.pool_slots if cfg.memory.pool_slots is not None else MIN_SLOTS
    return slots * fmt.slot_bytes


def estimate_memory(cfg: SessionConfig, grid: VideoGrid, layout: KVLayout, dtype_bytes: int,
                    dtype_name: str) -> MemoryEstimate:
    frames = grid.frames_total(cfg.chunks)
    chunk = layout.bytes_per_chunk(dtype_bytes)
    return MemoryEstimate(trajectory=frames * TRAJECTORY_BYTES_PER_FRAME,
                          context=context_device_bytes(cfg, layout, dtype_bytes),
                          staging=staging_chunks(cfg, layout) * chunk, pool=pool_bytes(cfg, layout, dtype_name),
                          frames=frames, chunk_bytes=chunk, context_chunks=context_chunks(cfg, layout),
                          staging_chunks=all_staging_chunks(cfg, layout),
                          host_context=context_host_bytes(cfg, layout, dtype_bytes),
                          host_staging=host_staging_chunks(cfg, layout) * chunk)


@dataclass(frozen=True)
class Budget:
    bytes: int
    where: str                # host | device
    source: str               # how the budget was found, for the message
    flag: str | None = None   # the flag that sets it, if any, and its value in GiB
    gib: float | None = None


def host_budget(cfg: SessionConfig, rss_bytes: int, available_bytes: int) -> Budget:
    host = cfg.memory.host_mem_gib
    if host is None:
        return Budget(available_bytes, "host", "the memory available now", None)
    return Budget(int(host * GiB) - rss_bytes - DEFAULT_MARGIN, "host",
                  f"--host-mem {host:g} GiB less this process's {rss_bytes / GiB:.2f} GiB and the "
                  f"{DEFAULT_MARGIN / GiB:.0f} GiB margin", "--host-mem", host)


def device_budget(cfg: SessionConfig, free_bytes: int) -> Budget:
    if cfg.memory.device_mem_gib is None:
        return Budget(free_bytes, "device", "the device memory free now", None)
    gib = cfg.memory.device_mem_gib
    return Budget(int(gib * GiB), "device", f"--device-mem {gib:g} GiB", "--device-mem", gib)


def check_memory(cfg: SessionConfig, grid: VideoGrid, layout: KVLayout, *, dtype_bytes: int, dtype_name: str,
                 host: Budget, device: Budget | None = None) -> MemoryEstimate:
    """Refuse settings whose estimate exceeds a budget (``device`` None: everything is host memory)."""
    est = estimate_memory(cfg, grid, layout, dtype_bytes, dtype_name)
    host_need, device_need = est.total(on_device=device is not None)
    if host_need > host.bytes:
        raise ConfigError(_too_big(cfg, est, host, host_need, on_device=device is not None))
    if device is not None and device_need > device.bytes:
        raise ConfigError(_too_big(cfg, est, device, device_need, on_device=True))
    return est


def _size(n: int) -> str:
    for unit, scale, least in (("PiB", 1 << 50, 1 << 50), ("TiB", 1 << 40, 1 << 40), ("GiB", GiB, GiB / 10)):
        if abs(n) >= least:
            return f"{n / scale:,.2f} {unit}"
    return f"{n / MiB:.1f} MiB"


def _too_big(cfg: SessionConfig, est: MemoryEstimate, budget: Budget, need: int, on_device: bool) -> str:
    """One line: the setting that costs most in this budget, its bytes, the total, the budget, the fix."""
    raise_to = "" if budget.flag is None else \
        f"{budget.flag} to at least {budget.gib + (need - budget.bytes) / GiB:.2f} GiB"
    if budget.bytes <= 0:
        return (f"{budget.source} leaves no {budget.where} memory for the session, which needs "
                f"{_size(need)}; raise {raise_to}")
    terms = [(est.retrieval(budget.where, on_device), _retrieval_term(cfg, est))]
    if budget.where == "host":
        terms += [(est.trajectory, _length_term(cfg, est)), (est.pool, _pool_term(cfg))]
    cost, (what, detail, fix) = max(terms, key=lambda t: t[0])
    if raise_to:
        fix += f" or raise {raise_to}"
    return (f"{what} needs {_size(cost)} of {budget.where} memory ({detail}); the session would need "
            f"{_size(need)}, more than the {_size(budget.bytes)} budget ({budget.source}); {fix}")


def _retrieval_term(cfg: SessionConfig, est: MemoryEstimate) -> tuple[str, str, str]:
    chunks = f"{est.context_chunks:g} + {est.staging_chunks}" if est.staging_chunks else f"{est.context_chunks:g}"
    return (f"--retrieve-k {cfg.memory.retrieve_k}",
            f"attention context and staging slots: {chunks} chunks of {_size(est.chunk_bytes)}",
            "lower --retrieve-k")


def _length_term(cfg: SessionConfig, est: MemoryEstimate) -> tuple[str, str, str]:
    return (f"a length of {cfg.chunks:,} chunks",
            f"the trajectory expanded to {est.frames:,} video frames at {TRAJECTORY_BYTES_PER_FRAME} B each",
            "ask for fewer chunks (--chunks, --seconds or --minutes)")


def _pool_term(cfg: SessionConfig) -> tuple[str, str, str]:
    slots = cfg.memory.pool_slots
    if slots is None:
        return (f"the host pool's minimum of {MIN_SLOTS} chunk slots",
                f"{MIN_SLOTS} int{cfg.memory.kv_bits} chunk slots", "free some memory")
    return (f"--pool-slots {slots:,}", f"{slots:,} int{cfg.memory.kv_bits} chunk slots", "lower --pool-slots")
