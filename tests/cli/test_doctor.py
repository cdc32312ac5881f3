"""``worldpager doctor``: a row per check and one JSON line last; exit 0 when ``generate`` can run here.

Run for real on this machine (torch, PyAV and a temporary directory's drive, probed with O_DIRECT), then
with what ``generate`` needs taken away: a spill directory that cannot be made (a file in the way), and
PyAV not importable (a directory first on the path whose ``av`` raises ImportError, as an uninstalled
package does). A spill directory that is not there yet is judged by generate's own rule: fine where
``generate --spill`` creates it. (The third-party modules of the commands: test_missing_dependencies.py.)
"""
from __future__ import annotations

import json
import os
import subprocess

from tests_support import WORLDPAGER, run_cli_inprocess


def _doctor(tmp_path, *args, env=None):
    result = subprocess.run(WORLDPAGER + ["doctor", *args], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, **(env or {})})
    report = json.loads(result.stdout.strip().splitlines()[-1])
    return result, report, {c["name"]: c for c in report["checks"]}


def test_this_machine_is_ready_and_every_check_has_a_row(tmp_path):
    result, report, checks = _doctor(tmp_path, "--spill", str(tmp_path))
    assert result.returncode == 0 and report["ready"], result.stderr
    assert {"python", "torch", "triton", "pyav", "host", f"drive {tmp_path}"} <= set(checks)
    assert {"aiohttp", "ray", "transformers"} <= set(checks)              # the modules commands import
    assert checks[f"drive {tmp_path}"]["status"] in ("ok", "warn")       # O_DIRECT, or buffered with a warning
    assert "GiB free" in checks[f"drive {tmp_path}"]["found"]
    assert not any("worldpager-probe" in p.name for p in tmp_path.iterdir())   # the probe file is gone
    assert "ready" in result.stderr.splitlines()[-1]                      # the human table goes to stderr


def test_a_spill_directory_that_cannot_be_made_and_pyav_are_reported_and_exit_1(tmp_path):
    fake = tmp_path / "nopyav"
    fake.mkdir()
    (fake / "av.py").write_text("raise ImportError('No module named av')\n")
    (tmp_path / "a-file").write_text("")
    spill = tmp_path / "a-file" / "spill"
    path = os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])
    result, report, checks = _doctor(tmp_path, "--spill", str(spill), env={"PYTHONPATH": path})
    assert result.returncode == 1 and not report["ready"]
    assert checks["pyav"]["status"] == "missing" and "pip install av" in checks["pyav"]["advice"]
    assert checks[f"drive {spill}"]["status"] == "missing"
    assert "is a file, so the directory cannot be created" in checks[f"drive {spill}"]["found"]
    assert checks["torch"]["status"] == "ok"


def test_a_spill_directory_generate_would_create_is_ready_and_generate_creates_it(tmp_path):
    """doctor and generate read --spill by the same rule (engine.session.preflight.spill_home)."""
    spill = tmp_path / "new" / "spill"
    result, report, checks = _doctor(tmp_path, "--spill", str(spill))
    assert result.returncode == 0 and report["ready"], result.stderr
    drive = checks[f"drive {spill}"]
    assert drive["status"] in ("ok", "warn") and "generate creates it" in drive["found"]
    assert not (tmp_path / "new").exists()                                # doctor creates nothing
    code, _, err = run_cli_inprocess(["generate", "--model", "micro", "--chunks", "2", "--quiet", "--spill", spill,
                                      "--out", tmp_path / "x.mp4"], cwd=tmp_path)   # generate in this process
    assert code == 0, err
    assert spill.is_dir()


def test_a_cuda_build_without_a_device_names_the_cpu_build(monkeypatch):
    """A CUDA build of torch on a machine with no NVIDIA device: the advice is the exact install line of
    the CPU-only build (``check_torch`` reads torch's build and devices; both faked, the machine's own)."""
    import torch

    from engine.bench import doctor

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(doctor.Path, "exists", lambda self: False if str(self) == "/dev/nvidia0" else os.path.exists(self))
    monkeypatch.setattr("shutil.which", lambda name: None)
    cuda = [c for c in doctor.check_torch() if c.name == "cuda"][0]
    assert cuda.status == "warn" and "no NVIDIA device" in cuda.advice
    assert "--index-url https://download.pytorch.org/whl/cpu" in cuda.advice
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "CUDA_VISIBLE_DEVICES='' hides it" in [c for c in doctor.check_torch() if c.name == "cuda"][0].advice
