"""The trajectories shipped with WorldPager: ``packaged_trajectory(name)`` finds one by file name.

Owns where they are looked for: ``engine/trajectories`` (package data in a wheel) first, then the
checkout's top-level ``trajectories/`` (an editable install or a source tree).
"""
from __future__ import annotations

from pathlib import Path

from engine.errors import InputError

# This file is engine/io/trajectory/packaged.py: parents[2] is engine/, parents[3] the checkout.
_PACKAGE_DIR = Path(__file__).resolve().parents[2] / "trajectories"     # engine/trajectories (wheel data)
_REPO_DIR = Path(__file__).resolve().parents[3] / "trajectories"        # checkout / editable install


def packaged_trajectory(name: str) -> Path:
    """Path of a shipped trajectory: ``engine/trajectories/NAME`` (package data: the build maps the
    source tree's top-level ``trajectories/`` there, see ``engine.files.resources``) if present, else the
    checkout's top-level ``trajectories/NAME`` (an editable install).
    """
    for folder in (_PACKAGE_DIR, _REPO_DIR):
        if (folder / name).is_file():
            return folder / name
    available = sorted({p.name for d in (_PACKAGE_DIR, _REPO_DIR) if d.is_dir() for p in d.iterdir()})
    raise InputError(f"no packaged trajectory {name!r} in {_PACKAGE_DIR} or {_REPO_DIR} "
                     f"(available: {', '.join(available) or 'none'})")
