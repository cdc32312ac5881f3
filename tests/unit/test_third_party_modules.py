"""``engine.runtime.dependencies``: the table agrees with pyproject.toml (a core module is a core dependency, an
extra's is in its extra, with the same requirement), ``require`` turns an absent or broken module into
one ``MissingDependency`` line (a ``ConfigError``: exit 1) naming the pip line, and ``check`` answers
without raising."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.runtime.dependencies import BY_MODULE, DEPENDENCIES, MissingDependency, check, require
from engine.errors import ConfigError

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_table_matches_pyproject():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    for dep in DEPENDENCIES:
        assert dep.requirement in project["optional-dependencies"][dep.extra], dep
        assert (dep.requirement in project["dependencies"]) == dep.core, dep
    assert "aiohttp" in BY_MODULE and BY_MODULE["aiohttp"].core      # play comes with the core install


@pytest.mark.parametrize("module", [d.module for d in DEPENDENCIES])
def test_an_absent_module_is_one_line_naming_the_pip_line(module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)       # what `import` meets without the package
    dep = BY_MODULE[module]
    with pytest.raises(MissingDependency) as info:
        require(module)
    message = str(info.value)
    assert isinstance(info.value, ConfigError) and "\n" not in message
    assert f"{dep.needed_by} needs the {dep.package} package, which is not installed" in message
    assert f"pip install '{dep.requirement}'" in message and f"worldpager[{dep.extra}]" in message
    found = check(dep)
    assert found.version is None and found.why == "which is not installed"


def test_a_module_that_cannot_import_its_own_dependency_says_so(tmp_path, monkeypatch):
    (tmp_path / "aiohttp.py").write_text("import multidict_not_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "aiohttp", raising=False)
    with pytest.raises(MissingDependency, match="which is installed but cannot import multidict_not_here"):
        require("aiohttp")


def test_a_present_module_is_returned_and_its_version_found():
    pytest.importorskip("aiohttp")
    assert require("aiohttp").__name__ == "aiohttp"
    assert check(BY_MODULE["aiohttp"]).version
