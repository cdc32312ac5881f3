"""``scripts/install.sh`` picks torch's build for the machine: the CPU-only index where no NVIDIA GPU is
visible and torch is absent, nothing for torch when it is installed, the extras given (``--dry-run``:
the pip commands it would run, on stderr, nothing run)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install.sh"
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def _dry_run(tmp_path, *args, python=sys.executable, gpu=False, env=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu:   # an nvidia-smi that lists one GPU
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
        smi.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    result = subprocess.run(["bash", str(SCRIPT), *args, "--dry-run"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PATH": path, "PYTHON": python, **(env or {})})
    return result, [line[2:] for line in result.stderr.splitlines() if line.startswith("+ ")]


@pytest.fixture
def no_torch_python(tmp_path):
    """A python whose ``import torch`` fails (a shadowing module), as in a fresh environment."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "torch.py").write_text("raise ImportError('No module named torch')\n")
    wrapper = tmp_path / "python-without-torch"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shadow} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_no_gpu_and_no_torch_installs_the_cpu_build_first(tmp_path, no_torch_python):
    result, commands = _dry_run(tmp_path, python=no_torch_python)
    assert result.returncode == 0, result.stderr
    assert len(commands) == 2 and CPU_INDEX in commands[0] and "install torch" in commands[0]
    assert commands[1].endswith("-m pip install -e .")


def test_a_gpu_takes_the_default_cuda_build(tmp_path, no_torch_python):
    result, commands = _dry_run(tmp_path, "test", python=no_torch_python, gpu=True)
    assert result.returncode == 0 and len(commands) == 1 and commands[0].endswith("install -e .[test]")


def test_an_installed_torch_is_kept(tmp_path):
    result, commands = _dry_run(tmp_path, "test", "ray")
    assert "already installed; keeping it" in result.stderr
    assert len(commands) == 1 and commands[0].endswith("install -e .[test,ray]")


def test_a_bad_choice_is_one_line_and_exit_2(tmp_path):
    result, _ = _dry_run(tmp_path, env={"WORLDPAGER_TORCH": "rocm"})
    assert result.returncode == 2 and "WORLDPAGER_TORCH must be cpu or cuda, got 'rocm'" in result.stderr
