"""The package's import graph has no cycles (lazy imports inside functions count; imports only
for type checking do not), and the pipeline's layers point one way: a stage never imports a
later one. A failure names the modules so the move that breaks the cycle is obvious."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Set

import pytest

ROOT = Path(__file__).resolve().parent.parent / "doctor"

# Lower layers first; a module may import its own layer and the ones before it.
LAYERS = [
    {"doctor.errors", "doctor.model", "doctor.resources", "doctor.cachedir", "doctor.memo", "doctor"},
    {"doctor.versions", "doctor.yamlio", "doctor.bounded"},
    {"doctor.probe", "doctor.snapshot"},
    {"doctor.workload", "doctor.configs", "doctor.releases"},
    {"doctor.rules", "doctor.assume"},
    {"doctor.fix", "doctor.verify"},
    {"doctor.report", "doctor.cluster", "doctor.fleet"},
    {"doctor.app"},
    {"doctor.commands", "doctor.cli", "doctor.__main__"},
]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(path: Path, modules: Set[str]) -> Set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out: Set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names: List[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` imports pkg.sub (and pkg's __init__, which is not a cycle
            # unless pkg's __init__ imports back); `from mod import name` imports mod
            subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
            names = subs if len(subs) == len(node.names) else [node.module] + subs
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != "doctor":
                out.add(name)
    return out


@lru_cache(maxsize=1)
def _graph() -> Dict[str, Set[str]]:
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    modules = set(files)
    return {m: _imports(p, modules) - {m} for m, p in files.items()}


def test_no_import_cycles() -> None:
    graph = _graph()
    state: Dict[str, int] = {}
    stack: List[str] = []
    cycles: List[List[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + " | ".join(" -> ".join(c) for c in cycles)


def _layer(module: str) -> int:
    best = -1
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or module.startswith(prefix + "."):
                best = i if prefix != "doctor" or module == "doctor" else best
    return best


def test_every_module_has_a_layer() -> None:
    missing = [m for m in _graph() if _layer(m) < 0]
    assert not missing, f"add these to LAYERS: {missing}"


@pytest.mark.parametrize("module", sorted(_graph()))
def test_imports_point_down_the_pipeline(module: str) -> None:
    mine = _layer(module)
    upward = [n for n in sorted(_graph()[module]) if _layer(n) > mine]
    assert not upward, f"{module} (layer {mine}) imports later stages: {upward}"
