"""What this machine offers WorldPager, for ``worldpager doctor``: one row per check.

Owns the checks, each a small function returning a ``Check`` (name, status ok / warn / missing, what was
found, and what to do when it is not ok): Python, the torch build (CUDA or CPU-only, its version, the
devices it sees and their memory, bf16), Triton, PyAV with an H.264 encoder (a real encode of one
frame), host memory and cores, and a drive for ``--spill`` (a real ``O_DIRECT`` write and read of a few
MiB in the directory through ``engine.planner.probe``, and its free space; a directory not there yet
that ``generate`` would create is probed where it would be, by generate's own rule), and the
third-party modules commands import when they run (``engine.runtime.dependencies``: aiohttp for ``play``, Ray
for ``batch --ray``, transformers for the LingBot models), each with its pip line. A check never
raises: a failure is its row. ``missing`` rows are what the core install's commands cannot do without
(torch, PyAV with H.264, aiohttp); ``warn`` rows work with less (no CUDA: CPU; no O_DIRECT: buffered; no
Ray or transformers: only what needs them is unavailable).
"""
from __future__ import annotations

import os
import platform
from fractions import Fraction
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

GiB = 1 << 30
MiB = 1 << 20
PROBE_BYTES = 16 * MiB


@dataclass(frozen=True)
class Check:
    name: str
    status: str          # ok | warn | missing
    found: str
    advice: str = ""

    def as_json(self) -> dict:
        return asdict(self)


def check_python() -> Check:
    ok = sys.version_info >= (3, 10)
    return Check("python", "ok" if ok else "missing", f"{platform.python_version()} ({sys.executable})",
                 "" if ok else "WorldPager needs Python 3.10 or newer")


def check_torch() -> list[Check]:
    try:
        import torch
    except ImportError:
        return [Check("torch", "missing", "not installed", "pip install torch")]
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    rows = [Check("torch", "ok", f"{torch.__version__}, {build}, {torch.get_num_threads()} intra-op threads")]
    if not torch.cuda.is_available():
        advice = ("a CPU-only build: install torch's CUDA build to use a GPU" if not torch.version.cuda
                  else _cuda_build_without_device())
        rows.append(Check("cuda", "warn", "no CUDA device: sessions run on the CPU in float32", advice))
        return rows
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        bf16 = torch.cuda.is_bf16_supported()
        rows.append(Check(f"cuda:{i}", "ok", f"{p.name}, {p.total_memory / GiB:.1f} GiB, compute "
                          f"{p.major}.{p.minor}, bf16 {'yes' if bf16 else 'no'}"))
    return rows


def check_triton() -> Check:
    try:
        import triton
    except ImportError:
        return Check("triton", "warn", "not installed",
                     "the int4 kernels use their torch reference instead (slower on a GPU)")
    return Check("triton", "ok", triton.__version__)


def check_video() -> Check:
    try:
        import av
        import numpy as np
    except ImportError:
        return Check("pyav", "missing", "PyAV is not installed", "pip install av")
    try:
        codec = av.CodecContext.create("libx264", "w")
        codec.width, codec.height, codec.pix_fmt = 16, 16, "yuv420p"
        codec.time_base = Fraction(1, 16)
        frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24").reformat(format="yuv420p")
        packets = codec.encode(frame) + codec.encode(None)
    except Exception as exc:   # any failure of the encoder is this row's finding, never a crash of doctor
        return Check("pyav", "missing", f"PyAV {av.__version__}: H.264 (libx264) cannot encode: {exc}",
                     "install a PyAV wheel built with libx264 (pip install --force-reinstall av)")
    return Check("pyav", "ok", f"PyAV {av.__version__}, FFmpeg libx264 encodes ({sum(p.size for p in packets)} "
                 "bytes for a test frame)")


def check_host() -> Check:
    vm = psutil.virtual_memory()
    return Check("host", "ok", f"{os.cpu_count()} cores, {vm.total / GiB:.1f} GiB memory, "
                 f"{vm.available / GiB:.1f} GiB available")


def check_drive(directory: Path) -> Check:
    """A real O_DIRECT write and read of ``PROBE_BYTES`` in ``directory`` (removed after); a directory that
    is not there yet is fine where ``generate`` would create it (``spill_home``), and probed where it would be."""
    from engine.errors import WorldPagerError
    from engine.planner.probe import probe_drive
    from engine.session.preflight import spill_home

    name = f"drive {directory}"
    try:
        home = spill_home(directory)   # generate's own rule: a directory, or one it can create
        probe = probe_drive(home, PROBE_BYTES)
    except (WorldPagerError, OSError) as exc:
        return Check(name, "missing", f"cannot write and read there: {exc}",
                     "give --spill a writable directory on a local drive (or a new one under such a directory)")
    created = "" if home == directory else f"not there yet: generate creates it (probed in {home}); "
    rates = f"write {probe.write_Bps / 1e9:.2f} GB/s, read {probe.read_Bps / 1e9:.2f} GB/s ({probe.nbytes // MiB} MiB)"
    free = f"{probe.free_bytes / GiB:.1f} GiB free"
    if not probe.direct:
        return Check(name, "warn", f"{created}no O_DIRECT (buffered I/O), {rates}, {free}",
                     "the disk tier works buffered here; its reads may be served from the page cache")
    return Check(name, "ok", f"{created}O_DIRECT, {rates}, {free}")


def check_dependencies() -> list[Check]:
    """A row per module a command imports when it runs (``engine.runtime.dependencies``): one the core install
    brings is ``missing`` when it does not import (a command of the install is broken), an extra's is a
    ``warn`` (only what needs it is unavailable)."""
    from engine.runtime.dependencies import DEPENDENCIES, check

    rows = []
    for dep in DEPENDENCIES:
        found = check(dep)
        if found.version is not None:
            rows.append(Check(dep.module, "ok", f"{found.version} (for {dep.needed_by})"))
            continue
        status = "missing" if dep.core else "warn"
        why = found.why.removeprefix("which ")
        rows.append(Check(dep.module, status, f"{why}: {dep.needed_by} cannot run", dep.fix))
    return rows


def run_checks(spill: Path | None) -> list[Check]:
    rows = [check_python(), *check_torch(), check_triton(), check_video(), check_host(), *check_dependencies()]
    rows.append(check_drive(Path(spill) if spill is not None else Path.cwd()))
    return rows


CPU_TORCH = ("pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cpu "
             "(the same version, without the CUDA libraries)")


def _cuda_build_without_device() -> str:
    """What to do with a CUDA build of torch that sees no device: on a machine with no NVIDIA device at
    all, take the CPU-only build; where one is present, the driver or ``CUDA_VISIBLE_DEVICES`` hides it."""
    import shutil

    if Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi"):
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f"CUDA_VISIBLE_DEVICES={hidden!r} hides it" if hidden is not None else "check the driver (nvidia-smi)"
        return f"a CUDA build and an NVIDIA device, but torch cannot use it: {why}"
    return f"a CUDA build on a machine with no NVIDIA device: it only costs disk and memory here; {CPU_TORCH}"
