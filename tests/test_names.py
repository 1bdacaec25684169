"""Any name Futhark accepts loads and is callable (issue 11, item 3), on the real compiler's output.

tests/names/names.fut has parameters named `_` (twice), Python keywords, primes, numeric and keyword
record fields, and entry points / fields named like pybridge's own attributes.
"""

from __future__ import annotations

import inspect
import keyword
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pybridge.futhark as pf
from pybridge.futhark.build import futhark_compiler
from pybridge.futhark.names import name_lookup, python_names

PROGRAM = Path(__file__).parent / "names" / "names.fut"

# Futhark's identifier grammar: a letter or _, then letters, digits, _ and primes.
futhark_ident = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_']{0,6}\Z")
field_name = futhark_ident | st.integers(0, 20).map(str)


@st.composite
def name_lists(draw):
    """Distinct names as Futhark requires them, except the wildcard `_`, which may repeat."""
    names = draw(st.lists(field_name | st.sampled_from(["as", "None", "arr'", "arr_1", "as_", "x''", "x_2", "_0"]),
                          unique=True, max_size=12).filter(lambda ns: "_" not in ns))
    for _ in range(draw(st.integers(0, 3))):
        names.insert(draw(st.integers(0, len(names))), "_")
    return names


@given(name_lists())
def test_python_names_are_valid_distinct_and_keep_valid_names(names):
    py = python_names(names)
    assert len(py) == len(names) == len(set(py))
    assert all(p.isidentifier() and not keyword.iskeyword(p) for p in py)
    for n, p in zip(names, py):
        if n != "_" and n.isidentifier() and not keyword.iskeyword(n):
            assert p == n
    # Every Python spelling, and every unambiguous exact name, leads back to its own position.
    lookup = name_lookup(names)
    for i, p in enumerate(py):
        if names.count(names[i]) == 1:
            assert lookup[p] == i and lookup[names[i]] == i


def test_python_names_rule_examples():
    assert python_names(["_", "_", "x"]) == ("_0", "_1", "x")
    assert python_names(["as", "lambda", "None", "True"]) == ("as_", "lambda_", "None_", "True_")
    assert python_names(["arr'", "x''", "a'b"]) == ("arr_1", "x_2", "a_1b")
    assert python_names(["arr'", "arr_1"]) == ("arr_1_", "arr_1")  # a real name wins its spelling
    assert python_names(["as", "as_"]) == ("as__", "as_")
    assert python_names(["0", "1", "3"]) == ("_0", "_1", "_3")


@pytest.fixture(scope="module")
def lib():
    if futhark_compiler() is None:
        pytest.skip("the Futhark compiler is not installed (scripts/install-futhark.sh)")
    with pf.load(PROGRAM, backend="c") as lib:
        yield lib


def test_the_library_loads_with_valid_signatures(lib):
    sig = lambda name: list(inspect.signature(lib.entry(name)).parameters)  # noqa: E731
    assert sig("wildcards") == ["_0", "_1", "x"]
    assert sig("keywords") == ["as_", "lambda_", "class_", "None_", "True_", "is_"]
    assert sig("primes") == ["arr_1_", "x_2", "arr_1"]
    assert "as_ is Futhark's 'as'" in lib.keywords.__doc__


def test_positional_and_keyword_calls(lib):
    assert lib.wildcards(1, 2, 3) == 3
    assert lib.wildcards(_0=1, _1=2, x=9) == 9
    assert lib.keywords(1, 2, 3, 4, 5, 6) == 123456
    assert lib.keywords(as_=1, lambda_=2, class_=3, None_=4, True_=5, is_=6) == 123456
    # the exact Futhark name works as a keyword too, where it is unambiguous
    assert lib.keywords(**{"as": 1, "lambda": 2, "class": 3, "None": 4, "True": 5, "is": 6}) == 123456
    xs = np.arange(4, dtype=np.int32)
    np.testing.assert_array_equal(lib.primes(xs, 2, 1).numpy(), xs * 2 + 1)
    np.testing.assert_array_equal(lib.primes(arr_1_=xs, x_2=3, arr_1=0).numpy(), xs * 3)
    np.testing.assert_array_equal(lib.primes(**{"arr'": xs, "x''": 1, "arr_1": 5}).numpy(), xs + 5)


def test_bad_keywords_name_the_entry_point(lib):
    with pytest.raises(TypeError, match="given twice"):
        lib.keywords(1, 2, 3, 4, 5, **{"is": 6, "is_": 6})
    with pytest.raises(TypeError, match="wildcards"):
        lib.wildcards(**{"_": 1, "x": 2})  # `_` is ambiguous: only _0/_1 name those parameters
    with pytest.raises(TypeError, match="keywords"):
        lib.keywords(1, 2, 3, 4, 5, 6, as_=1)


