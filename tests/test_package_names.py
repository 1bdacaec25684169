"""Any name Futhark accepts, in a package made by `pybridge package` and in `pybridge stubs` (issue 31,
items 4, 5, 6, 9 and 11).

The property: hypothesis draws programs (tests/interface_gen.py, tagged entry points) whose entry
point, parameter, field and type names are Python keywords, builtins, `self`, every name the
generated module, its Library, pybridge's Library and handles define (harvested from generated
code), and their leading-underscore twins, with doc comments full of quotes and backslashes. Each
package is built (c backend) and imported; every entry point runs under its own name, as a module
function and as a method, positionally and by keyword, and gives its own result; the stubs compile,
agree with the run time, and `mypy --strict` accepts correct calls through them. An entry point
that takes a name of the module's public interface is refused with one line naming it.

    PYBRIDGE_NAMES_EXAMPLES=<n>   hypothesis examples (programs) of the property; default 5
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import keyword
import os
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings, strategies as st

import interface_gen as g
from pybridge.futhark.build import futhark_compiler

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("PYBRIDGE_NAMES_EXAMPLES", "5"))
# The generated module's public interface (documented): an entry point of one of these names is refused.
PUBLIC = {"load", "Library", "BACKENDS", "PROGRAMS", "backend", "mode", "libraries", "sync", "close"}
# Names of earlier generated modules (issue 31): each one broke a package.
EARLIER = ["_default", "_default_lock", "_default_lib", "_ROOT", "_Path", "_load_programs", "_threading",
           "_ArrayHandle", "_OpaqueHandle", "_e_foo", "foo", "_e_sync", "np", "Any", "Sequence", "Literal", "TypedDict"]

pytestmark = [
    pytest.mark.futhark,
    pytest.mark.slow,  # packages built for drawn programs, checked by mypy: about 38 s of CPU time
    pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found: run `make` (it obtains it) or set FUTHARK"),
]
_serial = itertools.count()
COUNTS: Counter[str] = Counter()


def _identifiers(source: str) -> set[str]:
    """Every name a piece of Python source binds or uses."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.alias):
            out.update((node.asname or node.name).split("."))
    return out


def harvested_names() -> list[str]:
    """The names generated code holds (a package's module and stub, `pybridge stubs` output, of a
    reference program with records, sums and arrays) and pybridge's own classes define."""
    from pybridge.futhark.handles import ArrayHandle, OpaqueHandle
    from pybridge.futhark.library import Library
    from pybridge.futhark.manifest import load_manifest
    from pybridge.futhark.packaged import Package
    from pybridge.futhark.stubs import library_stub
    from pybridge.package.module import Program, module_source, module_stub

    manifest = load_manifest(ROOT / "tests" / "reference" / "types.c.json")
    source = (ROOT / "tests" / "reference" / "types.fut").read_text()
    prog = [Program("types", manifest, source)]
    names = set(EARLIER) | PUBLIC
    for text in (module_source("pkg", "1.0", "s", prog, ["c"]), module_stub("pkg", "1.0", prog, ["c"]), library_stub(manifest, source)):
        names |= _identifiers(text)
    names |= {n for cls in (Library, ArrayHandle, OpaqueHandle, Package) for n in dir(cls)} | set(Library.__annotations__)
    return sorted(names - set(manifest.entry_points) - set(manifest.types))


def _names() -> st.SearchStrategy[str]:
    harvested = g.clash_names(harvested_names())
    # The names that clash with something are drawn half of the time; the rest from all of them.
    special = set(harvested) - set(g.clash_names()) | {"self", "int", "float", "bool", "tuple", "dict", "str", "object",
                                                       "any", "all", "len", "print"} | {n for n in keyword.kwlist if g.futhark_name(n)}
    return st.one_of(st.sampled_from(sorted(special)), st.sampled_from(harvested))


names = st.deferred(_names)  # harvested when first drawn, not at collection


