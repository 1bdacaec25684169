"""Scalar arguments and results on the compiled call path: NumPy scalars read and made in place.

The compiled plan reads a NumPy scalar argument's value where NumPy keeps it and makes scalar
results by writing the value into a new NumPy scalar (_callpath.c, numpy_scalars), instead of
calling __index__/__float__ and indexing a buffer. Here both plans call the same entry point
(``prims`` of tests/reference/types.fut: one parameter and one result of every primitive type) with
the same adversarial values (each NumPy type at its limits, NaN, infinities, Python ints and floats
just out of range, bools for numbers and numbers for bools, other NumPy types): the outcomes must
be identical, results bit for bit and of the same type, errors of the same type and message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from pybridge.futhark import callpath, callplan
from pybridge.futhark.types import PRIMITIVES
from pybridge.paths import find_build_file
from test_call_path_differential import load_both

pytestmark = [
    pytest.mark.futhark,
    pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}"),
]

TYPES = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64", "bool")  # prims' parameters
DTYPES = [PRIMITIVES[t].dtype for t in TYPES]


@pytest.fixture(scope="module")
def both() -> Any:
    so = find_build_file("reference/c/libtypes.so")
    if so is None:
        pytest.skip("reference/c/libtypes.so not built: run `make futhark` (needs the Futhark compiler)")
    fast, slow = load_both(so, "c")  # every entry point's plan is of the path it claims
    yield fast, slow
    fast.close()
    slow.close()


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """("ok", (type, bytes) per result) or ("raised", type, message)."""
    try:
        res = fn()
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", type(e), str(e))
    return ("ok", tuple((type(r), np.asarray(r).tobytes()) for r in res))


def limits(dt: np.dtype) -> list[Any]:
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return [dt.type(info.min), dt.type(info.max), dt.type(0), dt.type(1)]
    if dt.kind == "f":
        info = np.finfo(dt)
        return [dt.type(v) for v in (info.max, -info.max, info.tiny, info.smallest_subnormal, np.inf, -np.inf, np.nan, -0.0)]
    return [np.True_, np.False_]


numpy_scalar = st.sampled_from(DTYPES).flatmap(
    lambda dt: st.one_of(hnp.from_dtype(dt).map(dt.type), st.sampled_from(limits(dt))))
F32_MAX = float(np.finfo(np.float32).max)
value = st.one_of(
    numpy_scalar,
    st.integers(-(2**65), 2**65),
    st.sampled_from([2**7 - 1, 2**7, -(2**7) - 1, 2**8, 2**15, 2**16, 2**31, -(2**31) - 1, 2**32, 2**63 - 1, 2**63,
                     2**64 - 1, 2**64, -(2**63), -(2**63) - 1, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([F32_MAX, -F32_MAX, np.nextafter(F32_MAX, np.inf), 3.5e38, 1e-46, float("nan"), -0.0]),
    st.booleans(),
)


def typed_value(t: str) -> st.SearchStrategy[Any]:
    """Mostly values of the parameter's own kind (so that most calls succeed), else anything."""
    dt = PRIMITIVES[t].dtype
    own = st.one_of(hnp.from_dtype(dt).map(dt.type), st.sampled_from(limits(dt)))
    if dt.kind in "iu":
        info = np.iinfo(dt)
        own = st.one_of(own, st.integers(int(info.min), int(info.max)), st.sampled_from(_INT_DTYPES).flatmap(
            lambda d: st.integers(max(int(np.iinfo(d).min), int(info.min)), min(int(np.iinfo(d).max), int(info.max))).map(d.type)))
    elif dt.kind == "f":
        own = st.one_of(own, st.floats(allow_nan=True, allow_infinity=True, width=32 if t != "f64" else 64))
    else:
        own = st.one_of(own, st.booleans())
    return st.one_of(own, own, own, value)


_INT_DTYPES = [np.dtype(c) for c in "bBhHiIlLqQ"]  # every NumPy integer type (np.longlong is not np.int64)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.tuples(*(typed_value(t) for t in TYPES)))
def test_both_plans_agree_on_every_scalar(both: Any, args: tuple[Any, ...]) -> None:
    fast, slow = both
    a, b = outcome(lambda: fast.prims(*args)), outcome(lambda: slow.prims(*args))
    assert a == b, f"prims{args!r}: compiled {a} != Python {b}"


