"""The device check's steps that need no model math: the machine, ``pytest -m gpu``, the int4 kernels
and pinned copies, and the sessions that write an MP4 (``bench device``; ``engine.bench.device_check``
runs them).

Contract of every step (here and in ``engine.bench.device_models``): ``step(ctx: StepContext) ->
(summary, figures)``, ``summary`` one short line for the Markdown table, ``figures`` a flat-ish dict of
numbers and names for the JSON. Sizes come from ``ctx.dry_run``: the real ones on a CUDA device, tiny
ones on the CPU (the dry run exercises the same code at sizes a CI machine finishes in seconds). A step
that cannot run here raises ``StepSkipped`` with the reason; anything else it raises makes it failed.
Nothing here asserts a speed.

PyAV (``av``) is imported only inside the steps that write an MP4 (``session_mp4``, ``synthetic_session``):
a GPU machine's bare image has none, and every other step runs without it.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


class StepSkipped(Exception):
    """The step cannot run on this machine; the message says why (and what would make it run)."""


class StepFailed(Exception):
    """A step that ran and found a fault: its figures are kept with the one-line reason."""

    def __init__(self, reason: str, summary: str, figures: dict):
        super().__init__(reason)
        self.summary, self.figures = summary, figures


@dataclass(frozen=True)
class StepContext:
    dry_run: bool
    work: Path            # scratch directory of this run (removed afterwards)
    spill: Path | None    # where the disk tier goes (None: under ``work``)
    budget_s: float       # the most this step may take (the runner kills it after that)

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"


def require_av() -> str:
    """PyAV's version, or ``StepSkipped`` saying how to bring it (the MP4 parts need it)."""
    try:
        import av
    except ImportError as exc:
        raise StepSkipped(f"PyAV is not importable ({exc}): the MP4 parts are skipped; carry its wheel in "
                          ".whl/ (docs/device_check.md)") from None
    return av.__version__


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def optional_version(module: str) -> str:
    try:
        return __import__(module).__version__
    except ImportError as exc:
        return f"missing ({exc})"


# ---- env ------------------------------------------------------------------------------------------

def env_step(ctx: StepContext) -> tuple[str, dict]:
    """Versions, the device, and one bf16 matmul on it against float32 on the CPU."""
    import torch

    cuda = torch.cuda.is_available()
    if not ctx.dry_run and not cuda:
        raise ConfigError("no CUDA device is visible to torch (run with --dry-run on a CPU)")
    figures = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "cuda_available": cuda, "triton": optional_version("triton"), "av": optional_version("av"),
               "numpy": optional_version("numpy"), "cpus": os.cpu_count()}
    dev = torch.device(ctx.device)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        figures.update(device=props.name, capability=f"{props.major}.{props.minor}",
                       device_memory_bytes=props.total_memory, bf16=torch.cuda.is_bf16_supported())
    else:
        figures.update(device=platform.processor() or platform.machine(), bf16=True)
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 512, generator=gen), torch.randn(512, 512, generator=gen)
    ref = a @ b
    got = (a.to(dev, torch.bfloat16) @ b.to(dev, torch.bfloat16)).float().cpu()
    figures["bf16_matmul_rel_err"] = float((got - ref).norm() / ref.norm())
    mem = f", {figures['device_memory_bytes'] / GiB:.0f} GiB" if "device_memory_bytes" in figures else ""
    return (f"{figures['device']}{mem}; torch {torch.__version__}, triton {figures['triton']}, "
            f"av {figures['av'].split(' ')[0]}; bf16 matmul rel err {figures['bf16_matmul_rel_err']:.1e}"), figures


# ---- pytest -m gpu ---------------------------------------------------------------------------------

def pytest_step(ctx: StepContext) -> tuple[str, dict]:
    """``pytest -m gpu`` over the whole suite (dry run: ``tests/gpu`` only, every test skipped on a CPU).

    Test modules that import PyAV cannot be collected without it; those collection errors are counted
    apart (their tests are not GPU tests), any other error or failure fails the step."""
    tests = REPO_ROOT / "tests"
    if not tests.is_dir():
        raise StepSkipped(f"no tests/ beside the engine ({REPO_ROOT}): an installed copy, not a checkout")
    junit = ctx.work / "pytest_gpu.xml"
    paths = [str(tests / "gpu")] if ctx.dry_run else [str(tests)]
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "--continue-on-collection-errors", f"--junitxml={junit}", "-o", "addopts=", *paths]
    run = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=max(1.0, ctx.budget_s - 5))
    (ctx.work / "pytest_gpu.txt").write_text(run.stdout + run.stderr)
    if not junit.is_file():
        raise RuntimeError(f"pytest exited {run.returncode} without a report: {_last_line(run.stdout + run.stderr)}")
    figures = junit_counts(junit)
    figures["returncode"] = run.returncode
    bad = figures["failed"] + figures["errors"]
    summary = (f"{figures['passed']} passed, {figures['failed']} failed, {figures['errors']} errors, "
               f"{figures['skipped']} skipped; {len(figures['av_collection_errors'])} modules not collected "
               "(no PyAV)")
    if bad:
        raise StepFailed(f"{bad} GPU tests failed or errored: {', '.join(figures['failures'][:4])}", summary, figures)
    return summary, figures


