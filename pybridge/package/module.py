"""The generated module of a package (``NAME/__init__.py``) and its stub (``NAME/__init__.pyi``).

Both come from the same ``stubs.PyTypes`` of each program, so the run-time signatures (``help``,
``inspect.signature``) and the stub's agree. The module forwards each entry point to the
``EntryPoint`` of the library that holds it (bound once at load; one Python call more per call).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..futhark.manifest import Manifest
from ..futhark.names import python_names
from ..futhark.source import parse_source
from ..futhark.stubs import STUB_HEADER, Entry, PyTypes, _docstring
from .errors import PackageError

# Names of the generated module and of its Library class an entry point cannot take.
MODULE_NAMES = frozenset({"load", "Library", "BACKENDS", "PROGRAMS", "np", "Any", "Literal", "TypedDict", "Sequence"})
LIBRARY_ATTRS = frozenset({"close", "sync", "backend", "mode", "libraries", "closed"})

@dataclass(frozen=True)
class Program:
    name: str  # the program's stem
    manifest: Manifest
    source: str


def plan(programs: list[Program]) -> tuple[list[PyTypes], list[tuple[str, Entry]]]:
    shared: dict[str, str] = {}
    all_types: list[PyTypes] = []
    entries: list[tuple[str, Entry]] = []
    seen: dict[str, str] = {}
    entry_names = frozenset(n for prog in programs for n in python_names(list(prog.manifest.entry_points)))
    for prog in programs:
        parsed = parse_source(prog.source)
        types = PyTypes(prog.manifest, dict(parsed.docs), MODULE_NAMES | entry_names, shared, source=parsed)
        shared.update(types.classes)
        all_types.append(types)
        for e in types.entries():
            if e.name in seen:
                raise PackageError(f"entry point {e.futhark_name!r} is in both {seen[e.name]}.fut and {prog.name}.fut; rename one")
            seen[e.name] = prog.name
            entries.append((prog.name, e))
    return all_types, entries


def _usable(e: Entry, taken: frozenset[str]) -> bool:
    return e.name.isidentifier() and e.name not in taken


def module_source(name: str, version: str, summary: str, programs: list[Program], backends: list[str]) -> str:
    """``NAME/__init__.py``."""
    types, entries = plan(programs)
    names = [e.name for _, e in entries]
    doc = _docstring(
        f"{name} {version}: {summary}\n\nEntry points (module functions, on the best backend present, and methods of "
        f"load(backend)): {', '.join(names)}.\nBackends packaged: {', '.join(backends)}. Made with pybridge package.",
        0,
    )
    lines = [
        doc,
        "from __future__ import annotations",
        "",
        "import threading as _threading",
        "from collections.abc import Sequence",
        "from pathlib import Path as _Path",
        "from typing import Any, Literal, TypedDict",
        "",
        "import numpy as np",
        "",
        "from pybridge.futhark.handles import ArrayHandle as _ArrayHandle, OpaqueHandle as _OpaqueHandle",
        "from pybridge.futhark.packaged import load_programs as _load_programs",
        "",
        f"__version__ = {version!r}",
        f"BACKENDS = {tuple(backends)!r}",
        f"PROGRAMS = {tuple(p.name for p in programs)!r}",
        '_ROOT = _Path(__file__).resolve().parent / "_futhark"',
        "",
    ]
    for t in types:
        lines += t.runtime_aliases()
    lines += [
        "",
        "",
        "class Library:",
        f"    {_docstring(f'The libraries of {name} on one backend, one Futhark context each; entry points as methods.', 4)}",
        "",
        "    def __init__(self, backend: str | None = None, **config: Any) -> None:",
        "        self.backend, self.libraries = _load_programs(_ROOT, __name__, backend, **config)",
        '        self.mode = "api" if all(lib.mode == "api" for lib in self.libraries.values()) else "abi"',
    ]
    for prog, e in entries:
        if _usable(e, LIBRARY_ATTRS):
            lines.append(f"        self._e_{e.name} = self.libraries[{prog!r}].entry_points[{e.futhark_name!r}]")
    for prog, e in entries:
        if not _usable(e, LIBRARY_ATTRS):
            continue
        args = ", ".join(p.name for p in e.params)
        lines += ["", f"    {e.signature(True)}:", f"        {_docstring(e.doc, 8)}", f"        return self._e_{e.name}({args})"]
    lines += [
        "",
        "    def sync(self) -> None:",
        "        for lib in self.libraries.values():",
        "            lib.sync()",
        "",
        "    def close(self) -> None:",
        "        for lib in self.libraries.values():",
        "            lib.close()",
        "",
        "    def __enter__(self) -> Library:",
        "        return self",
        "",
        "    def __exit__(self, *exc: object) -> None:",
        "        self.close()",
        "",
        "    def __repr__(self) -> str:",
        f'        return f"<{name} backend={{self.backend}} mode={{self.mode}}>"',
        "",
        "",
        "def load(backend: str | None = None, **config: Any) -> Library:",
        f"    {_docstring(f'Load {name} on ``backend`` (one of {backends}; default: the best present, cuda where a GPU is usable, else multicore, else c). ``config``: see pybridge.futhark.load.', 4)}",
        "    return Library(backend, **config)",
        "",
        "",
        "_default_lock = _threading.Lock()",
        "_default_lib: Library | None = None",
        "",
        "",
        "def _default() -> Library:",
        "    global _default_lib",
        "    with _default_lock:",
        "        if _default_lib is None or any(lib.closed for lib in _default_lib.libraries.values()):",
        "            _default_lib = load()",
        "        return _default_lib",
    ]
    for _, e in entries:
        if not _usable(e, MODULE_NAMES):
            continue
        args = ", ".join(p.name for p in e.params)
        lines += ["", "", f"{e.signature()}:", f"    {_docstring(e.doc, 4)}", f"    return _default().{e.name}({args})"]
    return "\n".join(lines) + "\n"


def module_stub(name: str, version: str, programs: list[Program], backends: list[str]) -> str:
    """``NAME/__init__.pyi``."""
    types, entries = plan(programs)
    lit = f"Literal[{', '.join(repr(b) for b in backends)}]"
    parts = [STUB_HEADER.format(what="package", sources=", ".join(f"{p.name}.fut" for p in programs)), "import pybridge.futhark.library\n"]
    parts.append(f"__version__: str\nBACKENDS: tuple[str, ...]\nPROGRAMS: tuple[str, ...]\n")
    for t in types:
        parts += t.stub_classes()
    methods = [
        f"    {e.signature(True)}:\n        {_docstring(e.doc, 8)}\n        ..." for _, e in entries if _usable(e, LIBRARY_ATTRS)
    ]
    parts.append(
        "class Library:\n"
        "    backend: str\n    mode: str\n    libraries: dict[str, pybridge.futhark.library.Library]\n"
        f"    def __init__(self, backend: {lit} | None = None, **config: Any) -> None: ...\n"
        + "\n".join(methods)
        + "\n    def sync(self) -> None: ...\n    def close(self) -> None: ...\n"
        "    def __enter__(self) -> Library: ...\n    def __exit__(self, *exc: object) -> None: ...\n"
    )
    parts.append(f"def load(backend: {lit} | None = None, **config: Any) -> Library: ...\n")
    for _, e in entries:
        if _usable(e, MODULE_NAMES):
            parts.append(f"{e.signature()}:\n    {_docstring(e.doc, 4)}\n    ...\n")
    return "\n".join(parts)