@st.composite
def programs(draw: Any) -> tuple[list[g.Entry], list[g.Named], set[str]]:
    """(tagged entry points, record types, the entry points whose names are refused)."""
    types = draw(g.named_types(names))
    refuse = draw(st.integers(1, 6)) == 6  # one program in six or so names an entry point like the public interface
    entry_names = draw(st.lists(names.filter(lambda n: n not in PUBLIC), min_size=2, max_size=7, unique_by=g.mangle))
    if refuse:
        public = draw(st.sampled_from(sorted(PUBLIC)))
        entry_names[draw(st.integers(0, len(entry_names) - 1))] = public
        entry_names = list(dict.fromkeys(entry_names))
    entries = [draw(g.tagged_entry(n, tag + 1, names, types)) for tag, n in enumerate(entry_names)]
    return entries, types, set(entry_names) & PUBLIC


def _args(e: g.Entry, k: int) -> list[Any]:
    """Arguments of e: the i64 j is 1 + (j + k) % 9, a record's fields are 1..9 by position."""
    out: list[Any] = []
    for j, p in enumerate(e.params):
        if isinstance(p.type, g.Named):
            out.append({f: 1 + (i + j + k) % 9 for i, f in enumerate(p.type.fields)})
        else:
            out.append(1 + (j + k) % 9)
    return out


def _build(tmp: Path, name: str, text: str) -> tuple[Path, Any]:
    """Write prog.fut, package it as ``name`` (c backend) and extract the wheel: (site folder, wheel)."""
    from pybridge.package import build_package

    src = tmp / "prog.fut"
    src.write_text(text, encoding="utf-8")
    wheel = build_package([src], name, "0.1", ["c"], tmp / "dist")
    zipfile.ZipFile(wheel).extractall(tmp / "site")
    return tmp / "site", wheel


def _import(site: Path, name: str) -> Any:
    sys.path.insert(0, str(site))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(site))


def _py(names: list[str]) -> list[str]:
    from pybridge.futhark.names import python_names

    return list(python_names(names))


def _check_result(res: Any, e: g.Entry, want: int, where: str) -> list[str]:
    """``res`` holds ``want`` (an i64, or a record whose every field does); returns the field
    attributes the stub must declare (Python spellings that OpaqueHandle does not take)."""
    from pybridge.futhark.handles import OpaqueHandle

    result = e.result[0]  # type: ignore[index]
    if not isinstance(result, g.Named):
        assert int(res) == want, f"{where}: {res} != {want}"
        return []
    attrs = []
    for f, py in zip(result.fields, _py(list(result.fields))):
        assert int(res.field(f)) == want and int(res[f]) == want, f"{where}.{f}: {res.field(f)} != {want}"
        if py not in dir(OpaqueHandle):
            assert int(getattr(res, py)) == want, f"{where}.{py}"
            attrs.append(py)
    return attrs


def _doc(raw: str | None, indent: int) -> str:
    """A doc comment's text from a docstring (lines after the first indented by ``indent``, which
    Python 3.13 removes; tabs kept, unlike inspect.cleandoc), without the Futhark signature."""
    first, *rest = (raw or "").split("\n")
    return "\n".join([first] + [ln.removeprefix(" " * indent) for ln in rest]).split("\n\nFuthark: ")[0].strip()


def _stub_defs(stub: str, cls: str | None) -> dict[str, ast.FunctionDef]:
    """The functions a stub defines at module level (``cls`` None) or in class ``cls``."""
    tree = ast.parse(stub)
    body = tree.body if cls is None else next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return {n.name: n for n in body if isinstance(n, ast.FunctionDef)}


def _mypy(folder: Path, files: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--follow-imports=silent", "--cache-dir", str(cache), *files],
        cwd=folder, capture_output=True, text=True, env={**os.environ, "MYPYPATH": os.pathsep.join([str(folder), str(ROOT)])},
    )