@pytest.mark.parametrize("t", TYPES)
def test_each_type_at_its_limits_and_as_other_types(both: Any, t: str) -> None:
    """One parameter at a time: its own limits, then every other NumPy type's limits in its place."""
    fast, slow = both
    base = [PRIMITIVES[u].dtype.type(0) if u != "bool" else np.False_ for u in TYPES]
    i = TYPES.index(t)
    tried = ok = 0
    for candidate in [v for dt in DTYPES + _INT_DTYPES for v in limits(dt)] + [True, False, 2**64, -(2**63) - 1, F32_MAX * 2]:
        args = list(base)
        args[i] = candidate
        a, b = outcome(lambda: fast.prims(*args)), outcome(lambda: slow.prims(*args))
        assert a == b, f"{t} <- {candidate!r} ({type(candidate).__name__}): compiled {a} != Python {b}"
        tried += 1
        ok += a[0] == "ok"
    assert ok and ok < tried  # some accepted, some refused: both kinds of outcome were compared


def test_results_are_the_numpy_scalars_indexing_gives(both: Any) -> None:
    fast, slow = both
    args = [np.int8(-128), np.int16(5), 7, np.int64(2**62), np.uint8(255), 9, np.uint32(4), np.uint64(2**64 - 2),
            np.float16(1.5), np.float32(-2.25), 3.5, np.True_]
    res_fast, res_slow = fast.prims(*args), slow.prims(*args)
    for r, s, t in zip(res_fast, res_slow, TYPES):
        assert type(r) is type(s) is PRIMITIVES[t].dtype.type, t
        assert np.asarray(r).tobytes() == np.asarray(s).tobytes(), t
    assert res_fast[-1] is np.False_ and res_slow[-1] is np.False_  # NumPy's singletons, as indexing gives
    assert fast.prims(*args[:-1], False)[-1] is np.True_


def test_every_numpy_scalar_type_is_read_and_made_in_place() -> None:
    """On this NumPy the layout check accepts every type: the tests above exercise the fast path."""
    read, made = callplan.numpy_scalar_layouts()
    codes = callplan.CODES
    assert set(made) == {codes[t] for t in TYPES}
    assert set(read) >= {codes[t] for t in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "bool")}
    assert len(read) == len(_INT_DTYPES) + 2


def test_a_layout_that_does_not_match_is_refused(both: Any) -> None:
    """A sample whose value is not where the layout says keeps the calls into NumPy for that type,
    and the calls give the same results."""
    fast, slow = both
    compiled = callpath.compiled
    wrong = [(callplan.CODES["f32"], np.float32, np.float32(1.5), np.float32(2.5).tobytes(), True),
             (callplan.CODES["i32"], np.int32, np.int32(7), np.int32(8).tobytes(), False),
             (callplan.CODES["i64"], np.int64, np.float64(1.0), np.int64(1).tobytes(), True)]  # sample of another type
    try:
        assert compiled.numpy_scalars(tuple(wrong), None, None) == ((), ())
        args = [1, 2, np.int32(3), 4, 5, 6, 7, 8, 1.0, np.float32(0.5), 2.0, np.True_]
        assert outcome(lambda: fast.prims(*args)) == outcome(lambda: slow.prims(*args))
        assert fast.prims(*args)[-1] is np.False_
    finally:
        callplan.numpy_scalar_layouts()


@pytest.fixture(scope="module")
def sized(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An entry point with a size parameter (i64, checked >= 0 by its converter), both plans."""
    from pybridge.futhark.build import build_program, futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("no Futhark compiler")
    src = tmp_path_factory.mktemp("sized") / "sized.fut"
    src.write_text("entry count (n: i64) (xs: [n]f32) : i64 = n + i64.f32 (f32.sum xs)\n")
    fast, slow = load_both(build_program(src, backend="c"), "c")
    assert fast.entry_points["count"]._sizes.size_params == {"n"}
    xs_fast, xs_slow = (lib.types["[]f32"].new(np.ones(3, np.float32)) for lib in (fast, slow))
    yield (fast, xs_fast), (slow, xs_slow)
    fast.close()
    slow.close()


size_value = st.one_of(
    st.sampled_from(_INT_DTYPES).flatmap(lambda d: st.sampled_from(limits(d) + [d.type(3)])),
    st.integers(-(2**65), 2**65), st.sampled_from([3, 0, -1, 2**63 - 1, 2**63, -(2**63), True, 3.0, np.float32(3), None]),
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(size_value)
def test_a_size_parameter_is_checked_alike(sized: Any, n: Any) -> None:
    """A size passes as it is when it is an integer >= 0 within i64, else its converter raises: the
    same results and errors on both plans (a negative size would make Futhark's C exit)."""
    (fast, xs_fast), (slow, xs_slow) = sized
    a, b = outcome(lambda: (fast.count(n, xs_fast),)), outcome(lambda: (slow.count(n, xs_slow),))
    assert a == b, f"count({n!r}): compiled {a} != Python {b}"
