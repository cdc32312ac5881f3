"""Where the shipped data lives: presets, packaged trajectories (and, beside the code, the start image
and the arena model's weights).

Owns one lookup for an installed wheel and a checkout alike. The source tree keeps ``presets/`` and
``trajectories/`` at its top level; the build maps them into the package as ``engine/presets`` and
``engine/trajectories`` (``setup.py``), so a wheel, ``pip install .`` or ``pipx`` finds them with
``importlib.resources`` inside the installed ``engine``; an editable install or a checkout has no such
folder there, and falls back to the top-level one next to the package.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

DATA_DIRS = ("presets", "trajectories")


def data_dir(name: str) -> Path:
    """The folder of shipped ``name`` data (``presets`` or ``trajectories``): packaged, else the checkout's."""
    assert name in DATA_DIRS, name
    packaged = Path(str(resources.files("engine") / name))
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / name


def data_dirs(name: str) -> tuple[Path, ...]:
    """Where to look, in order (for messages that list what was searched)."""
    packaged = Path(str(resources.files("engine") / name))
    checkout = Path(__file__).resolve().parents[2] / name
    return (packaged, checkout) if packaged != checkout else (packaged,)
