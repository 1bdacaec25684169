"""pf.load, pybridge build and demo, and packaged modules agree (issue 33): one rule picks the default
backend; an unknown backend is refused with the valid list; a name that is not built is answered
with what is built; docstrings come from doc comments; size names stay in signatures."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import pybridge.futhark as pf
from pybridge import backends
from pybridge.futhark.build import futhark_compiler
from pybridge.paths import find_build_file

ROOT = Path(__file__).resolve().parents[1]


def _gpu(monkeypatch: pytest.MonkeyPatch, present: bool) -> None:
    monkeypatch.setattr(backends, "gpu_present", lambda: (present, "" if present else "no GPU in this test"))


def test_one_rule_orders_the_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    _gpu(monkeypatch, False)
    assert backends.preferred(["c", "cuda", "multicore", "ispc"]) == ["multicore", "c", "ispc", "cuda"]
    assert backends.choose_backend(["c", "multicore", "cuda"]) == "multicore"
    assert backends.choose_backend(["cuda"]) == "cuda"  # the only one: its load says why it cannot run
    assert backends.choose_backend(["c", "multicore"], "c") == "c"
    _gpu(monkeypatch, True)
    assert backends.preferred(["c", "cuda", "multicore"]) == ["cuda", "multicore", "c"]
    assert backends.choose_backend(["c"]) == "c"
    with pytest.raises(ValueError, match=r"expected one of c, multicore, cuda, opencl, hip, ispc, got 'cdua' \(did you mean 'cuda'\?\)"):
        backends.choose_backend(["c"], "cdua")
    with pytest.raises(ValueError, match="prog has no 'cuda' library; it has c, multicore"):
        backends.choose_backend(["c", "multicore"], "cuda", name="prog")


def test_pf_load_demo_and_build_pick_by_the_same_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    from pybridge.demo import examples
    from pybridge.demo.run import _futhark_library
    from pybridge.futhark import build

    if find_build_file("futhark/c/libsaxpy.so") is None:
        pytest.skip("build/futhark not built: run `make`")
    built = [b for b in backends.BACKENDS if find_build_file(f"futhark/{b}/libsaxpy.so") is not None]
    expected = "multicore" if "multicore" in built else "c"
    for gpu in (False, True):  # a GPU but no cuda library built: still the best one built
        _gpu(monkeypatch, gpu)
        if gpu and "cuda" in built:
            continue
        with pf.load("saxpy") as lib:
            assert lib.backend == expected
        chosen = _futhark_library(examples.get("saxpy"))
        assert chosen is not None and chosen[0] == expected
    with pf.load("saxpy", backend="c") as lib:  # an explicit backend as before
        assert lib.backend == "c"
    # A source: the best this machine can build and run.
    monkeypatch.setattr(build, "cuda_toolkit", lambda: (False, "nvcc not found"))
    assert build.default_backend() == "multicore"
    monkeypatch.setattr(build, "cuda_toolkit", lambda: (True, ""))
    assert build.default_backend() == "cuda"
    _gpu(monkeypatch, False)
    assert build.default_backend() == "multicore"


def test_an_unknown_backend_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    src = tmp_path / "p.fut"
    src.write_text("entry f (x: i32) : i32 = x\n")
    for target in ("saxpy", src, tmp_path / "libp.so"):
        with pytest.raises(ValueError, match=r"^backend: expected one of c, multicore, cuda, opencl, hip, ispc, got 'cdua' \(did you mean 'cuda'\?\)$"):
            pf.load(target, backend="cdua")
    assert not (tmp_path / "libp.so").exists()


def test_a_name_not_built_is_answered_with_what_is_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pybridge import paths
    from pybridge.futhark import library

    if find_build_file("futhark/c/libsaxpy.so") is None:
        pytest.skip("build/futhark not built: run `make`")
    with pytest.raises(FileNotFoundError) as e:
        pf.load("saxpyy")
    text = str(e.value)
    assert "no built Futhark library named 'saxpyy' (looked in " in text and "did you mean 'saxpy'?" in text
    assert "Built programs (" in text and "saxpy, scan" in text
    assert "pf.load('saxpyy.fut') compiles it (`pybridge build saxpyy.fut`)" in text
    assert "make" not in text  # programs are built here: nothing to run
    with pytest.raises(FileNotFoundError, match="'saxpy' is not built for the opencl backend; it is built for c"):
        pf.load("saxpy", backend="opencl")
    # Nothing built: a checkout is told to run make, an installation is not.
    monkeypatch.setattr(paths, "build_dirs", lambda: [])
    monkeypatch.setattr(library, "build_dirs", lambda: [])
    monkeypatch.setattr(library, "source_checkout", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match=f"Nothing is built in this checkout: run `make` in {tmp_path}"):
        pf.load("saxpy")
    monkeypatch.setattr(library, "source_checkout", lambda: None)
    with pytest.raises(FileNotFoundError) as e:
        pf.load("saxpy")
    assert "This installation holds no built programs" in str(e.value) and "run `make`" not in str(e.value)


@pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found (set FUTHARK=...)")
def test_doc_comments_and_size_names_reach_pf_load(tmp_path: Path) -> None:
    from pybridge.futhark.stubs import library_stub

    src = tmp_path / "docs.fut"
    src.write_text(
        "type point = {x: f32, y: f32}\n\n"
        "-- | The x of each point.\n-- Second line.\n"
        "entry xs [n] (ps: [n]point) : [n]f32 = map (.x) ps\n\n"
        "entry pair [n] (v: [n]f32) : ([n]f32, f32) = (v, f32.sum v)\n"
    )
    with pf.load(src, backend="c") as lib:
        assert inspect.getdoc(lib.xs).startswith("The x of each point.\nSecond line.\n\nFuthark entry point xs(")
        assert inspect.getdoc(lib.pair).startswith("Futhark entry point pair(")  # no doc comment
        assert str(inspect.signature(lib.xs)) == "(ps: '[n]point') -> '[n]f32'"
        assert str(inspect.signature(lib.pair)) == "(v: '[n]f32') -> '([n]f32, f32)'"
        names = dir(lib)
        assert names.count("xs") == 1 and names.count("pair") == 1
        stub = library_stub(lib.manifest, src.read_text())
    assert "Futhark: entry xs [n] (ps: [n]point) : [n]f32" in stub and "The x of each point." in stub
    assert "Futhark: entry pair [n] (v: [n]f32) : ([n]f32, f32)" in stub
