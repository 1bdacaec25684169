"""The Futhark call path (issue 13): API mode by default with a one-line reason when it falls back,
and the compiled call plan keeps every check of the general path, in both modes."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import pybridge.futhark as pf
from pybridge.futhark import InvalidHandleError, ProgramError
from pybridge.futhark.build import futhark_compiler
from pybridge.paths import find_build_file

pytestmark = pytest.mark.futhark


@pytest.fixture(scope="module")
def probe_so() -> Path:
    p = find_build_file("reference/c/libprobe.so")
    if p is None:
        pytest.skip("reference/c/libprobe.so not built: run `make futhark` (needs the Futhark compiler)")
    return p


@pytest.fixture(scope="module", params=["api", "abi"])
def lib(request, probe_so: Path):
    with pf.load(probe_so, mode=request.param) as lib:
        assert lib.mode == request.param
        yield lib


def test_api_mode_is_the_default(probe_so: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning where the header and a compiler exist
        with pf.load(probe_so) as lib:
            assert lib.mode == "api" and lib.mode_note == ""
            assert lib.trivial(41) == 42


def test_falls_back_to_abi_with_the_reason(probe_so: Path, tmp_path: Path) -> None:
    for name in ("libprobe.so", "probe.json"):  # no probe.h: API mode cannot be built
        shutil.copy(probe_so.with_name(name), tmp_path / name)
    with pytest.warns(RuntimeWarning, match=r"ABI mode .*probe\.h") as record:
        lib = pf.load(tmp_path / "libprobe.so")
    # Only this load's warnings: another test's threads in this process (a Dask worker loading its
    # library in ABI mode) may warn meanwhile, and pytest.warns records every thread's.
    mine = [r for r in record if str(tmp_path) in str(r.message)]
    with lib:
        assert len(mine) == 1 and "\n" not in str(mine[0].message)
        assert lib.mode == "abi" and "probe.h" in lib.mode_note
        assert lib.trivial(1) == 2


def test_results_and_types(lib) -> None:
    r = lib.trivial(1)
    assert r == 2 and type(r) is np.int32
    assert lib.trivial(np.int64(5)) == 6  # NumPy integers take the converter, same rule
    assert lib.trivial(x=7) == 8  # keywords take the general path
    x, y, z = lib.pair(1.5, True, np.float16(0.25))
    assert (type(x), type(y), type(z)) == (np.float32, np.bool_, np.float16)
    assert (x, y, z) == (np.float32(3.0), np.False_, np.float16(0.5))
    xs = lib.types["[]f32"].new(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(lib.saxpy(2, xs, xs).numpy(), 3 * np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(lib.saxpy(2.0, np.ones(2, np.float32), [1.0, 2.0]).numpy(), [3.0, 4.0])


@pytest.mark.parametrize(
    "value, error, match",
    [
        (2**31, OverflowError, r"trivial: parameter 'x': 2147483648 does not fit in i32"),
        (-(2**31) - 1, OverflowError, r"parameter 'x'.*does not fit in i32"),
        (True, TypeError, r"parameter 'x': expected an integer for i32, got bool"),
        (1.0, TypeError, r"parameter 'x': expected an integer for i32, got float"),
        ("1", TypeError, r"parameter 'x'"),
    ],
)
def test_scalar_checks_stay(lib, value, error, match) -> None:
    with pytest.raises(error, match=match):
        lib.trivial(value)


def test_handle_checks_stay(lib, probe_so: Path) -> None:
    f32 = lib.types["[]f32"]
    xs = f32.new(np.arange(4, dtype=np.float32))
    with pf.load(probe_so, mode="abi") as other:
        foreign = other.types["[]f32"].new(np.arange(4, dtype=np.float32))
        with pytest.raises(TypeError, match="another Futhark library"):
            lib.saxpy(1.0, foreign, xs)
    with pytest.raises(TypeError, match=r"parameter 'xs'"):
        lib.saxpy(1.0, np.arange(4, dtype=np.float64), xs)  # wrong dtype: named, not reinterpreted
    gone = f32.new(np.arange(4, dtype=np.float32))
    gone.free()
    # A freed or consumed handle names the entry point and the parameter (found by a newcomer:
    # "Futhark value of type []f32 was freed" alone), on the plan's path and the general one.
    with pytest.raises(InvalidHandleError, match=r"^saxpy: parameter 'ys': .*was freed"):
        lib.saxpy(1.0, xs, gone)
    with pytest.raises(InvalidHandleError, match=r"^saxpy: parameter 'ys': .*was freed"):
        lib.saxpy(1.0, xs, ys=gone)
    with pytest.raises(InvalidHandleError, match=r"^bump: parameter 'xs': .*was freed"):
        lib.bump(gone)
    bumped = lib.bump(xs)
    assert not xs.valid
    with pytest.raises(InvalidHandleError, match=r"^bump: parameter 'xs': .*consumed by entry point 'bump'"):
        lib.bump(xs)
    with pytest.raises(InvalidHandleError, match=r"^sum: parameter 'xs': .*consumed by entry point 'bump'"):
        lib.sum(xs=xs)
    np.testing.assert_array_equal(bumped.numpy(), [1, 1, 2, 3])


def test_program_error_then_usable(lib) -> None:
    xs = lib.types["[]f32"].new(np.arange(4, dtype=np.float32))
    with pytest.raises(ProgramError, match=r"Index \[9\] out of bounds"):
        lib.index_at(xs, 9)
    assert lib.index_at(xs, 3) == np.float32(3)


def test_closed_context(probe_so: Path) -> None:
    lib = pf.load(probe_so)
    xs = lib.types["[]f32"].new(np.arange(4, dtype=np.float32))
    lib.close()
    for call in (lambda: lib.trivial(1), lambda: lib.saxpy(1.0, xs, xs), lambda: lib.bump(xs), xs.numpy):
        with pytest.raises(InvalidHandleError):
            call()


def test_an_unknown_keyword_is_named_before_a_missing_argument(lib) -> None:
    """``sum(ys=...)`` for ``sum(xs)`` said "missing a required argument: 'xs'", hiding the typo."""
    xs = lib.types["[]f32"].new(np.arange(4, dtype=np.float32))
    with pytest.raises(TypeError, match=r"^sum\(xs: .*\).*: got an unexpected keyword argument 'ys'"):
        lib.sum(ys=xs)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zs'"):
        lib.saxpy(1.0, xs, zs=xs)
    with pytest.raises(TypeError, match=r"missing a required argument: 'ys'"):
        lib.saxpy(1.0, xs)
    assert lib.sum(xs=xs) == 6.0


PAIRS = """\
type pt = {x: f64, y: f64}
entry add_pair (p: (f64, i32)) : f64 = p.0 + f64.i32 p.1
entry norm1 (q: pt) : f64 = f64.abs q.x + f64.abs q.y
"""


@pytest.mark.skipif(futhark_compiler() is None,
                    reason="the Futhark compiler is not installed (scripts/install-futhark.sh, or FUTHARK=...)")
def test_tuple_and_record_arguments_name_the_parameter(tmp_path: Path) -> None:
    """Found by a newcomer: ``add_pair((1.0,))`` said "(f64, i32): expected 2 fields" with no entry
    point or parameter; a field out of range and a freed handle as a field likewise."""
    src = tmp_path / "pairs.fut"
    src.write_text(PAIRS)
    with pf.load(src, backend="c") as lib:
        assert lib.add_pair((1.5, 2)) == 3.5 and lib.norm1({"x": -1.0, "y": 2.0}) == 3.0
        with pytest.raises(TypeError, match=r"^add_pair: parameter 'p': .*expected 2 fields"):
            lib.add_pair((1.0,))
        with pytest.raises(OverflowError, match=r"^add_pair: parameter 'p': .*does not fit in i32"):
            lib.add_pair((1.0, 2**40))
        with pytest.raises(TypeError, match=r"^add_pair: parameter 'p': expected \(f64, i32\)"):
            lib.add_pair([1.0, 2])
        with pytest.raises(TypeError, match=r"^norm1: parameter 'q': "):
            lib.norm1({"x": 1.0})
        with pytest.raises(TypeError, match=r"^norm1: parameter 'q': "):
            lib.norm1({"x": 1.0, "y": "two"})
        q = lib.types["pt"].new(x=3.0, y=4.0)
        assert lib.norm1(q) == 7.0
        q.free()
        with pytest.raises(InvalidHandleError, match=r"^norm1: parameter 'q': .*was freed"):
            lib.norm1(q)