def check_package(tmp: Path, entries: list[g.Entry], types: list[g.Named], refused: set[str], mypy_cache: Path) -> None:
    from pybridge.futhark.entry import EntryPoint
    from pybridge.futhark.stubs import library_stub
    from pybridge.package import PackageError

    name = f"pkgnames{os.getpid()}_{next(_serial)}"
    text = g.program(entries, types)
    note(text)
    if refused:
        with pytest.raises(PackageError) as info:
            _build(tmp, name, text)
        message = str(info.value)
        assert "\n" not in message and all(repr(n) in message for n in refused), message
        assert not (tmp / "dist").exists() or not list((tmp / "dist").glob("*.whl"))
        COUNTS["refused"] += 1
        return
    site, _ = _build(tmp, name, text)
    pkg_stub = (site / name / "__init__.pyi").read_text(encoding="utf-8")
    compile(pkg_stub, "__init__.pyi", "exec")  # a syntax error or a repeated parameter name fails here
    pkg = _import(site, name)
    lib = pkg.load("c")
    pflib = lib.libraries["prog"]  # pybridge's own Library: what `pybridge stubs` describes
    api_stub = library_stub(pflib.manifest, text, "prog.fut")
    compile(api_stub, "prog_api.pyi", "exec")
    (site / "prog_api.pyi").write_text(api_stub, encoding="utf-8")
    module_defs, method_defs, api_defs = _stub_defs(pkg_stub, None), _stub_defs(pkg_stub, "Library"), _stub_defs(api_stub, "Library")
    use_pkg = ["import numpy as np", f"import {name}", f"lib = {name}.load('c')"]
    use_api = ["import typing", "import numpy as np", "import pybridge.futhark as pf", "if typing.TYPE_CHECKING:",
               "    import prog_api", f"lib = typing.cast('prog_api.Library', pf.load({str(pflib.path)!r}))"]
    for i, (e, py) in enumerate(zip(entries, _py([e.name for e in entries]))):
        pnames = _py([p.name for p in e.params])
        args = _args(e, i)
        want = g.expected_value(e, i + 1, args)
        kwargs = dict(zip(pnames, args))
        where = f"entry point {e.name!r} ({py})"
        # Under its own name, with its own result: module function and method, positional and keywords.
        fields = _check_result(getattr(pkg, py)(*args), e, want, f"{name}.{py}(positional)")
        _check_result(getattr(pkg, py)(**kwargs), e, want, f"{name}.{py}(keywords)")
        _check_result(getattr(lib, py)(*args), e, want, f"load().{py}(positional)")
        _check_result(getattr(lib, py)(**kwargs), e, want, f"load().{py}(keywords)")
        assert list(inspect.signature(getattr(pkg, py)).parameters) == pnames, where
        assert list(inspect.signature(getattr(lib, py)).parameters) == pnames, where
        if e.doc:
            assert _doc(getattr(pkg, py).__doc__, 4) == e.doc, where
            assert _doc(ast.get_docstring(module_defs[py], clean=False), 4) == e.doc, where
            assert _doc(getattr(lib, py).__doc__, 8) == e.doc, where
        assert py in module_defs and py in method_defs, where
        call = f"{py}({', '.join(map(repr, args))})"
        kwcall = f"{py}({', '.join(f'{k}={a!r}' for k, a in kwargs.items())})"
        result = e.result[0]  # type: ignore[index]
        annot = ": np.int64" if not isinstance(result, g.Named) else ""
        use_pkg += [f"m{i}{annot} = {name}.{call}", f"l{i}{annot} = lib.{kwcall}"]
        use_pkg += [f"f{i}_{j}: np.int64 = m{i}.{f}" for j, f in enumerate(fields)]
        # pybridge stubs: a method exactly where pf.load's Library has the entry point as an attribute.
        bound = isinstance(vars(pflib).get(py), EntryPoint)
        declared = py in api_defs and f"Futhark: entry {e.name} " in (ast.get_docstring(api_defs[py]) or "")
        assert declared == bound, f"{where}: stub method {declared}, attribute at run time {bound}"
        if bound:
            _check_result(getattr(pflib, py)(*args), e, want, f"pf.load().{py}")
            use_api.append(f"a{i}{annot} = lib.{kwcall}")
    for t in types:  # a type's doc comment: its class's docstring (a type no entry point uses has no class)
        if t.doc and t.name in pflib.manifest.types:
            cls = [n for n in ast.parse(pkg_stub).body if isinstance(n, ast.ClassDef) and _doc(ast.get_docstring(n, clean=False), 4) == t.doc]
            assert cls, f"type {t.name}: no class with its doc comment {t.doc!r}"
    (site / "use_pkg.py").write_text("\n".join(use_pkg + ["lib.close()"]) + "\n", encoding="utf-8")
    (site / "use_api.py").write_text("\n".join(use_api + ["lib.close()"]) + "\n", encoding="utf-8")
    lib.close()
    proc = _mypy(site, ["use_pkg.py", "use_api.py", f"{name}/__init__.pyi", "prog_api.pyi"], mypy_cache)
    assert proc.returncode == 0, f"mypy --strict:\n{proc.stdout}{proc.stderr}"
    COUNTS.update(built=1, entries=len(entries), types=len(types), calls=4 * len(entries))


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Any:
    pytest.importorskip("mypy")
    yield tmp_path_factory.mktemp("mypy-cache")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if COUNTS and capture is not None:
        with capture.global_and_fixture_disabled():
            print(f"\n[package names] {COUNTS['built']} packages built and checked ({COUNTS['entries']} entry points, "
                  f"{COUNTS['calls']} calls, {COUNTS['types']} record types), {COUNTS['refused']} refused")


