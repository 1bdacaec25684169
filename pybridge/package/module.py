"""The generated module of a package (``NAME/__init__.py``) and its stub (``NAME/__init__.pyi``).

Both come from the same ``stubs.PyTypes`` of each program, so the run-time signatures (``help``,
``inspect.signature``) and the stub's agree. The module forwards each entry point to the
``EntryPoint`` of the library that holds it (bound once at load; one Python call more per call).

Any name Futhark accepts may name an entry point, a parameter, a field or a type, so the module's
own workings use only names that start with two underscores, which no Futhark name does:
``__pybridge__`` (a ``packaged.Package``), ``self.__entries__`` (a Library's bound entry points) and
the private spellings of ``stubs.VOCABULARY``. Only the public names below cannot be offered; an
entry point that would take one is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ..futhark.manifest import Manifest
from ..futhark.source import parse_source
from ..futhark.stubs import VOCABULARY, Entry, PyTypes, _docstring, import_lines, qualify, stub_header, user_names
from .errors import PackageError

# The public names of the generated module and of its Library class: an entry point cannot be both.
MODULE_NAMES = {"load": "a function", "Library": "a class", "BACKENDS": "a constant", "PROGRAMS": "a constant"}
LIBRARY_NAMES = {"backend": "an attribute", "mode": "an attribute", "libraries": "an attribute", "sync": "a method", "close": "a method"}


@dataclass(frozen=True)
class Program:
    name: str  # the program's stem
    manifest: Manifest
    source: str


@dataclass(frozen=True)
class Plan:
    types: list[PyTypes]
    entries: list[tuple[str, Entry]]  # (program, entry point)
    hidden: frozenset[str]  # vocabulary names an entry point or field takes (stubs.qualify)


def _refuse_public_names(entries: list[tuple[str, Entry]]) -> None:
    clashes, renames = [], []
    for prog, e in entries:
        for owner, names in (("", MODULE_NAMES), ("Library.", LIBRARY_NAMES)):
            if e.name in names:
                clashes.append(f"{e.futhark_name!r} of {prog}.fut ({owner}{e.name}, {names[e.name]})")
                renames.append(f"{e.name}_")
    if clashes:
        raise PackageError(
            f"entry point names the generated module keeps for itself: {', '.join(clashes)}; rename them, e.g. to {', '.join(renames)}"
        )


def plan(programs: list[Program]) -> Plan:
    shared: dict[str, str] = {}
    all_types: list[PyTypes] = []
    entries: list[tuple[str, Entry]] = []
    seen: dict[str, str] = {}
    taken = frozenset().union(*(user_names(p.manifest) for p in programs))
    for prog in programs:
        parsed = parse_source(prog.source)
        types = PyTypes(prog.manifest, dict(parsed.docs), frozenset(MODULE_NAMES) | frozenset(LIBRARY_NAMES) | taken, shared, source=parsed)
        shared.update(types.classes)
        all_types.append(types)
        for e in types.entries():
            if e.name in seen:
                raise PackageError(f"entry point {e.futhark_name!r} is in both {seen[e.name]}.fut and {prog.name}.fut; rename one")
            seen[e.name] = prog.name
            entries.append((prog.name, e))
    _refuse_public_names(entries)
    return Plan(all_types, entries, frozenset(VOCABULARY) & taken)


def module_source(name: str, version: str, summary: str, programs: list[Program], backends: list[str]) -> str:
    """``NAME/__init__.py``."""
    p = plan(programs)
    q = partial(qualify, hidden=p.hidden)
    table = {e.name: (prog, e.futhark_name) for prog, e in p.entries}
    doc = _docstring(
        f"{name} {version}: {summary}\n\nEntry points (module functions, on the best backend present, and methods of "
        f"load(backend)): {', '.join(table)}.\nBackends packaged: {', '.join(backends)}. Made with pybridge package.",
        0,
    )
    lines = [
        doc,
        "from __future__ import annotations",
        "",
        import_lines(p.hidden) + "import pybridge.futhark.packaged as __pb_packaged__",
        "",
        f"__version__ = {version!r}",
        f"BACKENDS = {tuple(backends)!r}",
        f"PROGRAMS = {tuple(prog.name for prog in programs)!r}",
        f"__pybridge__ = __pb_packaged__.Package(__name__, __file__, {table!r})",
        "",
    ]
    for t in p.types:
        lines += t.runtime_aliases(p.hidden)
    lines += [
        "",
        "",
        "class Library:",
        f"    {_docstring(f'The libraries of {name} on one backend, one Futhark context each; entry points as methods.', 4)}",
        "",
        f"    def __init__(self, backend: {q('str')} | None = None, **config: {q('Any')}) -> None:",
        "        self.backend, self.libraries, self.__entries__ = __pybridge__.load(backend, **config)",
        "        self.mode = __pybridge__.mode(self.libraries)",
    ]
    for _, e in p.entries:
        lines += [
            "",
            f"    {e.signature(p.hidden, method=True)}:",
            f"        {_docstring(e.doc, 8)}",
            f"        return {e.call(f'{e.receiver}.__entries__[{e.name!r}]')}",
        ]
    lines += [
        "",
        "    def sync(self) -> None:",
        "        for library in self.libraries.values():",
        "            library.sync()",
        "",
        "    def close(self) -> None:",
        "        for library in self.libraries.values():",
        "            library.close()",
        "",
        "    def __enter__(self) -> Library:",
        "        return self",
        "",
        f"    def __exit__(self, *exc: {q('object')}) -> None:",
        "        self.close()",
        "",
        f"    def __repr__(self) -> {q('str')}:",
        f'        return f"<{name} backend={{self.backend}} mode={{self.mode}}>"',
        "",
        "",
        f"def load(backend: {q('str')} | None = None, **config: {q('Any')}) -> Library:",
        f"    {_docstring(f'Load {name} on ``backend`` (one of {backends}; default: the best present, cuda where a GPU is usable, else multicore, else c). ``config``: see pybridge.futhark.load.', 4)}",
        "    return Library(backend, **config)",
    ]
    for _, e in p.entries:
        lines += ["", "", f"{e.signature(p.hidden)}:", f"    {_docstring(e.doc, 4)}", f"    return {e.call(f'__pybridge__.default()[{e.name!r}]')}"]
    return "\n".join(lines) + "\n"


def module_stub(name: str, version: str, programs: list[Program], backends: list[str]) -> str:
    """``NAME/__init__.pyi``."""
    p = plan(programs)
    q = partial(qualify, hidden=p.hidden)
    lit = f"{q('Literal')}[{', '.join(repr(b) for b in backends)}]"
    parts = [stub_header("package", ", ".join(f"{prog.name}.fut" for prog in programs), p.hidden)]
    parts.append(f"__version__: {q('str')}\nBACKENDS: {q('tuple[str, ...]')}\nPROGRAMS: {q('tuple[str, ...]')}\n")
    for t in p.types:
        parts += t.stub_classes(p.hidden)
    methods = [f"    {e.signature(p.hidden, method=True)}:\n        {_docstring(e.doc, 8)}\n        ..." for _, e in p.entries]
    parts.append(
        "class Library:\n"
        f"    backend: {q('str')}\n    mode: {q('str')}\n    libraries: {q('dict[str, FutharkLibrary]')}\n"
        f"    def __init__(self, backend: {lit} | None = None, **config: {q('Any')}) -> None: ...\n"
        + "\n".join(methods)
        + "\n    def sync(self) -> None: ...\n    def close(self) -> None: ...\n"
        f"    def __enter__(self) -> Library: ...\n    def __exit__(self, *exc: {q('object')}) -> None: ...\n"
    )
    parts.append(f"def load(backend: {lit} | None = None, **config: {q('Any')}) -> Library: ...\n")
    for _, e in p.entries:
        parts.append(f"{e.signature(p.hidden)}:\n    {_docstring(e.doc, 4)}\n    ...\n")
    return "\n".join(parts)
