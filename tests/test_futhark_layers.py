"""pybridge.futhark's layers (issue 15): size names in entry-point signatures, every handle
converting through ``.numpy()``, pickling registered from the library layer, and imports that only
go downward (manifest -> types -> handles -> kinds -> conversion -> entry points -> library).

Runs on the real compiler's output (build/ from `make`), c backend.
"""

from __future__ import annotations

import ast
import copy
import inspect
import pickle
from pathlib import Path

import numpy as np
import pytest

import pybridge.futhark as pf
from conftest import library_sources

PKG = Path(pf.__file__).parent
# Each module of the handle/entry stack, lowest first: a module may import only those before it.
LAYERS = ["manifest", "context", "protocols", "handles", "kinds", "conversion", "callplan", "entry", "library"]


@pytest.fixture(scope="module")
def saxpy():
    lib = pf.load("saxpy", backend="c")
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def matmul():
    lib = pf.load("matmul", backend="c")
    yield lib
    lib.close()


@pytest.fixture(scope="module", params=library_sources("types")[:1])
def types_lib(request):
    lib = pf.load(request.param)
    yield lib
    lib.close()


# ---------------------------------------------------------------- sizes from the .fut header


def test_signature_names_sizes_from_the_source(saxpy, matmul):
    sig = inspect.signature(saxpy.saxpy)
    assert [p.annotation for p in sig.parameters.values()] == ["f32", "[n]f32", "[n]f32"]
    assert sig.return_annotation == "[n]f32"
    assert saxpy.saxpy.sizes == ("n",)
    assert repr(saxpy.saxpy) == "<Futhark entry point saxpy(a: 'f32', xs: '[n]f32', ys: '[n]f32') -> '[n]f32'>"
    m = inspect.signature(matmul.matmul)
    assert [p.annotation for p in m.parameters.values()] == ["[n][m]f32", "[m][p]f32"]
    assert m.return_annotation == "[n][p]f32"
    assert matmul.matmul.sizes == ("n", "m", "p")
    assert "matmul(a: '[n][m]f32', b: '[m][p]f32') -> '[n][p]f32'" in matmul.matmul.__doc__


def test_size_names_include_scalar_sizes_of_results():
    lib = pf.load("histogram", backend="c")
    try:
        ep = lib.histogram  # entry histogram [n] (nbins: i64) (xs: [n]i32) : [nbins]i32
        assert ep.sizes == ("n", "nbins")
        assert inspect.signature(ep).return_annotation == "[nbins]i32"
        assert inspect.signature(ep).parameters["nbins"].annotation == "i64"
    finally:
        lib.close()


def test_without_a_source_the_manifest_spelling_stays(tmp_path, saxpy):
    # Copy the library without its .fut: no size names can be known.
    for suffix in (".so", ".json", ".h"):
        name = f"libsaxpy{suffix}" if suffix == ".so" else f"saxpy{suffix}"
        src = saxpy.path.with_name(name)
        if src.exists():
            (tmp_path / name).write_bytes(src.read_bytes())
    lib = pf.load(tmp_path / "libsaxpy.so", mode="abi")
    try:
        assert lib.source is None
        assert lib.saxpy.sizes == ()
        assert str(inspect.signature(lib.saxpy)) == "(a: 'f32', xs: '[]f32', ys: '[]f32') -> '[]f32'"
        np.testing.assert_allclose(lib.saxpy(2.0, np.ones(3, np.float32), np.ones(3, np.float32)).numpy(), [3, 3, 3])
    finally:
        lib.close()


def test_unique_and_unsized_parameters_keep_their_marks(types_lib):
    assert str(inspect.signature(types_lib.fill)) == "(xs: '*[]i32', v: 'i32') -> '*[]i32'"
    assert types_lib.fill.sizes == ()
    # several results: each component of the source's result tuple (`: (f32, [2]i32)`)
    assert inspect.signature(types_lib.pair_out).return_annotation == "(f32, [2]i32)"
    assert str(inspect.signature(types_lib.ranks)) == (
        "(a: '[][]f64', b: '[][][]u8', c: '[]bool') -> '([][]f64, [][][]u8, []bool)'")


# ---------------------------------------------------------------- every handle converts through .numpy()


def test_opaque_numpy_gives_the_to_numpy_structure(types_lib):
    p = types_lib.make_point(3.0, 4.0)
    assert p.numpy() == {"x": np.float32(3.0), "y": np.float32(4.0)} == pf.to_numpy(p)
    assert all(type(v) is np.float32 for v in p.numpy().values())
    assert types_lib.rect(2.0, 5.0).numpy() == ("rect", (2.0, 5.0))
    assert types_lib.circle(1.5).numpy() == ("circle", (1.5,))
    pair = types_lib.pair_out(7.0)  # a tuple of results, not an opaque
    assert pf.to_numpy(pair)[0] == np.float32(7.0)
    xs, ys = np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32) * 2
    cols = types_lib.points(xs, ys).numpy()  # an array of records: dict of columns
    assert set(cols) == {"x", "y"}
    np.testing.assert_array_equal(cols["x"], xs)
    np.testing.assert_array_equal(cols["y"], ys)
    assert pf.to_numpy(types_lib.points(xs, ys)).keys() == cols.keys()


