"""What made a benchmark's figure: the CPU (model, cores, vector extensions) and the device.

Owns how WorldPager names the machine beside every ``bench`` figure (a speed says little without the CPU
that made it) and how a benchmark's ``--device`` is resolved (``auto``: CUDA when present). torch is
imported only by the two functions that need a device.
"""
from __future__ import annotations

import os
import platform

from engine.errors import ConfigError

# The vector extensions a figure depends on (torch's CPU kernels pick their widest), as /proc/cpuinfo's
# flags name them: x86 (AVX2, AVX-512 and its bf16/VNNI, AMX) and Arm (NEON = asimd, SVE).
VECTOR_FLAGS = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX-512-BF16"),
                ("avx512_vnni", "AVX-512-VNNI"), ("amx_tile", "AMX"), ("amx_bf16", "AMX-BF16"),
                ("asimd", "NEON"), ("sve", "SVE"))


def _cpuinfo() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20).splitlines()   # one CPU's block is a few KiB; the first names them all
    except OSError:
        return []   # not Linux: what platform knows


def cpu_name(lines: list[str] | None = None) -> str:
    """The CPU model from /proc/cpuinfo where there is one (platform.processor() is often empty; Arm
    kernels give no model name, only an implementer and part number)."""
    for line in _cpuinfo() if lines is None else lines:
        if line.startswith(("model name", "Model", "Hardware")) and ":" in line:
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_vectors(lines: list[str] | None = None) -> list[str]:
    """The vector extensions of ``VECTOR_FLAGS`` the CPU has (its first ``flags``/``Features`` line)."""
    for line in _cpuinfo() if lines is None else lines:
        if line.startswith(("flags", "Features")) and ":" in line:
            have = set(line.split(":", 1)[1].split())
            return [name for flag, name in VECTOR_FLAGS if flag in have]
    return []


def machine(device: str | None = None) -> dict:
    """What made a figure: the CPU's model, cores and vector extensions, the device when one is named."""
    lines = _cpuinfo()
    info = {"cpus": os.cpu_count(), "cpu": cpu_name(lines), "vectors": cpu_vectors(lines)}
    if device is not None:
        info["device"] = device
    return info


def machine_line(info: dict) -> str:
    """``machine``'s figures for people: "AMD EPYC 7B13, 2 CPUs, AVX2 AVX-512 (device cpu)"."""
    vectors = " ".join(info.get("vectors") or []) or "no AVX2/AVX-512/AMX/NEON"
    device = f" (device {info['device']})" if info.get("device") else ""
    return f"machine: {info.get('cpu')}, {info.get('cpus')} CPUs, {vectors}{device}"


def device_label(device: str) -> str:
    import torch

    dev = torch.device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()


def resolve_device(name: str) -> str:
    """``auto`` → cuda when present, else cpu; a device that is not here is the user's error."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name!r} (use auto, cpu, cuda or cuda:N)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: no CUDA device is available here")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {name!r} (use auto, cpu, cuda or cuda:N)")
    return str(dev)