def junit_counts(path: Path) -> dict:
    """Passed / failed / errors / skipped of a JUnit XML report; collection errors caused by a missing
    PyAV are listed apart and not counted as errors."""
    cases = ET.parse(path).getroot().iter("testcase")
    out = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": [], "av_collection_errors": []}
    for case in cases:
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        error, failure = case.find("error"), case.find("failure")
        if error is not None and "No module named 'av'" in (error.text or "") + (error.get("message") or ""):
            out["av_collection_errors"].append(name)
        elif error is not None:
            out["errors"] += 1
            out["failures"].append(name)
        elif failure is not None:
            out["failed"] += 1
            out["failures"].append(name)
        elif case.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


# ---- the int4 kernels and pinned copies -------------------------------------------------------------

def quant_step(ctx: StepContext) -> tuple[str, dict]:
    """``bench quant``'s figures for the reference and Triton kernels side by side on one full MG2 chunk
    (dry run: a few micro-model tokens, Triton under its interpreter), and the pinned host pool's copies."""
    from engine.bench.quant import bench_quant_backends
    from engine.config import model_config

    backends = ["reference", "triton"]
    try:
        import triton  # noqa: F401  (TRITON_INTERPRET is set by the runner in a dry run, before this)
    except ImportError:
        backends = ["reference", "fused"] if ctx.dry_run else ["reference"]
    name, tokens, repeats = ("micro", 96, 1) if ctx.dry_run else ("mg2-universal", None, 5)
    cfg = model_config(name)
    results = bench_quant_backends(cfg, backends, tokens=tokens, device=ctx.device, repeats=repeats)
    r = results[0]
    figures = {"model": name, "tokens": r["tokens"], "kv_dtype": r["kv_dtype"], "kv_bytes": r["kv_bytes"],
               "block_bytes": r["block_bytes"], "copy_gbps": r["copy_gbps"],
               "backends": {x["backend"]: {k: x[k] for k in ("quant_s", "dequant_s", "quant_gbps", "dequant_gbps",
                                                             "quant_vs_copy", "dequant_vs_copy")}
                            for x in results},
               "interpreted": ctx.dry_run and "triton" in backends}
    figures["copies"] = pinned_copies(r["block_bytes"], ctx.device, repeats)
    parts = [f"{b} q/dq {x['quant_vs_copy']:.2g}/{x['dequant_vs_copy']:.2g} of copy"
             for b, x in figures["backends"].items()]
    c = figures["copies"]
    summary = (f"{'; '.join(parts)} ({r['copy_gbps']:.0f} GB/s); pool->device {c['h2d_gbps']:.1f} GB/s, "
               f"device->pool {c['d2h_gbps']:.1f} GB/s (pinned {c['pinned']}), pageable->device "
               f"{c['h2d_pageable_gbps']:.1f} GB/s")
    if not c["round_trip_equal"]:
        raise StepFailed("a block copied pool -> device -> pool came back changed", summary, figures)
    return summary, figures


