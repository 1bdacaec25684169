"""The per-parameter scalar converters (types.scalar_converter) take NumPy scalars on a fast path
(issue 23): they must give exactly what the documented rule (types.scalar_to_numpy) gives, and the
same errors, for every kind of input -- Python and NumPy numbers of every type, NaN, infinities,
values at and beyond each type's range, bools where numbers are expected."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybridge.futhark.types import PRIMITIVES, scalar_converter, scalar_to_numpy

PRIMS = [p for p in PRIMITIVES.values() if p.name != "f16"]
NP_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.intc, np.uintc,
            np.longlong, np.ulonglong, np.float16, np.float32, np.float64, np.bool_]


def _reference(prim, v):
    """(kind, value) by the rule: what the old converter passed to cffi, or the error type."""
    try:
        r = scalar_to_numpy(prim, v, "x")
    except (TypeError, OverflowError, ValueError) as e:
        return ("error", type(e))
    return ("ok", r)


def _same(prim, v):
    conv = scalar_converter(prim, "x")
    kind, ref = _reference(prim, v)
    if kind == "error":
        with pytest.raises(ref):
            conv(v)
        return
    got = conv(v)
    # what C receives: cffi converts the Python value to the parameter's C type
    as_c = prim.dtype.type(got) if prim.is_float else got
    if prim.is_float and math.isnan(float(ref)):
        assert math.isnan(float(as_c))
    else:
        assert as_c == ref and type(got) in (int, float, bool)
        if prim.is_float:
            assert np.signbit(as_c) == np.signbit(ref)


numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, 2**63, 2**64, 2**53, 2**53 + 1,
                     -(2**53) - 1, 3.4028235e38, 3.4028236e38, 3.40282357e38, 1e39, -0.0, float("inf"),
                     float("nan"), 1.7976931348623157e308]),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(v=numbers, t=st.sampled_from([None, *NP_TYPES]))
def test_converters_agree_with_the_rule(v, t):
    if t is not None:
        with np.errstate(all="ignore"):
            try:
                v = t(v)
            except (OverflowError, ValueError):
                return  # NumPy refuses the value itself (e.g. np.int8(300) in NumPy 2)
    for prim in PRIMS:
        _same(prim, v)


@pytest.mark.parametrize("v", [np.float64(1e39), np.float64(-1e39), 10**39, np.float64(np.inf), np.float32(np.nan),
                               np.float64(3.4028235e38), np.int64(2**40), True, np.bool_(False), "1.0", None,
                               np.array(2.5), np.array(3, dtype=np.int64)])
def test_edge_values_agree(v):
    for prim in PRIMS:
        _same(prim, v)
