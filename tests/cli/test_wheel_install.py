"""A non-editable install works: the wheel built from the source tree, installed into a fresh virtual
environment, runs ``worldpager generate`` and ``worldpager plan`` from another directory, with its
presets, packaged trajectories, start image and arena weights found inside the installed package.

The venv reuses the packages of the environment running the tests (torch and the rest are not installed
again) through a ``.pth`` file that adds that environment's site directories: ``--system-site-packages``
would give it the base interpreter's packages, which are not the test environment's when the tests run
in a venv (the second test checks where torch, tqdm and click come from). The wheel goes in with
``--no-deps`` and comes first on the path. The build runs on a copy of
the tree, so no build folder is left in the checkout.
"""
from __future__ import annotations

import json
import os
import shutil
import site
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


def _outer_site_dirs() -> list[str]:
    """The site directories of the environment running the tests (a venv's own, the base's where it
    includes them, and the user's where that is on)."""
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    return dirs


def _see_outer_packages(python: Path, cwd: Path) -> None:
    """A ``.pth`` in the venv's site-packages that adds the test environment's site directories after its
    own (``addsitedir``: their own ``.pth`` files are read too, as in that environment)."""
    purelib = _run(python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=cwd).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})" for d in _outer_site_dirs()]
    (Path(purelib) / "_worldpager_test_outer.pth").write_text("\n".join(lines) + "\n")


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
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root, env=env)
    python = venv / "bin" / "python"
    _see_outer_packages(python, root)
    # --force-reinstall: pip sees the test environment's own worldpager (an editable install) through the
    # .pth and would otherwise call the wheel installed already
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--force-reinstall", "-q", wheel,
         cwd=root, env=env)
    shutil.rmtree(src)   # nothing may be read from the tree it was built from
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv, env


def test_generate_and_plan_run_from_another_directory(installed, tmp_path):
    venv, env = installed
    worldpager = venv / "bin" / "worldpager"
    _run(worldpager, "generate", "--chunks", "2", "--quiet", "--out", "two.mp4", cwd=tmp_path, env=env)
    header = json.loads((tmp_path / "two.log.jsonl").read_text().splitlines()[0])
    # the packaged trajectory and weights of the installed engine, not the checkout's
    # the default run follows arena_tour.yaml from the wheel (a session of 2 chunks does not look around)
    assert header["trajectory"].startswith(str(venv / "lib")) and "arena_tour.yaml" in header["trajectory"]
    assert header["observed"] is None
    assert header["weights"].startswith(str(venv / "lib"))
    # a preset found inside the installed package (the tree it was built from is gone)
    plan = _run(worldpager, "plan", "--preset", "mg2-4090-32g", "--minutes", "1", cwd=tmp_path, env=env).stdout
    result = json.loads(plan.strip().splitlines()[-1])
    assert result["model"] == "mg2-universal" and result["format"] == "int4"


def test_the_venv_takes_its_packages_from_the_environment_running_the_tests(installed, tmp_path):
    """In a venv, ``--system-site-packages`` would hand the base interpreter's packages (or none) instead."""
    venv, env = installed
    code = "import torch, tqdm, click; print(torch.__file__); print(tqdm.__file__); print(click.__file__)"
    files = _run(venv / "bin" / "python", "-c", code, cwd=tmp_path, env=env).stdout.split()
    outer = [os.path.realpath(d) for d in _outer_site_dirs()]
    for file in files:
        assert any(os.path.realpath(file).startswith(d + os.sep) for d in outer), (file, outer)
