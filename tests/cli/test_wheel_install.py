"""A non-editable install works: the wheel built from the source tree, installed into a fresh virtual
environment, runs ``worldpager generate`` and ``worldpager plan`` from another directory, with its
presets, packaged trajectories, start image and arena weights found inside the installed package.

The venv reuses this interpreter's packages (``--system-site-packages``: torch and the rest are not
installed again) and the wheel goes in with ``--no-deps``. The build runs on a copy of the tree, so no
build folder is left in the checkout.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("engine", "worldpager_cli", "presets", "trajectories", "pyproject.toml", "setup.py", "README.md")


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def _run(*cmd, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("wheel")
    src, dist, venv = root / "src", root / "dist", root / "venv"
    _copy_tree(src)
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, ".", cwd=src)
    wheel = next(dist.glob("worldpager-*.whl"))
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=root)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel, cwd=root)
    shutil.rmtree(src)   # nothing may be read from the tree it was built from
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv, env


def test_generate_and_plan_run_from_another_directory(installed, tmp_path):
    venv, env = installed
    worldpager = venv / "bin" / "worldpager"
    _run(worldpager, "generate", "--chunks", "2", "--quiet", "--out", "two.mp4", cwd=tmp_path, env=env)
    header = json.loads((tmp_path / "two.log.jsonl").read_text().splitlines()[0])
    # the packaged trajectory and weights of the installed engine, not the checkout's
    # the default run observes arena_observe.yaml, then follows arena_explore.yaml: both from the wheel
    assert header["trajectory"].startswith(str(venv / "lib")) and "arena_explore.yaml" in header["trajectory"]
    assert header["observed"]["source"].startswith(str(venv / "lib"))
    assert header["weights"].startswith(str(venv / "lib"))
    # a preset found inside the installed package (the tree it was built from is gone)
    plan = _run(worldpager, "plan", "--preset", "mg2-4090-32g", "--minutes", "1", cwd=tmp_path, env=env).stdout
    result = json.loads(plan.strip().splitlines()[-1])
    assert result["model"] == "mg2-universal" and result["format"] == "int4"
