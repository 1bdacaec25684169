"""The shape of the package: one exception root, no import circles, no generic module importing the demo.

Read from the source with ``ast`` (every import statement, top level or inside a function), so a
circle hidden in a function-level import counts too, as a reader of the tree would see it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import pybridge
from pybridge.errors import PybridgeError

PACKAGE_DIR = Path(pybridge.__file__).parent
# Modules that need optional packages to import at all (dask, distributed).
OPTIONAL = ("pybridge.dask",)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    # Compiled extensions (pybridge/futhark/_callpath.c): modules too, which import no pybridge module.
    for path in PACKAGE_DIR.rglob("*.c"):
        if "PyInit_" in path.read_text():
            found[".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the pybridge modules it imports (``from pkg import mod`` counts as importing mod)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        if path.suffix == ".c":
            continue
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    full = ".".join(base + ([node.module] if node.module else []))
                else:
                    full = node.module or ""
                targets = [f"{full}.{a.name}" if f"{full}.{a.name}" in modules else full for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_import_graph_sees_a_planted_circle():
    # The checker itself, on a graph with a known circle and a known clean one.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_generic_modules_do_not_import_the_demo():
    graph = import_graph()
    offenders = {m: sorted(t for t in targets if t.startswith("pybridge.demo"))
                 for m, targets in graph.items()
                 # the command line runs the demo; the benchmarks measure the project's own kernels
                 if not m.startswith(("pybridge.demo", "pybridge.bench")) and m not in ("pybridge.cli", "pybridge.__main__")}
    assert {m: t for m, t in offenders.items() if t} == {}


def _exception_classes():
    for info in pkgutil.walk_packages(pybridge.__path__, "pybridge."):
        if info.name.startswith(OPTIONAL) or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                yield cls


def test_every_pybridge_exception_has_one_root():
    classes = list(_exception_classes())
    assert len(classes) >= 10, classes  # the walk really found the package's errors
    strays = [f"{c.__module__}.{c.__qualname__}" for c in classes
              if not issubclass(c, PybridgeError) and not c.__name__.startswith("_")]
    assert strays == []


def test_root_errors_keep_their_builtin_bases():
    import pybridge.cuda as cuda
    import pybridge.futhark as pf
    from pybridge.testing import MismatchError

    assert issubclass(pf.OutOfMemoryError, MemoryError)
    assert issubclass(pf.ManifestError, ValueError)
    assert issubclass(cuda.CudaError, RuntimeError)
    assert issubclass(cuda.SignatureError, ValueError)
    assert issubclass(MismatchError, AssertionError)