def pinned_copies(block_bytes: int, device: str, repeats: int) -> dict:
    """GB/s of one stored block between a slot of the real host pool (pinned on CUDA) and the device,
    both ways, against the same copy from pageable memory; medians of ``repeats``."""
    import torch

    from engine.memory.host_pool import ALIGN, HostPool

    slot = -(-block_bytes // ALIGN) * ALIGN
    pool = HostPool(1, slot)
    try:
        dev = torch.device(device)
        src = pool.slot(0)
        src.copy_(torch.randint(0, 256, (slot,), dtype=torch.uint8))
        on_device = torch.empty(slot, dtype=torch.uint8, device=dev)
        pageable = torch.empty(slot, dtype=torch.uint8)
        times = {"h2d": [], "d2h": [], "h2d_pageable": []}
        for _ in range(repeats + 1):    # the first round warms up
            for key, (dst, source) in {"h2d": (on_device, src), "d2h": (src, on_device),
                                       "h2d_pageable": (on_device, pageable)}.items():
                times[key].append(_timed_copy(dst, source, dev))
        out = {f"{k}_gbps": slot / sorted(v[1:])[len(v[1:]) // 2] / 1e9 for k, v in times.items()}
        want = torch.randint(0, 256, (slot,), dtype=torch.uint8)
        src.copy_(want)
        on_device.copy_(src, non_blocking=True)      # pool -> device
        _sync(dev)
        src.zero_()
        src.copy_(on_device, non_blocking=True)      # device -> pool
        _sync(dev)
        ok = torch.equal(src, want)
        return {**out, "bytes": slot, "pinned": pool.pinned, "round_trip_equal": bool(ok)}
    finally:
        pool.close()


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed_copy(dst, src, dev) -> float:
    _sync(dev)
    t0 = time.perf_counter()
    dst.copy_(src, non_blocking=True)
    _sync(dev)
    return time.perf_counter() - t0


# ---- sessions that write an MP4 ----------------------------------------------------------------------

def session_mp4_step(ctx: StepContext) -> tuple[str, dict]:
    """A whole micro-model session on the device, end to end into its MP4 and log (needs PyAV)."""
    require_av()
    from engine.config import MemoryConfig, SessionConfig, model_config
    from engine.session.loop import Session
    from engine.runtime.telemetry import read_log

    chunks = 1 if ctx.dry_run else 4
    cfg = SessionConfig(model="micro", chunks=chunks, device=ctx.device, out=ctx.work / "micro.mp4",
                        save_every=0, memory=MemoryConfig(store="window")).validate()
    result = Session(cfg).run()
    records = [r for r in read_log(cfg.log_path) if r["type"] == "chunk"]
    expected = model_config("micro").video_frames_total(chunks)
    figures = {"chunks": result.chunks, "frames": result.frames, "expected_frames": expected,
               "mp4_bytes": cfg.out.stat().st_size, "wall_s": result.wall_s, "status": result.status,
               "compute_ms": [r["compute_ms"] for r in records],
               "device_bytes_max": max((r["device_bytes"] for r in records), default=0)}
    summary = f"micro, {plural(result.chunks, 'chunk')}, {result.frames} frames in {figures['mp4_bytes']} B of MP4"
    if result.status != "done" or result.frames != expected:
        raise StepFailed(f"session {result.status} with {result.frames} of {expected} frames", summary, figures)
    return summary, figures


SYNTHETIC_FULL = {"kv_scale": 1.0, "chunks": 32, "chunk_ms": 1200.0, "pool_slots": 8, "warmup": 3}
SYNTHETIC_DRY = {"kv_scale": 0.034, "chunks": 6, "chunk_ms": 20.0, "pool_slots": 2, "warmup": 1}
SYNTHETIC_MODES = ("prefetch", "on-demand")
SYNTHETIC_DRIVE_BW = "0.25"


def synthetic_session_step(ctx: StepContext) -> tuple[str, dict]:
    """Synthetic sessions at MG2's KV size (one int4 chunk 129.4 MB, 1200 ms of device time a chunk)
    through the disk tier, prefetch against on-demand at 0.25 GB/s: stalls, chunk time, RSS, device
    memory (each in a fresh process, as ``bench store`` runs them; needs PyAV for their MP4)."""
    require_av()
    from engine.bench.experiments import reduce_log, run_synthetic

    size = SYNTHETIC_DRY if ctx.dry_run else SYNTHETIC_FULL
    spill = ctx.spill if ctx.spill is not None else ctx.work
    if not spill.is_dir():
        raise ConfigError(f"--spill directory not found: {spill}")

    def reduce(records: list[dict], warmup: int) -> dict:
        chunks = [r for r in records if r["type"] == "chunk"]
        return {**reduce_log(records, warmup),
                "device_bytes_max": max((r.get("device_bytes", 0) for r in chunks), default=0)}

    runs = {}
    for mode in SYNTHETIC_MODES:
        overlay = {"chunks": size["chunks"], "kv_scale": size["kv_scale"], "chunk_ms": size["chunk_ms"],
                   "device": ctx.device, "save_every": 0,
                   "memory": {"store": mode, "pool_slots": size["pool_slots"], "drive_bw": SYNTHETIC_DRIVE_BW}}
        runs[mode] = run_synthetic(overlay, spill, warmup=size["warmup"], name=mode, reduce=reduce)
    figures = {**size, "drive_bw_gbps": float(SYNTHETIC_DRIVE_BW), "spill": str(spill), "runs": runs}
    summary = "; ".join(f"{m}: stall p99 {r['stall_p99_ms']:.0f} ms, {r['stalled_chunks']} stalled, chunk "
                        f"{r['chunk_ms_p50']:.0f} ms, RSS {r['rss_max'] / GiB:.2f} GiB, device "
                        f"{r['device_bytes_max'] / GiB:.2f} GiB" for m, r in runs.items())
    failed = [m for m, r in runs.items() if r["status"] != "done"]
    if failed:
        raise StepFailed(f"{', '.join(failed)} ended {runs[failed[0]]['status']}: {runs[failed[0]]['error']}",
                         summary, figures)
    return summary, figures
