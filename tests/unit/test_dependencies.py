"""Dependencies run one way (DESIGN §8): each rule below is read off the ``import`` statements of every
module under ``engine/`` with ``ast``, so a violation fails here before it becomes a cycle.

* the components do not know one another: memory imports nothing from model, retrieval or the session's
  side; the planner nothing from a model, the arena, the store or the session's side; retrieval nothing from model, memory or io; kernels nothing from memory or model; model nothing
  from memory, retrieval or the session's side; the arena model nothing from memory;
* the session names no model: from ``engine.model`` it imports only the interface, the attention
  context and the factory;
* the deciders are torch-free: the manager, the retrieval policy, the planner, the pose geometry and
  the byte accounting import no torch, directly or through any engine module they import at load time;
* the wings and the shared ground import only what their ``__init__`` allows (``WING_MAY_IMPORT``): model
  facts, files and drives, the running process's log and clocks, the settings, and the shared ground
  (errors, config, geometry) beneath them all; the facts, the files and the settings are torch-free;
* no module under ``engine`` imports click (the CLI is a thin shell over the engine);
* no import circle anywhere in ``engine`` or ``worldpager_cli``: no chain of imports leads from a module
  back to itself (a model family and the registry, or two commands, never import each other).

Every import counts for the direction rules, wherever it is written (function bodies and
``TYPE_CHECKING`` blocks included): a lazy import is still a dependency. For the torch rule only what
runs when the module is imported counts.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"

SESSION_SIDE = ("engine.session",)   # the chunk loop and every step of it (engine/session/)
FORBIDDEN = {   # package -> what no module inside it may import
    "engine.memory": ("engine.model", "engine.retrieval", *SESSION_SIDE),
    "engine.retrieval": ("engine.model", "engine.memory", "engine.io"),
    "engine.kernels": ("engine.memory", "engine.model"),
    "engine.model": ("engine.memory", "engine.retrieval", *SESSION_SIDE),
    # The arena model is a model: it never touches the store. (Its training data uses the session's
    # retrieval policy, and its evaluation runs whole sessions: engine.arena.evaluate.)
    "engine.arena": ("engine.memory", "engine.session.memory", "engine.session.positions"),
    # The planner reads shapes (engine.facts.layout.ModelShape from the torch-free configs), never a model,
    # the store or the loop: a model family's code may import torch at any time.
    "engine.planner": ("engine.model", "engine.arena", "engine.memory.store", "engine.memory.host_pool",
                       *SESSION_SIDE),
    # Live play drives a session through its public API; the session knows nothing of it (DESIGN §2b).
    "engine.session": ("engine.play",),
}
SESSION_MAY_USE = {"engine.model.interface", "engine.model.kv_context", "engine.model.registry",
                   "engine.model.state_tensors"}
SHARED_GROUND = ("engine.errors", "engine.config", "engine.geometry")
WING_MAY_IMPORT = {   # wing or shared-ground module -> the only engine packages it may import (itself included)
    "engine.errors": (),
    "engine.geometry": (),
    "engine.config": ("engine.errors", "engine.facts.layout"),
    "engine.facts": (*SHARED_GROUND, "engine.facts"),
    "engine.files": (*SHARED_GROUND, "engine.files"),
    "engine.runtime": (*SHARED_GROUND, "engine.facts", "engine.files", "engine.runtime"),
    "engine.settings": (*SHARED_GROUND, "engine.facts", "engine.files", "engine.memory.quota", "engine.settings"),
}
TORCH_FREE_WINGS = ("engine.facts", "engine.files", "engine.settings")
TORCH_FREE = ("engine.memory.manager", "engine.retrieval.select", "engine.planner.model", "engine.geometry",
              "engine.facts.kv_format", "engine.facts.layout", "engine.files.durable",
              "engine.bench.device_step_names")


@dataclass(frozen=True)
class Import:
    module: str          # absolute dotted name
    at_load: bool        # executed when the importing module is imported (module level, not TYPE_CHECKING)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports_of(source: str, importer: str, is_package: bool = False) -> list[Import]:
    """Every import in ``source``: ``from a import b`` yields ``a`` and ``a.b`` (b may be a module)."""
    found: list[Import] = []

    def visit(node: ast.AST, at_load: bool) -> None:
        for child in ast.iter_child_nodes(node):
            load = at_load and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                and not _type_checking_block(child)
            if isinstance(child, ast.Import):
                found.extend(Import(alias.name, at_load) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(child, importer, is_package)
                found.append(Import(base, at_load))
                found.extend(Import(f"{base}.{alias.name}", at_load) for alias in child.names)
            visit(child, load)
    visit(ast.parse(source), True)
    return found


def _modules(package: Path) -> dict[str, list[Import]]:
    modules = {}
    for path in sorted(package.rglob("*.py")):
        name = module_name(path)
        modules[name] = imports_of(path.read_text(), name, path.name == "__init__.py")
    return modules


MODULES = _modules(ENGINE)
ALL_MODULES = {**MODULES, **_modules(ROOT / "worldpager_cli")}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_parser_sees_lazy_guarded_and_relative_imports():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
              "from . import sibling\n"
              "def f():\n    from engine.model import mg2\n")
    got = {(i.module, i.at_load) for i in imports_of(source, "engine.memory.store")}
    assert {("torch", False), ("engine.memory.sibling", True), ("engine.model.mg2", False)} <= got


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_components_import_one_way(package):
    bad = [(name, i.module) for name, imports in MODULES.items() if _within(name, package)
           for i in imports if any(_within(i.module, f) for f in FORBIDDEN[package])]
    assert not bad, f"{package} must not import {FORBIDDEN[package]}: {bad}"


@pytest.mark.parametrize("wing", sorted(WING_MAY_IMPORT))
def test_wings_import_only_what_they_may(wing):
    inside = [name for name in MODULES if _within(name, wing)]
    assert inside, wing
    bad = [(name, i.module) for name in inside for i in MODULES[name]
           if _within(i.module, "engine") and i.module != "engine"
           and not any(_within(i.module, ok) for ok in WING_MAY_IMPORT[wing])]
    assert not bad, f"{wing} may import only {WING_MAY_IMPORT[wing]}: {bad}"


def test_the_top_of_engine_holds_only_shared_ground():
    top = sorted(p.stem for p in ENGINE.glob("*.py") if p.stem != "__init__")
    assert ["engine." + t for t in top] == sorted(SHARED_GROUND), top


def test_every_wing_says_what_it_owns():
    for init in ENGINE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 80, f"{init.parent.name}/__init__.py needs a docstring saying what it owns"


def test_the_session_names_no_model():
    side = [name for name in MODULES if any(_within(name, s) for s in SESSION_SIDE)]
    assert len(side) > 5, side                     # the rule reads the session's modules, all of them
    for name in side:
        used = {i.module for i in MODULES[name] if _within(i.module, "engine.model")}
        # "from engine.model.registry import x" also yields "engine.model.registry.x": keep the module.
        modules = {m for m in used if m in MODULES}
        assert modules <= SESSION_MAY_USE, f"{name} imports {sorted(modules - SESSION_MAY_USE)}"


def import_cycle(modules: dict[str, list[Import]]) -> list[str] | None:
    """One chain of imports (lazy ones too) that comes back to where it started, or None.

    Edges go from a module to every project module it names (``from a import b`` names ``a.b`` when
    that is a module, else ``a``); a package's ``__init__`` is not an edge of its children."""
    edges = {name: sorted({i.module for i in imports if i.module in modules and i.module != name})
             for name, imports in modules.items()}
    state: dict[str, int] = {}          # 1 on the current path, 2 done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for other in edges[name]:
            if state.get(other) == 1:
                return path[path.index(other):] + [other]
            if other not in state and (found := visit(other)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(modules):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_the_cycle_finder_finds_a_lazy_circle():
    a = imports_of("def f():\n    from pkg.b import g\n", "pkg.a")
    b = imports_of("from pkg import a\n", "pkg.b")
    assert import_cycle({"pkg.a": a, "pkg.b": b}) == ["pkg.a", "pkg.b", "pkg.a"]
    assert import_cycle({"pkg.a": a, "pkg.b": []}) is None


def test_no_import_circle():
    cycle = import_cycle(ALL_MODULES)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def _load_closure(start: str) -> dict[str, str]:
    """Every module imported (at load time) by importing ``start``, with the engine module that did it.

    Importing a module imports its parent packages first, so they are part of the closure too."""
    seen: dict[str, str] = {}
    todo = [(start, "")]
    while todo:
        name, via = todo.pop()
        if name in seen:
            continue
        seen[name] = via
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo.extend((p, name) for p in parents if p in MODULES)
        todo.extend((i.module, name) for i in MODULES.get(name, []) if i.at_load)
    return seen


@pytest.mark.parametrize("module", TORCH_FREE + tuple(sorted(
    name for name in MODULES if any(_within(name, w) for w in TORCH_FREE_WINGS))))
def test_deciders_import_no_torch(module):
    closure = _load_closure(module)
    torch_users = sorted({via for name, via in closure.items() if _within(name, "torch")})
    assert not torch_users, f"importing {module} imports torch (through {torch_users})"


def test_no_engine_module_imports_click():
    bad = [(name, i.module) for name, imports in MODULES.items() for i in imports if _within(i.module, "click")]
    assert not bad, bad


# Run in a fresh interpreter: help and refused options, which need no model, import no torch (about
# 1.5 s of CPU before anything is said; what a user waits for, and what each test process would pay).
NO_TORCH_FOR = """
import contextlib, io, sys
from worldpager_cli.main import cli
for args in (["--help"], ["generate", "--help"], ["generate", "--chunks", "abc"],
             ["bench", "device", "--dry-run", "--out", sys.argv[1], "--steps", "nope"],
             ["bench", "device", "--dry-run", "--out", sys.argv[1], "--step-budget", "nope=3"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            cli.main(args, prog_name="worldpager")
        except SystemExit as exc:
            code = exc.code
    print(code, "torch" in sys.modules, err.getvalue().strip().splitlines()[-1:])
"""


def test_help_and_refused_options_import_no_torch(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", NO_TORCH_FOR, str(tmp_path / "x")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = [line.split(" ", 2) for line in done.stdout.splitlines()]
    assert [(code, torch) for code, torch, _ in said] == [("0", "False")] * 2 + [("2", "False")] + [("1", "False")] * 2, \
        done.stdout
    assert "unknown step 'nope'" in said[3][2] and "no step 'nope'" in said[4][2], done.stdout
