"""Running ``worldpager`` in a subprocess as if some third-party modules were not installed.

``without(*modules)`` is the command line (as ``tests_support.WORLDPAGER``) of an interpreter whose import
system refuses those modules and their submodules the way it refuses a package that is absent: a finder
first on ``sys.meta_path`` raises ``ModuleNotFoundError`` naming the module. Nothing is uninstalled, so
the tests run wherever the packages are installed (as they are for the suite).
"""
from __future__ import annotations

import sys

BLOCKER = """
import sys
HIDDEN = {hidden!r}
class HideModules:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, HideModules())
from worldpager_cli.main import cli
cli()
"""


def without(*modules: str) -> list[str]:
    return [sys.executable, "-c", BLOCKER.format(hidden=set(modules))]