def test_record_fields_by_both_spellings(lib):
    r = lib.make_rec(7, 2.5)
    assert (r.as_, r.lambda_, r.x_1, r.class_, bool(r.None_)) == (7, 2.5, 8, 9, True)
    assert (r["as"], r.field("x'"), r["x_1"], r.field("None")) == (7, 8, 8, True)
    assert {"as_", "lambda_", "x_1", "class_", "None_"} <= set(dir(r))
    with pytest.raises(KeyError, match="no field .{1,3}y"):
        r["y"]
    with pytest.raises(AttributeError, match="no attribute or field 'y'"):
        r.y
    # dict input takes either spelling per field
    assert lib.rec_sum({"as": 1, "lambda": 0.5, "x'": 2, "class": 3, "None": True}) == 1006.5
    assert lib.rec_sum({"as_": 1, "lambda_": 0.5, "x_1": 2, "class_": 3, "None_": False}) == 6.5
    assert lib.types["rec"].new(as_=1, lambda_=0.5, x_1=2, class_=3, None_=False).x_1 == 2
    with pytest.raises(TypeError, match="given twice"):
        lib.rec_sum({"as": 1, "as_": 1, "lambda": 0.5, "x'": 2, "class": 3, "None": True})


def test_numeric_fields(lib):
    s = lib.make_sparse(5)
    assert (s._0, s._1, bool(s._3)) == (5, 5.0, True)
    assert (s["0"], s.field("1"), bool(s["3"])) == (5, 5.0, True)
    assert lib.sparse_sum({"0": 1, "1": 2.0, "3": True}) == 4
    assert lib.sparse_sum({"_0": 1, "_1": 2.0, "_3": False}) == 3


def test_fields_named_like_handle_attributes(lib):
    h = lib.make_clash(10)
    assert [h["free"], h["store"], h["shape"], h["valid"], h["field"]] == [10, 11, 12, 13, 14]
    assert h.field("free") == 10 and h.field("field") == 14
    assert callable(h.free) and h.valid is True  # the handle's own attributes stay what they are
    assert isinstance(h.store(), bytes)
    h.free()
    assert not h.valid


def test_record_arrays_and_sums_with_keyword_names(lib):
    a = lib.recs(np.array([1, 2], np.int32), np.array([0.5, 1.5]))
    np.testing.assert_array_equal(a.as_.numpy(), [1, 2])
    np.testing.assert_array_equal(a["x'"].numpy(), [1, 2])
    assert a[1].lambda_ == 1.5
    assert lib.recs_len({"as": np.array([1], np.int32), "lambda": [0.0], "x_1": np.array([1], np.int32),
                         "class_": np.array([1], np.int32), "None": np.array([True])}) == 1
    assert lib.make_shape(0).variant == "as" and lib.make_shape(0).payload == (0,)
    assert lib.make_shape(1).variant == "lambda" and lib.make_shape(2).variant == "None"


def test_entry_points_named_like_library_attributes(lib):
    assert callable(lib.close) and not isinstance(lib.close, type(lib.entry("close")))
    assert lib["close"](1) == 2 and lib.entry("close")(1) == 2
    assert lib["sync"](1) == 3 and lib["report"](1) == 4 and lib["types"](1) == 5
    assert lib["manifest"](1) == 6 and isinstance(lib.types, dict)
    # f' and a real f_1: the real name keeps its spelling, the primed one gets one more _
    assert lib["f'"](1) == 7 and lib.f_1_(1) == 7 and lib.f_1(1) == 8 and lib.entry("f_1")(1) == 8
    assert {"f_1_", "f_1", "wildcards"} <= set(dir(lib))
    with pytest.raises(KeyError, match="no entry point .{1,3}nope"):
        lib["nope"]


def test_a_record_with_one_numeric_field_is_not_a_tuple(lib):
    h = lib.one_field(4)
    assert lib.types["{0:i32}"].kind == "record" and not h.is_tuple
    assert pf.to_numpy(h) == {"0": 4} and h._0 == 4 and h["0"] == 4
    with pytest.raises(TypeError, match="no length"):
        len(h)


def test_to_numpy_reads_arrays_of_sums(lib):
    got = pf.to_numpy(lib.shapes(np.array([0, 1, 2], np.int32)))
    assert got == [("as", (0,)), ("lambda", (1.5,)), ("None", ())]
