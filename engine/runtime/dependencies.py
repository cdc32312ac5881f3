"""The third-party modules a command imports only when it runs, and the one line when one is missing.

Owns the table ``DEPENDENCIES``: for each such module, what needs it (a command, an option or a model),
the pip line that installs it, and whether it comes with the core install (``pyproject.toml``'s
``dependencies``; the Run command of the README installs it) or with an extra. Two users:

* ``require(module)`` imports it for a command that is about to use it; where it cannot be imported
  (not installed, or installed without its own dependencies) the failure is one ``MissingDependency``
  line (a ``ConfigError``: exit 1) naming what needs it and the pip line — never a traceback.
* ``check(dep)`` answers for ``worldpager doctor`` without raising: the version found, or why not.

The pip lines name the package itself (``pip install 'ray>=2.9'``), which works however WorldPager was
installed (editable from a clone, a wheel, pipx); the extra of the same name is said beside it.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType

from engine.errors import ConfigError


class MissingDependency(ConfigError):
    """A third-party module a command needs cannot be imported; the message names the pip line."""


@dataclass(frozen=True)
class Dependency:
    module: str          # the name imported
    requirement: str     # as pyproject.toml states it
    needed_by: str       # what imports it, in the user's words
    extra: str           # the pyproject extra that installs it too
    core: bool           # installed by the core install: its absence is a broken install, not a choice

    @property
    def package(self) -> str:
        return re.match(r"[A-Za-z0-9_.-]+", self.requirement).group(0)

    @property
    def install(self) -> str:
        return f"pip install '{self.requirement}'"

    @property
    def fix(self) -> str:
        """The pip line, and the extra that brings the same."""
        return f"{self.install} (or the worldpager[{self.extra}] extra)"


DEPENDENCIES = (
    Dependency("aiohttp", "aiohttp>=3.9", "worldpager play", "play", core=True),
    Dependency("ray", "ray>=2.9", "worldpager batch --ray", "ray", core=False),
    Dependency("transformers", "transformers>=4.40", "the LingBot-World-Fast models' text encoder",
               "lingbot", core=False),
)
BY_MODULE = {d.module: d for d in DEPENDENCIES}


def _why(dep: Dependency, exc: BaseException) -> str:
    """Why ``dep`` did not import, as the end of a sentence ("... needs the ray package, which ...")."""
    if isinstance(exc, ModuleNotFoundError):
        missing = exc.name or dep.module
        if missing.split(".")[0] == dep.module:
            return "which is not installed"
        return f"which is installed but cannot import {missing}"
    return f"which cannot be imported ({type(exc).__name__}: {' '.join(str(exc).split())})"


def _import(dep: Dependency) -> ModuleType:
    return importlib.import_module(dep.module)


def require(module: str) -> ModuleType:
    """The module, imported; a ``MissingDependency`` line naming the pip line when it cannot be."""
    dep = BY_MODULE[module]
    try:
        return _import(dep)
    except Exception as exc:   # any failure of a third-party import is the environment's, not our bug
        raise MissingDependency(f"{dep.needed_by} needs the {dep.package} package, {_why(dep, exc)}: "
                                f"{dep.fix}") from None


@dataclass(frozen=True)
class Found:
    dep: Dependency
    version: str | None      # None: it cannot be imported
    why: str = ""


def check(dep: Dependency) -> Found:
    """Whether ``dep`` imports here (a real import: an installed but broken package counts as missing)."""
    try:
        module = _import(dep)
    except Exception as exc:   # as in require: the finding, never a crash of doctor
        return Found(dep, None, _why(dep, exc))
    try:
        version = metadata.version(dep.package)
    except metadata.PackageNotFoundError:
        version = getattr(module, "__version__", "unknown version")
    return Found(dep, version)