# No shrinking: each example compiles a program (seconds); a failure prints its program instead.
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
@given(programs())
def test_any_names_package_runs_each_entry_under_its_own_name(mypy_cache: Path, drawn: Any) -> None:
    entries, types, refused = drawn
    with tempfile.TemporaryDirectory(prefix="pybridge-names-") as tmp:
        check_package(Path(tmp), entries, types, refused, mypy_cache)


# ---------------------------------------------------------------- one regression test per item


def _package(tmp: Path, text: str) -> Any:
    name = f"pkgnames{os.getpid()}_{next(_serial)}"
    site, _ = _build(tmp, name, text)
    return _import(site, name)


def test_entry_points_named_like_the_modules_workings_run_their_own_code(tmp_path: Path) -> None:
    """Item 4: `_e_foo` beside `foo` ran foo (the Library kept bound entry points as self._e_<name>)."""
    pkg = _package(tmp_path, "entry _e_foo (x: i64) : i64 = x * 100\nentry foo (x: i64) : i64 = 10\nentry _e_e_foo (x: i64) : i64 = x + 7\n")
    assert (pkg._e_foo(3), pkg.foo(3), pkg._e_e_foo(3)) == (300, 10, 10)
    with pkg.load("c") as lib:
        assert (lib._e_foo(3), lib.foo(3), lib._e_e_foo(3)) == (300, 10, 10)


