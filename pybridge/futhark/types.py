"""Futhark primitive types: their NumPy dtype, their C type in the generated API, their range.

The C API maps each primitive directly to a C type, except ``f16`` which travels as the ``uint16_t``
holding its IEEE binary16 bits (docs/c-api.rst, "Values"). The table itself is ``pybridge.primitives``;
this module gives it Futhark's view (by Futhark name) and the scalar conversions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..primitives import TABLE as PRIMITIVE_TABLE


@dataclass(frozen=True)
class Primitive:
    name: str  # Futhark spelling: i32, f16, bool ...
    dtype: np.dtype  # NumPy dtype of one element
    ctype: str  # C type used by the API for one element

    @property
    def scalar_type(self) -> type:
        return self.dtype.type

    @property
    def is_integer(self) -> bool:
        return self.dtype.kind in "iu"

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f"

    @property
    def is_bool(self) -> bool:
        return self.dtype.kind == "b"

    @property
    def bits_ctype(self) -> str:
        """C type of the storage; f16 is stored as its bits."""
        return self.ctype


# Derived from the package's one primitive table (pybridge.primitives).
_TABLE = [Primitive(p.futhark, p.dtype, p.ctype) for p in PRIMITIVE_TABLE]

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _TABLE}
BY_DTYPE: dict[np.dtype, Primitive] = {p.dtype: p for p in _TABLE}


def is_primitive(type_name: str) -> bool:
    return type_name in PRIMITIVES


def primitive(type_name: str) -> Primitive:
    try:
        return PRIMITIVES[type_name]
    except KeyError:
        raise KeyError(f"{type_name!r} is not a Futhark primitive type") from None


def array_type_name(elem: str, rank: int) -> str:
    """Manifest name of an array type, e.g. ('f32', 2) -> '[][]f32'."""
    return "[]" * rank + elem


def split_array_type(type_name: str) -> tuple[int, str]:
    """'[][]f32' -> (2, 'f32'); a non-array name gives rank 0."""
    rank = 0
    while type_name.startswith("[]", 2 * rank):
        rank += 1
    return rank, type_name[2 * rank :]


# Exact scalar types the converters take without a detour through ``scalar_to_numpy``: every NumPy
# integer scalar type (one per C integer type: byte .. ulonglong), and the floats that convert to a
# Python float exactly. Anything else (subclasses, ndarrays of rank 0, NaN, out-of-range values)
# still goes through ``scalar_to_numpy``, which applies the rule and raises the precise error.
_NP_INTS = frozenset(np.dtype(c).type for c in "bBhHiIlLqQ")
_FLOATS = frozenset({float, np.float64, np.float32, np.float16})
_EXACT_INT_AS_FLOAT = 2**53  # |int| up to this converts to a float exactly (then rounds once, as NumPy does)


def scalar_converter(prim: Primitive, what: str):
    """A fast converter from a Python/NumPy scalar to the value cffi passes for ``prim``.

    Same rule as ``scalar_to_numpy`` (same result, same errors); precomputed per parameter because
    it sits on every call. NumPy scalars (what loaders return) take the fast path too."""
    if prim.is_integer:
        info = np.iinfo(prim.dtype)
        lo, hi = int(info.min), int(info.max)
        np_ints = _NP_INTS

        def conv_int(v: object) -> int:
            t = type(v)
            if t is int or t in np_ints:  # bool is neither (type(True) is bool)
                iv = int(v)  # type: ignore[call-overload]
                if lo <= iv <= hi:
                    return iv
            return int(scalar_to_numpy(prim, v, what))  # raises the precise error

        return conv_int
    if prim.name == "f16":
        return lambda v: int(scalar_to_numpy(prim, v, what).view(np.uint16))
    if prim.is_float:
        finite_max = float(np.finfo(prim.dtype).max)
        floats, big = _FLOATS, _EXACT_INT_AS_FLOAT

        def conv_float(v: object) -> float:
            t = type(v)
            if t in floats:
                x = float(v)  # type: ignore[arg-type]
                if -finite_max <= x <= finite_max:  # NaN/inf/too large: checked below
                    return x
            elif t is int and -big <= v <= big:  # type: ignore[operator]
                return float(v)  # type: ignore[arg-type]
            return float(scalar_to_numpy(prim, v, what))

        return conv_float

    def conv_bool(v: object) -> bool:
        t = type(v)
        if t is bool or t is np.bool_:
            return bool(v)
        return bool(scalar_to_numpy(prim, v, what))

    return conv_bool


def _finite(value: object) -> bool:
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except OverflowError:  # an int too large for a float is still a finite number
        return True


def scalar_to_numpy(prim: Primitive, value: object, what: str) -> np.generic:
    """Convert a Python or NumPy scalar to ``prim``'s dtype, with a range check for integers.

    Rule: bool parameters take bool/np.bool_ only; integer parameters take integers (not bool, not
    floats) that fit; float parameters take any real number (ints and floats), converted by NumPy.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if prim.is_bool:
        if isinstance(value, (bool, np.bool_)):
            return np.bool_(value)
        raise TypeError(f"{what}: expected bool, got {type(value).__name__}")
    if prim.is_integer:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{what}: expected an integer for {prim.name}, got {type(value).__name__}")
        info = np.iinfo(prim.dtype)
        if not info.min <= int(value) <= info.max:
            raise OverflowError(f"{what}: {value} does not fit in {prim.name} [{info.min}, {info.max}]")
        return prim.dtype.type(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what}: expected a real number for {prim.name}, got {type(value).__name__}")
    with np.errstate(over="ignore"):
        try:
            out = prim.dtype.type(value)
        except OverflowError:  # a Python int beyond float64
            out = prim.dtype.type(np.inf)
    if np.isinf(out) and _finite(value):
        raise OverflowError(f"{what}: {str(value)[:40]} is beyond the range of {prim.name} (max {np.finfo(prim.dtype).max}); inf and nan may be passed explicitly")
    return out