def test_numpy_of_a_freed_or_consumed_opaque_raises(types_lib):
    p = types_lib.make_point(1.0, 2.0)
    p.free()
    with pytest.raises(pf.InvalidHandleError):
        p.numpy()
    with pytest.raises(pf.InvalidHandleError):
        pf.to_numpy(p)


# ---------------------------------------------------------------- pickling, registered by library.py


def test_pickle_goes_through_the_library_layer(types_lib, saxpy):
    import copyreg

    from pybridge.futhark import library

    assert copyreg.dispatch_table[pf.ArrayHandle] is library._reduce_array
    assert copyreg.dispatch_table[pf.OpaqueHandle] is library._reduce_opaque
    a = saxpy.types["[]f32"].new(np.arange(5, dtype=np.float32))
    data = pickle.dumps(a)
    assert b"pybridge.futhark.library" in data and b"_restore_array" in data
    b = pickle.loads(data)
    assert b is not a and b.library is saxpy
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    s = types_lib.rect(3.0, 4.0)
    t = copy.deepcopy(s)  # copy goes through the same table: a new value, not the same pointer
    assert t is not s and t.numpy() == s.numpy() == ("rect", (3.0, 4.0))
    s.free()
    assert t.numpy() == ("rect", (3.0, 4.0))
    with pytest.raises(pf.InvalidHandleError):
        pickle.dumps(s)


def test_copies_and_round_trips_stay_in_the_handles_own_library(types_lib):
    """Issue 31 item 8: with one .so loaded twice, copy.copy, copy.deepcopy and a pickle round trip
    of a handle of the first library gave a handle of the second (the one loaded last for that
    path). Each now lands in the handle's own Library while that is open; the rule for the rest
    (the latest open library of the file, else the file loaded again) is library_for_key's."""
    import subprocess

    from pybridge.executables import child_env, python_command

    first = pf.load(types_lib.path, mode="abi")
    second = pf.load(types_lib.path, mode="abi")
    later = []
    try:
        values = [first.types["[]f32"].new(np.arange(4, dtype=np.float32)), first.rect(3.0, 4.0)]
        for h in values:
            for twin in (copy.copy(h), copy.deepcopy(h), pickle.loads(pickle.dumps(h))):
                assert twin.library is first and twin is not h, (type(h).__name__, twin.library)
                np.testing.assert_equal(twin.numpy(), h.numpy())
        data = pickle.dumps(values[1])
        first.close()  # the original is gone: the latest open library of that file
        assert pickle.loads(data).library is second
        second.close()
        again = pickle.loads(data)  # none open: the file is loaded again
        later.append(again.library)
        assert again.library not in (first, second) and not again.library.closed
        assert again.numpy() == ("rect", (3.0, 4.0))
        # Another process knows only the path: the same rule, there.
        code = "import pickle, sys\nh = pickle.loads(sys.stdin.buffer.read())\nprint(h.library.path, h.numpy() == ('rect', (3.0, 4.0)))\n"
        proc = subprocess.run(python_command(code), input=data, capture_output=True, env=child_env(), timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode().split(" ", 1) == [str(types_lib.path), "True\n"]
    finally:
        for lib in (first, second, *later):
            lib.close()


def test_truncated_pickle_bytes_raise_value_format_error(types_lib):
    data = types_lib.rect(3.0, 4.0).store()
    for cut in (0, 1, len(data) // 2, len(data) - 1):
        with pytest.raises(pf.ValueFormatError):
            types_lib.types["shape"].restore(data[:cut])


# ---------------------------------------------------------------- layering


def _imports(module: str) -> set[str]:
    """pybridge.futhark modules ``module`` imports, at any level (functions and TYPE_CHECKING too)."""
    tree = ast.parse((PKG / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
    return found


@pytest.mark.parametrize("module", LAYERS)
def test_layers_import_only_downward(module):
    above = set(LAYERS[LAYERS.index(module) + 1:])
    assert not (_imports(module) & above), f"{module} imports {sorted(_imports(module) & above)}, a layer above it"


def test_the_old_values_module_is_gone():
    assert not (PKG / "values.py").exists()
    assert {"ArrayHandle", "OpaqueHandle", "ArrayKind", "OpaqueKind", "to_numpy"} <= set(pf.__all__)
    assert pf.ArrayKind.__module__ == "pybridge.futhark.kinds"
    assert pf.OpaqueHandle.__module__ == "pybridge.futhark.handles"
    from pybridge import convert

    assert pf.to_numpy is convert.to_numpy  # one converter for the package, over each handle's .numpy()