def test_entry_points_named_like_the_public_interface_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 4: `sync` with no parameters returned None (Library.sync ran), `close`, `mode`, `backend`,
    `libraries` raised TypeError; the module's own load, Library, BACKENDS, PROGRAMS likewise."""
    from pybridge.cli import main
    from pybridge.package import PackageError

    src = tmp_path / "clash.fut"
    src.write_text("entry sync : i64 = 42\nentry ok (x: i64) : i64 = x\n" + "".join(f"entry {n} (x: i64) : i64 = x\n" for n in sorted(PUBLIC - {"sync"})))
    with pytest.raises(PackageError) as info:
        from pybridge.package import build_package

        build_package([src], "clashpkg", "0.1", ["c"], tmp_path / "dist")
    message = str(info.value)
    assert "\n" not in message and all(f"'{n}'" in message for n in PUBLIC) and "'ok'" not in message, message
    assert not (tmp_path / "dist").exists()
    assert main(["package", str(src), "--name", "clashpkg", "--backends", "c", "-o", str(tmp_path / "dist")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "entry point names the generated module keeps for itself" in err and "'sync'" in err, err


def test_a_parameter_named_self(tmp_path: Path) -> None:
    """Item 5: `def f(self, self: ...)` made the wheel fail to import, and `pybridge stubs` wrote it too."""
    from pybridge.cli import main

    text = "entry f (self: i64) (x: i64) : i64 = self * 10 + x\n"
    pkg = _package(tmp_path, text)
    assert pkg.f(4, 2) == 42 and pkg.f(self=4, x=2) == 42
    with pkg.load("c") as lib:
        assert lib.f(4, 2) == 42 and lib.f(self=4, x=2) == 42
        assert list(inspect.signature(lib.f).parameters) == ["self", "x"]
    (tmp_path / "self.fut").write_text(text)
    assert main(["stubs", str(tmp_path / "self.fut"), "-o", str(tmp_path / "self_api.pyi")]) == 0
    compile((tmp_path / "self_api.pyi").read_text(), "self_api.pyi", "exec")


def test_names_of_the_generated_modules_workings(tmp_path: Path) -> None:
    """Item 6: entry points or parameters named like the module's private names broke every
    function of the module (a parameter hid `_default` in its own function), or load()."""
    names = ["_default", "_default_lock", "_default_lib", "_ROOT", "_Path", "_load_programs", "_threading",
             "_ArrayHandle", "_OpaqueHandle", "np", "Any", "any", "all", "dict"]
    entries = "".join(f"entry {n} (x: i64) : i64 = x + {i}\n" for i, n in enumerate(names))
    params = " ".join(f"({n}: i64)" for n in names)
    readable = [n for n in names if not n.startswith("_")]  # Futhark lets a body read only these
    entries += f"entry params {params} : i64 = {' + '.join(readable)}\n"
    pkg = _package(tmp_path, entries)
    for i, n in enumerate(names):
        assert getattr(pkg, n)(100) == 100 + i, n
    assert pkg.params(*range(len(names))) == sum(i for i, n in enumerate(names) if n in readable)
    assert pkg.params(**{n: 1 for n in names}) == len(readable)
    with pkg.load("c") as lib:
        assert [getattr(lib, n)(100) for n in names] == [100 + i for i in range(len(names))]


def test_doc_comments_ending_in_a_quote_or_backslash(tmp_path: Path) -> None:
    """Item 9: a one-line doc comment ending in `"` made the stub (and `pybridge stubs`) invalid Python."""
    from pybridge.cli import main

    text = ('-- | A point "p"\ntype point = {x: i64, y: i64}\n-- | ends in a backslash \\\n'
            'entry f (p: point) : i64 = p.x\n-- | """triple""" and \\" and "\nentry g (x: i64) : i64 = x\n')
    pkg = _package(tmp_path, text)
    stub = (Path(pkg.__file__).with_suffix(".pyi")).read_text(encoding="utf-8")
    compile(stub, "__init__.pyi", "exec")
    assert 'A point "p"' in [ast.get_docstring(n) for n in ast.parse(stub).body if isinstance(n, ast.ClassDef)]
    assert pkg.f.__doc__.startswith("ends in a backslash \\\n") and pkg.g.__doc__.startswith('"""triple""" and \\" and "\n')
    (tmp_path / "docs.fut").write_text(text)
    assert main(["stubs", str(tmp_path / "docs.fut"), "-o", str(tmp_path / "docs_api.pyi")]) == 0
    compile((tmp_path / "docs_api.pyi").read_text(encoding="utf-8"), "docs_api.pyi", "exec")


@pytest.mark.parametrize("name", ["json", "sys", "typing", "collections", "__main__", "numpy", "cffi", "_cffi_backend",
                                  "pybridge", "platformdirs", "filelock"])
def test_package_names_that_would_shadow_a_module_are_refused(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 11: `--name json` or `numpy` was accepted: the installed package could never be imported,
    or it replaced a module it needs. Refused before anything is compiled."""
    from pybridge.cli import main

    src = tmp_path / "prog.fut"
    src.write_text("entry f (x: i64) : i64 = x\n")
    assert main(["package", str(src), "--name", name, "--backends", "c", "-o", str(tmp_path / "dist")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"name: {name!r} is a module" in err and "pick another name" in err, err
    assert not (tmp_path / "dist").exists()
