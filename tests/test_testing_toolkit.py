"""Tests of pybridge.testing: the .fut header parser, the strategies, the comparison, check_against
(headline: a deliberately wrong saxpy is caught with a minimal counterexample) and the handle
lifecycle machine. Everything here runs without a GPU; library-backed tests use the real compiler's
output: tests/toolkit/offbyone.fut (wrong on purpose), compiled at test time, and the reference
programs that `make` builds (build/reference/c/).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from pybridge.futhark.manifest import load_manifest
from pybridge.sizeexpr import parse_size
from pybridge.testing import (
    FutharkTarget,
    InputOptions,
    Inputs,
    KernelTarget,
    Tolerance,
    MismatchError,
    assert_close,
    block_sizes,
    check_against,
    compare,
    elements,
    entry_spec,
    find_source,
    inputs,
    kernel_inputs,
    reduction_bound,
    signature_inputs,
    sizes_strategy,
    spec_from_entry,
    spec_from_kernel,
    spec_from_text,
    ulp_distance,
)
from pybridge.futhark.source import TypeExpr, load_source, parse_dims, parse_entry_header, parse_source
from pybridge.testing.strategies import ArraySpec, PrimSpec, RecordArraySpec, RecordSpec, SumSpec

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "tests" / "reference"
TOOLKIT = ROOT / "tests" / "toolkit"
REFERENCE_C = Path("reference") / "c"
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NO_DB = settings(database=None, max_examples=200, deadline=None, report_multiple_bugs=False)  # no replays


def _built(relative: Path) -> Path:
    """A file `make` builds (under build/): the tests that read one skip, saying so, without it."""
    from pybridge.paths import find_build_file

    found = find_build_file(relative)
    if found is None:
        pytest.skip(f"{relative} is not built: run `make`")
    return found


# ====================================================================== the .fut header parser


def test_parser_reads_every_entry_of_types_fut_like_the_manifest() -> None:
    info = load_source(REF / "types.fut")
    manifest = load_manifest(REF / "types.c.json")
    assert set(info.entries) == set(manifest.entry_points)
    for name, ep in manifest.entry_points.items():
        decl = info.entries[name]
        assert [p.name for p in decl.params] == [i.name for i in ep.inputs], name
        for p, i in zip(decl.params, ep.inputs):
            assert p.type.unique == i.unique, (name, p.name)


def test_parser_types_fut_details() -> None:
    e = load_source(REF / "types.fut").entries
    ranks = e["ranks"].params
    assert [(str(p.type), p.type.rank) for p in ranks] == [("[][]f64", 2), ("[][][]u8", 3), ("[]bool", 1)]
    # `[](f32)`: a parenthesised element type
    assert str(e["points"].params[1].type) == "[]f32"
    # abbreviations resolve: point is a record, shape a sum, []point an array of records
    assert e["norm"].params[0].type.kind == "record"
    assert [n for n, _ in e["norm"].params[0].type.fields] == ["x", "y"]
    area = e["area"].params[0].type
    assert area.kind == "sum" and [(n, len(ps)) for n, ps in area.variants] == [("circle", 1), ("rect", 2)]
    ps = e["sum_points"].params[0].type
    assert ps.kind == "record" and ps.dims == (None,)
    assert e["pair_in"].params[0].type.kind == "tuple"
    fill = e["fill"].params[0].type
    assert fill.unique and str(fill) == "*[]i32"
    assert str(e["prims"].params[8].type) == "f16"


def test_parser_probe_fut() -> None:
    info = load_source(REF / "probe.fut")
    manifest = load_manifest(REF / "probe.c.json")
    assert set(info.entries) == set(manifest.entry_points)
    assert str(info.entries["bump"].params[0].type) == "*[]f32"
    assert info.types["stats"].kind == "record"
    assert [p.name for p in info.entries["index_at"].params] == ["xs", "i"]
    # `def op ...` is not an entry point; the chains are
    assert "op" not in info.entries and "chain30" in info.entries


@pytest.mark.parametrize("prog", sorted(p.stem for p in (ROOT / "futhark").glob("*.fut")))
def test_parser_real_programs(prog: str) -> None:
    """Every futhark/*.fut header parses, with the parameter names of its manifest if built."""
    info = load_source(ROOT / "futhark" / f"{prog}.fut")
    assert info.entries
    m = load_manifest(_built(Path("futhark") / "c" / f"{prog}.json"))
    for name, ep in m.entry_points.items():
        assert [p.name for p in info.entries[name].params] == [i.name for i in ep.inputs]


def test_parser_shared_sizes_in_real_programs() -> None:
    saxpy = load_source(ROOT / "futhark" / "saxpy.fut").entries["saxpy"]
    assert saxpy.size_params == ("n",)
    assert [p.type.dims for p in saxpy.params] == [(), ("n",), ("n",)]
    mm = load_source(ROOT / "futhark" / "matmul.fut").entries["matmul"]
    assert [p.type.dims for p in mm.params] == [("n", "m"), ("m", "p")]
    hist = load_source(ROOT / "futhark" / "histogram.fut").entries["histogram"]
    assert hist.result_size_names() == {"nbins"}


HEADER = """
-- | Documentation comment with entry f (x: i32) inside it, which is not a header.
type vec = [3]f32
type pt = {x: f32, y: f32}
type arr [n] = [n]f32
module M = { type t = i32 }

#[noinline]
entry f [n][m]   -- size parameters
  (a: [n][m]f32)  -- a matrix
  (b: *[m]f32)
  (c: {x: [n]i32, y: ([m]f32, bool)})
  (d: arr [n])          -- parametric abbreviation: unknown
  (e: [n+1]f32)         -- size expression: read by pybridge.sizeexpr
  ((p, q): (f32, f32))  -- pattern parameter
  (g: [3]u8)
  (h: vec)
  (k: [n]pt)
  (l: M.t)
  : ?[k].([k]f32, [n]i32) =
  let s = "entry fake (z: i32) : i32 = 0"
  in (a[0], c.x)

entry g (x: i32) : i32 = x + 'a'
"""


def test_parser_hard_header() -> None:
    info = parse_source(HEADER)
    assert set(info.entries) == {"f", "g"}
    f = info.entries["f"]
    assert f.size_params == ("n", "m")
    p = {q.name: q.type for q in f.params if q.name}
    assert str(p["a"]) == "[n][m]f32"
    assert p["b"].unique and p["b"].dims == ("m",)
    assert p["c"].kind == "record" and str(p["c"]) == "{x: [n]i32, y: ([m]f32, bool)}"
    assert p["d"].kind == "unknown"
    assert p["e"].dims == (parse_size("n + 1"),) and str(p["e"]) == "[n + 1]f32"
    assert f.params[5].name is None and f.params[5].type.kind == "unknown"
    assert p["g"].dims == (3,)
    assert str(p["h"]) == "[3]f32"  # the file's own abbreviation, resolved
    assert p["k"].kind == "record" and p["k"].dims == ("n",)
    assert p["l"].kind == "name"  # from a module: not resolved, not guessed
    assert "n" in f.result_size_names()


def test_parse_entry_header_and_dims() -> None:
    e = parse_entry_header("entry dot [n] (xs: [n]f32) (ys: [n]f32) : f32")
    assert e.name == "dot" and [str(p.type) for p in e.params] == ["[n]f32", "[n]f32"]
    assert parse_dims("[n][m]") == ("n", "m")
    assert parse_dims("[n][]f32") == ("n", None)
    assert parse_dims("[4i64]") == (4,)
    with pytest.raises(ValueError):
        parse_dims("n")


_PRIMS = ["i8", "i32", "i64", "u8", "f16", "f32", "f64", "bool"]
_dim = st.one_of(st.none(), st.sampled_from(["n", "m", "k"]), st.integers(1, 9))


def _type_exprs() -> st.SearchStrategy[TypeExpr]:
    prim = st.builds(lambda name, dims: TypeExpr("prim", tuple(dims), name), st.sampled_from(_PRIMS), st.lists(_dim, max_size=3))
    field_names = st.sampled_from(["a", "b", "xs", "y'"])

    def records(children: st.SearchStrategy[TypeExpr]) -> st.SearchStrategy[TypeExpr]:
        rec = st.dictionaries(field_names, children, min_size=1, max_size=3).map(
            lambda d: TypeExpr("record", (), None, tuple(sorted(d.items())))
        )
        tup = st.lists(children, min_size=2, max_size=3).map(
            lambda ts: TypeExpr("tuple", (), None, tuple((str(k), t) for k, t in enumerate(ts)))
        )
        return rec | tup

    return st.recursive(prim, records, max_leaves=5)


@FAST
@given(st.lists(st.tuples(_type_exprs(), st.booleans()), min_size=1, max_size=4), st.booleans())
def test_parser_round_trip(params: list[tuple[TypeExpr, bool]], multiline: bool) -> None:
    """Rendering parameter types as Futhark text and parsing them back gives the same types."""
    sep = "\n  -- comment\n  " if multiline else " "
    want = []
    parts = []
    for k, (t, unique) in enumerate(params):
        if unique:
            t = TypeExpr(t.kind, t.dims, t.name, t.fields, t.variants, True)
        want.append(t)
        parts.append(f"(p{k}: {t})")
    text = f"entry f [n] [m]{sep}{sep.join(parts)}{sep}: i32 = 0"
    got = [p.type for p in parse_entry_header(text).params]
    assert [str(g) for g in got] == [str(w) for w in want]
    assert got == want


# ====================================================================== strategies

SAXPY_HEADER = "entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32"
PROBE = load_manifest(REF / "probe.c.json")
TYPES = load_manifest(REF / "types.c.json")


@FAST
@given(signature_inputs(SAXPY_HEADER, extra_sizes=block_sizes(8)))
def test_shared_size_from_a_header(case: Inputs) -> None:
    assert len(case["xs"]) == len(case["ys"]) == case.sizes["n"]
    assert case["xs"].dtype == case["ys"].dtype == np.float32
    assert isinstance(case["a"], np.float32)


@FAST
@given(inputs(spec_from_entry(PROBE.entry_points["saxpy"], PROBE, sizes={"xs": ("n",), "ys": "[n]"})))
def test_shared_size_from_sizes_argument(case: Inputs) -> None:
    assert len(case["xs"]) == len(case["ys"])


@FAST
@given(inputs(spec_from_entry(PROBE.entry_points["saxpy"], PROBE, shapes={"xs": ("n",), "ys": ("n",)})))
def test_shapes_is_an_alias_of_sizes(case: Inputs) -> None:
    assert len(case["xs"]) == len(case["ys"])


def test_default_dimensions_are_independent() -> None:
    spec = spec_from_entry(PROBE.entry_points["saxpy"], PROBE)
    assert spec.size_names() == ["xs[0]", "ys[0]"]
    assert spec.size_origin == "default"
    find(inputs(spec), lambda c: len(c["xs"]) != len(c["ys"]))  # they do differ sometimes


def test_source_is_found_next_to_the_manifest() -> None:
    assert find_source(REF / "probe.c.json") == REF / "probe.fut"
    assert find_source(PROBE) == REF / "probe.fut"
    built = _built(Path("futhark") / "c" / "saxpy.json")
    # make copies the source beside the library (it ships with an installed package)
    assert find_source(built).read_text() == (ROOT / "futhark" / "saxpy.fut").read_text()
    spec = spec_from_entry(load_manifest(built).entry_points["saxpy"], load_manifest(built), source=find_source(built))
    assert spec.size_names() == ["n"] and spec.size_origin == "source"


def test_a_source_that_does_not_match_is_ignored() -> None:
    stale = "entry saxpy [n] (alpha: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32 = xs"
    spec = spec_from_entry(PROBE.entry_points["saxpy"], PROBE, source=parse_source(stale))
    assert spec.size_origin == "default"


def test_misspelt_sizes_key_is_refused() -> None:
    with pytest.raises(ValueError, match="not a parameter"):
        spec_from_entry(PROBE.entry_points["saxpy"], PROBE, sizes={"x": ("n",)})
    with pytest.raises(ValueError, match="rank"):
        spec_from_entry(PROBE.entry_points["saxpy"], PROBE, sizes={"xs": ("n", "m")})


@FAST
@given(kernel_inputs("histogram(const int32* x[n], int32* bins[nbins], int64 n, int32 nbins)"))
def test_cuda_scalars_bound_to_sizes(case: Inputs) -> None:
    assert case["n"] == len(case["x"]) and case["n"].dtype == np.int64
    assert case["nbins"] == len(case["bins"]) and case["nbins"].dtype == np.int32


@FAST
@given(kernel_inputs("matmul(const float* a[m*k], const float* b[k*n], float* c[m*n], int32 m, int32 n, int32 k)", max_size=6))
def test_cuda_product_sizes(case: Inputs) -> None:
    m, n, k = (int(case[x]) for x in "mnk")
    assert (len(case["a"]), len(case["b"]), len(case["c"])) == (m * k, k * n, m * n)


def test_cuda_spec_marks_outputs_and_free_scalars() -> None:
    spec = spec_from_kernel("chain(const float* x[n], float* out[n], int64 n, int32 nops)")
    assert [p.is_output for p in spec.params] == [False, True, False, False]
    assert spec.param("n").spec == PrimSpec(np.dtype(np.int64), bound="n")
    assert spec.param("nops").spec == PrimSpec(np.dtype(np.int32))  # not a size: drawn freely
    bounded = kernel_inputs("chain(const float* x[n], float* out[n], int64 n, int32 nops)", ranges={"nops": (0, 3)})
    assert find(bounded, lambda c: c["nops"] == 3)["nops"] == 3
    assert find(bounded, lambda c: True)["nops"] == 0


@FAST
@given(signature_inputs("entry f [n] (xs: [n]f32) (i: i64) : f32", min_size=1,
                        values={"i": lambda s: st.integers(0, s["n"] - 1).map(np.int64)}))
def test_values_may_depend_on_sizes(case: Inputs) -> None:
    assert 0 <= case["i"] < len(case["xs"])


@FAST
@given(signature_inputs(SAXPY_HEADER, min_size=2, max_size=5))
def test_size_bounds(case: Inputs) -> None:
    assert 2 <= case.sizes["n"] <= 5


def test_extra_sizes_are_tried_and_shrink_away() -> None:
    s = signature_inputs(SAXPY_HEADER, max_size=4, extra_sizes=block_sizes(256, large=4096))
    assert find(s, lambda c: c.sizes["n"] == 257).sizes["n"] == 257
    assert find(s, lambda c: c.sizes["n"] > 1000).sizes["n"] == 4096
    assert find(s, lambda c: True).sizes["n"] == 0  # the minimal case is the smallest size
    assert block_sizes(256) == (0, 1, 255, 256, 257, 513)
    assert find(sizes_strategy(3, 9), lambda n: True) == 3


TWO_SIZES = "entry f [n] [m] (xs: [n]f32) (ys: [m]i32) : f32"


def test_extra_sizes_per_size_name() -> None:
    s = signature_inputs(TWO_SIZES, max_size=4, extra_sizes={"n": (300,), "m": (7000,)})
    assert find(s, lambda c: c.sizes["n"] > 4).sizes["n"] == 300
    assert find(s, lambda c: c.sizes["m"] > 4).sizes["m"] == 7000
    only_n = signature_inputs(TWO_SIZES, max_size=4, extra_sizes={"n": (300,)})
    with pytest.raises(NoSuchExample):  # m gets no extras
        find(only_n, lambda c: c.sizes["m"] > 4, settings=settings(max_examples=300, database=None))
    with pytest.raises(ValueError, match="extra_sizes: 'k' is not a size"):
        signature_inputs(TWO_SIZES, extra_sizes={"k": (3,)})


@FAST
@given(signature_inputs(TWO_SIZES, max_size=4, ranges={"m": (0, 2)}, extra_sizes={"n": block_sizes(8)}))
def test_extra_sizes_per_size_name_keep_other_bounds(case: Inputs) -> None:
    assert case.sizes["n"] in range(5) or case.sizes["n"] in block_sizes(8)
    assert case.sizes["m"] <= 2


def test_seeded_values_are_dense_and_shrink_to_seed_0() -> None:
    from pybridge.testing import seeded

    normal = lambda s: seeded(lambda rng: rng.standard_normal(s["n"]).astype(np.float32))
    s = signature_inputs(SAXPY_HEADER, min_size=1000, max_size=2000, values={"ys": normal})
    case = find(s, lambda c: True)
    assert case.sizes["n"] == 1000 and case["ys"].dtype == np.float32 and len(case["ys"]) == 1000
    np.testing.assert_array_equal(case["ys"], np.random.default_rng(0).standard_normal(1000).astype(np.float32))
    assert len(np.unique(case["ys"])) == 1000  # every element random (Hypothesis' arrays: mostly one fill value)
    other = find(s, lambda c: not np.array_equal(c["ys"][:5], case["ys"][:5]))
    assert len(np.unique(other["ys"])) == len(other["ys"])


@FAST
@given(st.sampled_from(["f16", "f32", "f64"]).flatmap(lambda t: signature_inputs(f"entry f (xs: [n]{t}) : {t}")))
def test_floats_are_finite_and_normal_by_default(case: Inputs) -> None:
    xs = case["xs"]
    assert np.all(np.isfinite(xs))
    tiny = np.finfo(xs.dtype).tiny
    assert not np.any((xs != 0) & (np.abs(xs) < tiny))


def test_special_floats_on_request() -> None:
    f16 = np.dtype(np.float16)
    assert np.isnan(find(elements(f16, allow_nan=True), lambda x: np.isnan(x)))
    assert np.isinf(find(elements(np.float32, allow_infinity=True), lambda x: np.isinf(x)))
    sub = find(elements(np.float32, allow_subnormal=True), lambda x: x != 0 and abs(x) < np.finfo(np.float32).tiny)
    assert sub != 0
    # bounds plus specials
    assert np.isnan(find(elements(np.float32, min_value=0, max_value=1, allow_nan=True), lambda x: np.isnan(x)))
    assert isinstance(find(elements(f16), lambda x: True), np.float16)


@FAST
@given(elements(np.int8, min_value=-1000, max_value=5), elements(np.uint16, min_value=-3), elements(np.float32, min_value=0.1, max_value=0.2))
def test_element_bounds(a: np.int8, b: np.uint16, c: np.float32) -> None:
    assert -128 <= a <= 5 and isinstance(a, np.int8)
    assert 0 <= b and isinstance(b, np.uint16)
    assert 0.1 <= c <= 0.2 and isinstance(c, np.float32)


def test_every_kind_of_types_fut_is_generated() -> None:
    src = load_source(REF / "types.fut")
    specs = {n: spec_from_entry(e, TYPES, source=src) for n, e in TYPES.entry_points.items()}
    assert isinstance(specs["norm"].param("p").spec, RecordSpec)
    assert specs["pair_in"].param("p").spec.is_tuple  # type: ignore[union-attr]
    assert isinstance(specs["area"].param("s").spec, SumSpec)
    assert isinstance(specs["sum_points"].param("ps").spec, RecordArraySpec)
    assert isinstance(specs["ranks"].param("b").spec, ArraySpec)

    @FAST
    @given(st.data())
    def check(data: st.DataObject) -> None:
        norm = data.draw(inputs(specs["norm"]))["p"]
        assert set(norm) == {"x", "y"} and all(isinstance(v, np.float32) for v in norm.values())
        pair = data.draw(inputs(specs["pair_in"]))["p"]
        assert isinstance(pair, tuple) and isinstance(pair[0], np.float32) and isinstance(pair[1], np.int32)
        variant, payload = data.draw(inputs(specs["area"]))["s"]
        assert (variant, len(payload)) in {("circle", 1), ("rect", 2)}
        ps = data.draw(inputs(specs["sum_points"]))["ps"]
        assert ps["x"].shape == ps["y"].shape and ps["x"].ndim == 1
        prims = data.draw(inputs(specs["prims"]))
        assert [v.dtype.name for v in prims.values()] == [
            "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "bool",
        ]
        ranks = data.draw(inputs(specs["ranks"], max_size=3))
        assert [v.ndim for v in ranks.values()] == [2, 3, 1]

    check()


def test_unknown_opaque_needs_values() -> None:
    spec = spec_from_text("entry f (x: M.t) : i32")
    with pytest.raises(ValueError, match="values="):
        inputs(spec)
    case = find(inputs(spec, values={"x": st.just("handle")}), lambda c: True)
    assert case["x"] == "handle"
    nested = spec_from_text("entry g (p: {a: f32, t: M.t}) : i32")
    with pytest.raises(ValueError, match="'p.t'"):
        inputs(nested)
    assert find(inputs(nested, values={"p.t": st.just(7)}), lambda c: True)["p"]["t"] == 7


# ====================================================================== tolerances


def test_ulp_distance() -> None:
    f32 = np.float32
    assert ulp_distance(f32(1), np.nextafter(f32(1), f32(2))) == 1
    assert ulp_distance(f32(-0.0), f32(0.0)) == 0
    tiny = np.finfo(f32).smallest_subnormal
    assert ulp_distance(-tiny, tiny) == 2  # across zero
    assert ulp_distance(np.float16(1), np.float16(2)) == 1024  # 10 mantissa bits
    assert ulp_distance(np.finfo(np.float64).max, np.inf) == 1
    assert ulp_distance(-np.finfo(np.float64).max, np.finfo(np.float64).max) == 2 * 0x7FEFFFFFFFFFFFFF
    assert ulp_distance(np.array([1.0, np.nan]), np.array([1.0, 1.0]))[1] == np.iinfo(np.uint64).max


@FAST
@given(st.floats(width=32, allow_nan=False, allow_infinity=False), st.integers(1, 5))
def test_ulp_steps(x: float, k: int) -> None:
    a = np.float32(x)
    b = a
    for _ in range(k):
        b = np.nextafter(b, np.float32(np.inf))
    assume(np.isfinite(b))  # finite vs inf is an overflow: compared exactly, not in ulps
    assert ulp_distance(a, b) == k
    assert not compare(b, a, Tolerance(ulps=k))
    assert compare(b, a, Tolerance(ulps=k - 1))


@FAST
@given(st.lists(st.floats(-1e4, 1e4, width=32), max_size=200))
def test_reduction_bound_covers_float32_summation(xs: list[float]) -> None:
    x = np.array(xs, dtype=np.float32)
    sequential = np.float32(0)
    for v in x:
        sequential = np.float32(sequential + v)
    exact = np.float32(np.sum(x.astype(np.float64)))
    assert abs(float(sequential) - float(exact)) <= reduction_bound(x) + np.finfo(np.float32).eps * abs(float(exact))
    assert_close(sequential, exact, bound=lambda d: reduction_bound(x, d) + np.finfo(d).eps * abs(float(exact)))


def test_reduction_bound_axis() -> None:
    a = np.ones((3, 4), dtype=np.float32)
    assert np.allclose(reduction_bound(a, axis=1), 4 * np.finfo(np.float32).eps * 4)
    assert reduction_bound(a) == pytest.approx(12 * np.finfo(np.float32).eps * 12)


def test_default_and_explicit_tolerances() -> None:
    f32 = np.float32
    assert not compare(f32(1.000001), f32(1.0))  # within the f32 defaults
    assert compare(f32(1.001), f32(1.0))
    assert not compare(np.float16(1.0), np.float16(1.0009765625))  # one f16 ulp: within f16 defaults
    assert not compare(f32(1.1), f32(1.0), Tolerance(rtol=0.2))
    assert_close(f32(1.0), f32(1.2), atol=0.25)
    with pytest.raises(MismatchError):
        assert_close(f32(1.0), f32(1.2), atol=0.1)


def test_nan_inf_int_bool_shape_rules() -> None:
    nan = np.float32(np.nan)
    # NaN equals NaN by default, as numpy.testing.assert_allclose; equal_nan=False refuses it
    assert_close(nan, nan)
    with pytest.raises(MismatchError, match="equal_nan=True"):
        assert_close(nan, nan, equal_nan=False)
    with pytest.raises(MismatchError):
        assert_close(nan, np.float32(1))
    assert_close(nan, nan, equal_nan=True)
    with pytest.raises(MismatchError):
        assert_close(nan, np.float32(1), equal_nan=True)
    assert_close(np.float32(np.inf), np.inf)
    with pytest.raises(MismatchError):
        assert_close(np.float32(np.inf), -np.inf)
    with pytest.raises(MismatchError):
        assert_close(np.float32(1e38), np.inf, rtol=1.0)  # inf is only ever equal to itself
    with pytest.raises(MismatchError, match="exact"):
        assert_close(np.array([1, 2], np.int32), np.array([1, 3], np.int32), atol=10)  # integers: exact
    with pytest.raises(MismatchError):
        assert_close(np.array([True]), np.array([False]))
    assert_close(np.uint64(2**64 - 1), np.uint64(2**64 - 1))
    with pytest.raises(MismatchError):
        assert_close(np.uint64(2**63), np.int64(2**63 - 1))  # no rounding through float64
    with pytest.raises(MismatchError, match="shape"):
        assert_close(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(MismatchError, match="dtype"):
        assert_close(np.zeros(3, np.float32), np.zeros(3, np.float64), check_dtype=True)


def test_structures_compare_field_by_field() -> None:
    got = (np.float32(1), {"x": np.array([1.0, 2.0]), "s": ("circle", (np.float64(1.0),))})
    exp = (np.float32(1), {"x": np.array([1.0, 2.5]), "s": ("rect", (1.0, 2.0))})
    ms = compare(got, exp)
    assert [m.path for m in ms] == ["result[1].s", "result[1].x"] or [m.path for m in ms] == ["result[1].x", "result[1].s"]
    assert any("variant #circle, expected #rect" in m.reason for m in ms)
    assert compare((np.float32(1),), (np.float32(1), np.float32(2)))[0].reason == "got 1 values, expected 2"
    assert "fields differ" in compare({"a": 1}, {"b": 1})[0].reason


# ====================================================================== failure messages


def test_failure_message_format() -> None:
    got = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], dtype=np.float32)
    exp = got + np.float32(1)
    case = Inputs({"a": np.float32(1), "xs": got}, {"n": 8})
    with pytest.raises(MismatchError) as info:
        assert_close(got, exp, inputs=case, what="CUDA kernel 'k'")
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0] == "CUDA kernel 'k' does not match the reference:"
    assert lines[1].startswith("result: values differ beyond tolerance (rtol=1.3e-06, atol=1e-05 (float32 defaults))")
    assert lines[2] == "  8 of 8 element(s) differ (100.0%); max abs err 1 at index (0,)"
    assert lines[3].split() == ["index", "got", "expected", "abs", "err", "allowed"]
    assert lines[4].split() == ["(0,)", "0.0", "1.0", "1", "1.13e-05"]  # allowed = atol + rtol*|expected|
    assert len(lines) == 14  # five rows, then one line for the rest
    assert lines[9].split() == ["...", "3", "more"]
    assert lines[10] == "inputs:"
    assert lines[11] == "  a: f32 1.0"
    assert lines[12] == "  xs: f32[8] [0., 1., 2., 3., 4., 5., 6., 7.]"
    assert lines[13] == "  sizes: n=8"
    assert info.value.inputs is case and info.value.mismatches[0].count == 8


def test_failure_message_ulps_and_integers() -> None:
    with pytest.raises(MismatchError) as info:
        assert_close(np.float32(1), np.float32(1.0000004), ulps=1)
    assert "(3 ulps)" in str(info.value) and "1 ulps" in str(info.value) and "max 3 ulps" in str(info.value)
    with pytest.raises(MismatchError) as info:
        assert_close(np.arange(4, dtype=np.int64).reshape(2, 2), np.array([[0, 1], [2, 4]]))
    assert "(1, 1)" in str(info.value) and "exact" in str(info.value)


# ====================================================================== check_against: the headline


def _saxpy_ref(a: np.float32, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    return a * xs + ys


def _saxpy_off_by_one(a: np.float32, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    out = np.zeros_like(xs)
    for i in range(len(xs) - 1):  # the bug: the last element is never written
        out[i] = a * xs[i] + ys[i]
    return out


def _assert_minimal_saxpy_counterexample(err: MismatchError) -> None:
    case = err.inputs
    assert case is not None
    assert case.sizes["n"] == 1 and len(case["xs"]) == len(case["ys"]) == 1
    a, x, y = float(case["a"]), float(case["xs"][0]), float(case["ys"][0])
    assert a * x + y != 0  # a real failure: the skipped element would have been nonzero
    assert sorted(abs(v) for v in (a, x, y)) == [0.0, 0.0, 1.0]  # the simplest such input
    assert "result: values differ" in str(err)
    assert "sizes: n=1" in str(err)


def test_wrong_python_function_is_caught_minimally() -> None:
    with pytest.raises(MismatchError) as info:
        check_against(_saxpy_ref, _saxpy_off_by_one, signature=SAXPY_HEADER, settings=NO_DB)
    _assert_minimal_saxpy_counterexample(info.value)
    assert info.value.inputs["a"] == 0 and info.value.inputs["ys"][0] == 1  # shrinks left to right


def test_correct_python_function_passes() -> None:
    check_against(_saxpy_ref, lambda a, xs, ys: a * xs + ys, signature=SAXPY_HEADER,
                  inputs=InputOptions(extra_sizes=block_sizes(16)))


def test_callable_with_explicit_strategies() -> None:
    check_against(np.sort, lambda xs: np.sort(xs)[::1], inputs=[signature_inputs("entry f (xs: []i32) : []i32").map(lambda c: c["xs"])])
    check_against(lambda x, y: x + y, lambda x, y: y + x, inputs={"x": elements(np.int16), "y": elements(np.int16)})
    with pytest.raises(MismatchError) as info:
        check_against(lambda x: x, lambda x: x if x < 100 else x + 1, inputs=[st.integers(0, 1000)], settings=NO_DB)
    assert info.value.inputs["arg0"] == 100


def test_target_exceptions_are_shrunk_too() -> None:
    def crashes(a: np.float32, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        if len(xs) > 3:
            raise RuntimeError("boom")
        return a * xs + ys

    with pytest.raises(RuntimeError, match="boom"):
        check_against(_saxpy_ref, crashes, signature=SAXPY_HEADER, settings=NO_DB)


def test_reduction_option_on_a_summation() -> None:
    def pairwise_f32(xs: np.ndarray) -> np.float32:
        return np.float32(np.sum(xs, dtype=np.float32))

    def exact(xs: np.ndarray) -> np.float32:
        return np.float32(np.sum(xs.astype(np.float64)))

    kw: dict[str, Any] = dict(signature="entry sum [n] (xs: [n]f32) : f32",
                              inputs=InputOptions(min_value=-1e6, max_value=1e6, max_size=300))
    check_against(exact, pairwise_f32, tolerance=Tolerance(reduction=True), **kw)
    check_against(exact, pairwise_f32, tolerance=Tolerance(reduction=lambda xs: reduction_bound(xs)), **kw)
    with pytest.raises(MismatchError):  # an error beyond the bound is still caught
        check_against(exact, lambda xs: pairwise_f32(xs) + np.float32(1), tolerance=Tolerance(reduction=True),
                      settings=NO_DB, **kw)


def test_rule_option_takes_the_catalogs_tolerances() -> None:
    from pybridge.demo import examples as E

    ex = E.get("saxpy")
    check_against(ex.reference, lambda a, xs, ys: a * xs + ys, rule=ex.tolerance, signature=SAXPY_HEADER,
                  inputs=InputOptions(min_value=-1e3, max_value=1e3))
    with pytest.raises(MismatchError) as info:
        check_against(ex.reference, _saxpy_off_by_one, rule=ex.tolerance, signature=SAXPY_HEADER, settings=NO_DB)
    _assert_minimal_rule_failure(info.value, "per element 2*eps32*(|a*x| + |y|)")
    # dtype is part of that rule: float64 results are rejected
    with pytest.raises(MismatchError, match="dtype float64"):
        check_against(ex.reference, lambda a, xs, ys: (a * xs + ys).astype(np.float64), rule=ex.tolerance,
                      signature=SAXPY_HEADER, settings=NO_DB)
    # integer results with a mismatch budget (mandelbrot's rule) are judged by the rule, not exactly
    mb = E.get("mandelbrot")
    def one_pixel_off(*args: Any) -> np.ndarray:
        out = mb.reference(*args)
        out.flat[:1] = 0  # still in [0, max_iter]: within the rule's budget of 2 pixels
        return out

    check_against(mb.reference, one_pixel_off, rule=mb.tolerance,
                  inputs=InputOptions(ranges={"max_iter": (1, 20), "w": (0, 8), "h": (0, 8)}),
                  signature="entry mandelbrot (w: i64) (h: i64) (x0: f32) (y0: f32) (dx: f32) (dy: f32) (max_iter: i32) : [h][w]i32",
                  max_examples=20)


def _assert_minimal_rule_failure(err: MismatchError, rule_text: str) -> None:
    assert err.inputs is not None and err.inputs.sizes["n"] == 1
    assert f"rejected by the rule '{rule_text}'" in str(err)


def test_rule_option_callables() -> None:
    def exact(args: Any, expected: Any, actual: Any) -> bool:
        return bool(np.array_equal(expected, actual))

    def with_message(args: Any, expected: Any, actual: Any) -> tuple[bool, str]:
        return np.array_equal(expected, actual), f"{len(args[1])} elements"

    check_against(_saxpy_ref, _saxpy_ref, rule=exact, signature=SAXPY_HEADER)
    with pytest.raises(MismatchError) as info:
        check_against(_saxpy_ref, _saxpy_off_by_one, rule=exact, signature=SAXPY_HEADER, settings=NO_DB)
    _assert_minimal_rule_failure(info.value, "test_rule_option_callables.<locals>.exact")
    with pytest.raises(MismatchError, match="with_message': 1 elements"):
        check_against(_saxpy_ref, _saxpy_off_by_one, rule=with_message, signature=SAXPY_HEADER, settings=NO_DB)
    with pytest.raises(TypeError, match="rule= replaces"):
        check_against(_saxpy_ref, _saxpy_ref, rule=exact, tolerance=Tolerance(rtol=0), signature=SAXPY_HEADER)
    with pytest.raises(TypeError, match="returned"):
        check_against(_saxpy_ref, _saxpy_ref, rule=lambda *a: "yes", signature=SAXPY_HEADER, settings=NO_DB)


INDEX_AT = "entry index_at (xs: []f32) (i: i64) : f32"


class _BoundsError(RuntimeError):
    """Stands in for pybridge.futhark.ProgramError."""


def _index_ref(xs: np.ndarray, i: np.int64) -> np.float32:
    if not 0 <= i < len(xs):
        raise IndexError(f"Index [{i}] out of bounds")
    return xs[i]


def _index_checked(xs: np.ndarray, i: np.int64) -> np.float32:
    if not 0 <= i < len(xs):
        raise _BoundsError(f"Error: Index [{i}] out of bounds for array of shape [{len(xs)}].")
    return xs[i]


_ANY_INDEX = {"i": lambda s: st.integers(-3, s["xs[0]"] + 3).map(np.int64)}


def test_errors_option() -> None:
    kw: dict[str, Any] = dict(signature=INDEX_AT, inputs=InputOptions(values=_ANY_INDEX, max_size=6), errors=_BoundsError)
    check_against(_index_ref, _index_checked, error_match="out of bounds", **kw)
    # the target returns where the reference raises: Python's negative indexing
    with pytest.raises(MismatchError, match=r"expected an error \(the reference raised IndexError") as info:
        check_against(_index_ref, lambda xs, i: xs[i] if -len(xs) <= i < len(xs) else _index_checked(xs, i), settings=NO_DB, **kw)
    assert info.value.inputs["i"] == -1 and len(info.value.inputs["xs"]) == 1
    # the target raises where the reference returns: an off-by-one bounds check
    with pytest.raises(MismatchError, match="the target raised _BoundsError") as info:
        check_against(_index_ref, lambda xs, i: _index_checked(xs[:-1], i), settings=NO_DB, **kw)
    assert info.value.inputs["i"] == 0 and len(info.value.inputs["xs"]) == 1
    assert isinstance(info.value.__cause__, _BoundsError)
    # both raise, but the message says something else
    def wrong_message(xs: np.ndarray, i: np.int64) -> np.float32:
        if not 0 <= i < len(xs):
            raise _BoundsError("Assertion is false")
        return xs[i]

    with pytest.raises(MismatchError, match="_BoundsError: 'Assertion is false', which does not match 'out of bounds'"):
        check_against(_index_ref, wrong_message, settings=NO_DB, error_match="out of bounds", **kw)
    check_against(_index_ref, wrong_message, **kw)  # without error_match= any message will do
    # exceptions of other types propagate, as without errors=
    def crashes(xs: np.ndarray, i: np.int64) -> np.float32:
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError):
        check_against(_index_ref, crashes, settings=NO_DB, **kw)
    with pytest.raises(TypeError, match="errors="):
        check_against(_index_ref, _index_checked, signature=INDEX_AT, errors="oops")
    with pytest.raises(TypeError, match="needs errors="):
        check_against(_index_ref, _index_checked, signature=INDEX_AT, error_match="x")


def test_several_results_and_records() -> None:
    def ref(x: np.float32, y: np.bool_, z: np.float16) -> tuple[Any, ...]:
        return (x * np.float32(2), not y, z + z)

    check_against(ref, ref, signature="entry pair (x: f32) (y: bool) (z: f16) : (f32, bool, f16)")
    with pytest.raises(MismatchError, match=r"result\[1\]"):
        check_against(ref, lambda x, y, z: (x * np.float32(2), bool(y), z + z),
                      signature="entry pair (x: f32) (y: bool) (z: f16) : (f32, bool, f16)", settings=NO_DB)

    def stats(xs: np.ndarray) -> dict[str, Any]:
        return {"mean": xs.mean(), "sd": xs.std()}

    with pytest.raises(MismatchError, match=r"result\.sd"):
        check_against(stats, lambda xs: {"mean": xs.mean(), "sd": xs.var()}, signature="entry stats (xs: []f64) : stats",
                      inputs=InputOptions(min_size=1, min_value=-10, max_value=10), settings=NO_DB)


def test_kernel_style_callable_outputs_in_place() -> None:
    """Kernel-style signatures: outputs are the non-const pointers, filled in place."""
    sig = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"

    def ref(a: Any, x: np.ndarray, y: np.ndarray, out: np.ndarray, n: Any) -> None:
        out[:] = a * x + y

    def wrong(a: Any, x: np.ndarray, y: np.ndarray, out: np.ndarray, n: Any) -> None:
        out[: n - 1] = a * x[: n - 1] + y[: n - 1]  # the last element keeps its old (random) value

    check_against(ref, ref, signature=sig)
    with pytest.raises(MismatchError) as info:
        check_against(ref, wrong, signature=sig, settings=NO_DB)
    assert info.value.inputs.sizes["n"] == 1


# -- a CUDA-like Kernel without a GPU: the launch logic of KernelTarget


class _Dev:
    """Stands in for pybridge.cuda.DeviceArray."""

    def __init__(self, a: np.ndarray):
        self.a = a.copy()

    def numpy(self) -> np.ndarray:
        return self.a.copy()


class _FakeSaxpyKernel:
    """Executes like a 1-D CUDA kernel: one thread per index below grid*block, guarded by i < n."""

    def __init__(self) -> None:
        from pybridge.cuda.signature import parse_signature

        self.signature = parse_signature("saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
        self.launches: list[tuple[Any, Any]] = []

    def __call__(self, a: Any, x: _Dev, y: _Dev, out: _Dev, n: Any, *, grid: Any, block: Any, stream: Any = None) -> None:
        self.launches.append((grid, block))
        threads = int(grid) * int(block)
        for i in range(min(threads, int(n))):
            out.a[i] = a * x.a[i] + y.a[i]


class _FakeHistogramKernel:
    """Like kernels_cu/histogram.cu's shared-memory kernel: needs 4*nbins bytes of it, adds to bins."""

    def __init__(self) -> None:
        from pybridge.cuda.signature import parse_signature

        self.signature = parse_signature("histogram(const int32* x[n], int32* bins[nbins], int64 n, int32 nbins)")
        self.shared: list[int] = []

    def __call__(self, x: _Dev, bins: _Dev, n: Any, nbins: Any, *, grid: Any, block: Any, shared_mem: int = 0,
                 stream: Any = None) -> None:
        self.shared.append(shared_mem)
        if shared_mem < 4 * int(nbins):
            raise RuntimeError("too little shared memory")
        for v in x.a:
            if 0 <= v < nbins:
                bins.a[v] += 1


def test_kernel_target_shared_mem() -> None:
    def ref(x: np.ndarray, bins: np.ndarray, n: Any, nbins: Any) -> None:
        bins += np.bincount(x[(x >= 0) & (x < nbins)], minlength=int(nbins)).astype(np.int32)  # in place

    k = _FakeHistogramKernel()
    kw: dict[str, Any] = dict(inputs=InputOptions(elements={"x": st.integers(-2, 40)}, ranges={"bins": (-100, 100)}, max_size=40))
    check_against(ref, KernelTarget(k, shared_mem=lambda s: 4 * s["nbins"], to_device=_Dev, grid_for=lambda n, b: 1), **kw)
    assert k.shared and all(m % 4 == 0 for m in k.shared)
    from pybridge.testing import as_target

    t = as_target(k, shared_mem=1024, grid=1)  # the same as KernelTarget(k, shared_mem=1024, grid=1)
    assert isinstance(t, KernelTarget) and t.shared_mem == 1024 and t.grid == 1
    with pytest.raises(RuntimeError, match="too little"):
        check_against(ref, KernelTarget(_FakeHistogramKernel(), to_device=_Dev, grid_for=lambda n, b: 1),
                      settings=NO_DB, **kw)


def test_kernel_target_launch_and_readback() -> None:
    k = _FakeSaxpyKernel()
    ceil_div = lambda n, b: (n + b - 1) // b
    target = KernelTarget(k, block=4, to_device=_Dev, grid_for=ceil_div)

    def ref(a: Any, x: np.ndarray, y: np.ndarray, out: np.ndarray, n: Any) -> np.ndarray:
        return a * x + y

    check_against(ref, target, inputs=InputOptions(extra_sizes=block_sizes(4)))
    assert k.launches and all(b == 4 for _, b in k.launches)
    # A launch-geometry bug (grid rounded down) is caught at the smallest size not a multiple of 4.
    wrong = KernelTarget(_FakeSaxpyKernel(), block=4, to_device=_Dev, grid_for=lambda n, b: n // b)
    with pytest.raises(MismatchError) as info:
        check_against(ref, wrong, inputs=InputOptions(extra_sizes=block_sizes(4)), settings=NO_DB)
    assert info.value.inputs.sizes["n"] == 1


# ====================================================================== with Futhark libraries


@pytest.fixture(scope="module")
def offbyone_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """liboffbyone.so + offbyone.json + offbyone.fut in a fresh directory, compiled now."""
    from pybridge.futhark.build import build_program, futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("Futhark compiler not found: run `make` (it obtains one) or set FUTHARK=")
    d = tmp_path_factory.mktemp("offbyone")
    build_program(TOOLKIT / "offbyone.fut", backend="c", out_dir=d)  # copies the source beside the library
    assert (d / "offbyone.fut").is_file()
    return d


@pytest.fixture(scope="module")
def offbyone(offbyone_dir: Path) -> Iterator[Any]:
    import pybridge.futhark as pf

    lib = pf.load(offbyone_dir / "offbyone.json")
    yield lib
    lib.close()


def test_wrong_futhark_entry_point_is_caught_minimally(offbyone: Any) -> None:
    # The shared size n comes from offbyone.fut, found next to the manifest.
    spec = entry_spec(offbyone.saxpy)
    assert spec.size_origin == "source" and spec.size_names() == ["n"]
    with pytest.raises(MismatchError) as info:
        check_against(_saxpy_ref, offbyone.saxpy, settings=NO_DB)
    _assert_minimal_saxpy_counterexample(info.value)
    assert str(info.value).startswith("Futhark entry point 'saxpy' does not match the reference:")
    assert offbyone.live_values() == 0  # every handle the checks made was freed


def test_wrong_futhark_entry_point_with_sizes_argument(offbyone: Any) -> None:
    with pytest.raises(MismatchError) as info:
        check_against(_saxpy_ref, offbyone.saxpy, source=False, sizes={"xs": "[n]", "ys": "[n]"}, settings=NO_DB)
    _assert_minimal_saxpy_counterexample(info.value)


def test_correct_futhark_entry_point_passes(offbyone: Any) -> None:
    check_against(_saxpy_ref, offbyone.saxpy_ok, inputs=InputOptions(extra_sizes=block_sizes(64)))
    assert offbyone.live_values() == 0


def test_without_shared_sizes_the_program_error_surfaces(offbyone: Any) -> None:
    pf = pytest.importorskip("pybridge.futhark")
    with pytest.raises(pf.ProgramError):
        check_against(_saxpy_ref, offbyone.saxpy_ok, source=False, settings=NO_DB)


def _reference_dir(name: str = "probe") -> Path:
    """The build folder holding ``name``'s library (the installed package ships only probe's, the
    checkout's build/ has every test program's)."""
    from pybridge.paths import find_build_file

    found = find_build_file(REFERENCE_C / f"lib{name}.so")
    if found is None:
        pytest.skip(f"{REFERENCE_C}/lib{name}.so is not built: run `make` (it obtains the Futhark compiler)")
    return found.parent


def _reference(name: str) -> Any:
    pf = pytest.importorskip("pybridge.futhark")
    return pf.load(_reference_dir(name) / f"{name}.json")


@pytest.fixture(scope="module")
def probe() -> Iterator[Any]:
    lib = _reference("probe")
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def types_lib() -> Iterator[Any]:
    lib = _reference("types")
    yield lib
    lib.close()


def test_probe_entry_points(probe: Any) -> None:
    check_against(_saxpy_ref, probe.saxpy, sizes={"xs": "[n]", "ys": "[n]"})
    check_against(lambda xs: np.float32(xs.astype(np.float64).sum()), probe.sum, tolerance=Tolerance(reduction=True),
                  inputs=InputOptions(min_value=-1e6, max_value=1e6))
    check_against(lambda x, y, z: (x * np.float32(2), not y, z + z), probe.pair)
    check_against(lambda xs: {"mean": xs.mean(), "sd": xs.std()}, probe.stats, inputs=InputOptions(min_size=1, min_value=-1e3, max_value=1e3))
    check_against(lambda xs: np.concatenate([xs[:1] + np.float32(1), xs[1:]]), probe.bump, inputs=InputOptions(min_size=1))  # consumed input
    check_against(lambda xs, i: xs[i], probe.index_at,
                  inputs=InputOptions(min_size=1, values={"i": lambda s: st.integers(0, s["xs[0]"] - 1).map(np.int64)}))
    pf = pytest.importorskip("pybridge.futhark")  # a failed bounds check where, and only where, the reference raises
    check_against(_index_ref, probe.index_at, errors=pf.ProgramError, error_match="out of bounds",
                  inputs=InputOptions(values=_ANY_INDEX))
    assert probe.live_values() == 0


def test_types_every_kind(types_lib: Any) -> None:
    lib = types_lib
    small: dict[str, Any] = dict(inputs=InputOptions(min_value=-1e3, max_value=1e3))
    check_against(lambda p: np.float32(np.sqrt(p["x"] ** 2 + p["y"] ** 2)), lib.norm, **small)  # record in
    check_against(lambda x, y: {"x": x, "y": y}, lib.make_point)  # record out
    check_against(lambda p: p[0] * np.float32(p[1]), lib.pair_in)  # tuple in
    check_against(lambda x: (x, np.array([1, 2], np.int32)), lib.pair_out)  # several results
    area = lambda s: 3.14159 * s[1][0] * s[1][0] if s[0] == "circle" else s[1][0] * s[1][1]
    check_against(area, lib.area, tolerance=Tolerance(rtol=1e-12, atol=0), **small)  # sum in
    check_against(lambda r: ("circle", (r,)), lib.circle)  # sum out
    check_against(lambda xs, ys: {"x": xs, "y": ys}, lib.points, sizes={"xs": "[n]", "ys": "[n]"})  # record array out
    check_against(lambda ps: {"x": ps["x"].sum(dtype=np.float32), "y": ps["y"].sum(dtype=np.float32)}, lib.sum_points,
                  tolerance=Tolerance(reduction=True), **small)  # record array in
    check_against(lambda *a: tuple(x + x.dtype.type(1) for x in a[:11]) + (not a[11],), lib.prims)  # every primitive
    check_against(lambda a, b, c: (a * 2, b + np.uint8(1), ~c), lib.ranks, inputs=InputOptions(max_size=5))  # ranks 1-3
    check_against(lambda xs, v: np.full_like(xs, v), lib.fill)  # consumed
    check_against(lambda a, b: np.int32(a // b), lib.checked_div, inputs=InputOptions(ranges={"b": (1, 1000)}))
    assert lib.live_values() == 0


def test_futhark_target_wraps_entry_points(probe: Any) -> None:
    t = FutharkTarget(probe.saxpy)
    assert t.spec(sizes={"xs": "[n]", "ys": "[n]"}).size_names() == ["n"]
    out = t(Inputs({"a": np.float32(2), "xs": np.ones(3, np.float32), "ys": np.ones(3, np.float32)}))
    assert isinstance(out, np.ndarray) and out.tolist() == [3.0, 3.0, 3.0]
    assert probe.live_values() == 0


# ====================================================================== the handle lifecycle machine


def _freed_empty_handle_raises(lib: Any) -> bool:
    pf = pytest.importorskip("pybridge.futhark")
    h = lib.types["[]f32"].new(np.zeros(0, np.float32))
    assert h.shape == (0,)  # the bug needs the shape cached before the free
    h.free()
    try:
        h.numpy()
    except pf.InvalidHandleError:
        return True
    return False


def test_freed_empty_handle_raises(offbyone: Any) -> None:
    """Found by the lifecycle machine: a freed empty array whose shape was cached used to read as []."""
    assert _freed_empty_handle_raises(offbyone)


def _run_machine(lib: Any, **kw: Any) -> None:
    """Runs the machine on a library broken on purpose: the first failing sequence is the finding.
    No shrink or explain phase: they rerun variants of the failing sequence, each with its calls
    from a second thread and interrupts, which took from half a minute to over seven (CI)."""
    from hypothesis.stateful import run_state_machine_as_test

    from pybridge.testing import handle_lifecycle_machine

    machine = handle_lifecycle_machine(lib, **kw)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=25, stateful_step_count=25, deadline=None, database=None, report_multiple_bugs=False,
            phases=[Phase.generate],
        ),
    )


def test_lifecycle_machine_on_offbyone(offbyone: Any) -> None:
    from pybridge.testing import handle_lifecycle_machine

    machine = handle_lifecycle_machine(offbyone)  # the Ctrl-C rule included, on Linux
    assert {"create", "read", "free", "misuse", "call_entry", "interrupted_call", "live_values_match"} <= set(dir(machine))
    machine.TestCase.settings = settings(max_examples=20, stateful_step_count=20, deadline=None, database=None)
    machine.TestCase("runTest").runTest()
    assert offbyone.live_values() == 0


def test_lifecycle_machine_on_reference_programs() -> None:
    """probe (bump consumes: the consume rule runs) and types (fill consumes []i32; points, ranks...
    take NumPy arguments), 25 sequences of 25 steps each, Ctrl-C rule included, in a child process
    with a time limit: a hang (a lock an interrupt left held) fails, showing every thread's stack,
    instead of stopping CI."""
    from pybridge.testing.lifecycle_run import run

    programs = [str(_reference_dir(name) / f"lib{name}.so") for name in ("probe", "types")]
    summary = run(programs, "c", 50, batch=50, steps=25, timeout=600)
    assert not summary["crashes"] and not summary["failures"], summary
    assert summary["sequences"] >= 50, summary


def _fresh_copy(src_dir: Path, prog: str, dest: Path) -> Any:
    """A private copy of a library: what a test breaks there (leaked C values) stays there."""
    pf = pytest.importorskip("pybridge.futhark")
    for f in (f"lib{prog}.so", f"{prog}.json"):
        shutil.copy(src_dir / f, dest / f)
    return pf.load(dest / f"{prog}.json")


def test_lifecycle_machine_catches_a_forgotten_consume(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pybridge.futhark.handles import Value

    lib = _fresh_copy(_reference_dir(), "probe", tmp_path)
    monkeypatch.setattr(Value, "_mark_consumed", lambda self, by: None)  # the handle layer "forgets"
    with pytest.raises(AssertionError):
        _run_machine(lib, entries=["bump"])


def test_lifecycle_machine_catches_a_leak(monkeypatch: pytest.MonkeyPatch, offbyone_dir: Path, tmp_path: Path) -> None:
    from pybridge.futhark import callpath
    from pybridge.futhark.handles import Value

    lib = _fresh_copy(offbyone_dir, "offbyone", tmp_path)

    leaked: list[Any] = []  # kept alive, so that their ids (the context's registry keys) stay theirs

    def leaky_release(self: Any, status: str) -> None:  # marks the handle freed, frees nothing
        if self._status is None:
            self._status = status
            leaked.append(self)

    monkeypatch.setattr(Value, "_release", leaky_release)
    if callpath.compiled is not None:  # the compiled Value frees in C, never through _release
        monkeypatch.setattr(Value, "free", lambda self: leaked.append(self))  # frees nothing
    with pytest.raises(AssertionError, match="live values|leaked"):
        _run_machine(lib)


def test_on_device_wraps_device_functions() -> None:
    from pybridge.testing import on_device

    def device_saxpy(a: Any, x: _Dev, y: _Dev) -> _Dev:  # like pybridge.demo.catalog.cuda_saxpy
        assert isinstance(x, _Dev) and isinstance(y, _Dev)
        return _Dev(a * x.a + y.a)

    check_against(_saxpy_ref, on_device(device_saxpy, to_device=_Dev), signature=SAXPY_HEADER)


def test_a_pybridge_cuda_kernel_is_a_kernel_target() -> None:
    import pybridge.cuda as cuda
    from pybridge.testing import as_target

    class _PreparedFunction:  # what PyCUDA's Function offers Kernel at construction
        def prepare(self, arg_format: str) -> None:
            self.arg_format = arg_format

    k = cuda.Kernel(_PreparedFunction(), "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
    t = as_target(k, block=128)
    assert isinstance(t, KernelTarget) and t.block == 128
    assert t.spec().describe() == "saxpy(a: f32, x: [n]f32, y: [n]f32, out: [n]f32, n: i64 (= n))"


# ---------------------------------------------------------------- numpy.testing's conventions


def _nan_where_negative(xs: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sqrt(xs)  # NaN for every negative element: both sides make the same NaNs


def test_check_against_compares_nan_equal_by_default() -> None:
    sig = "entry f [n] (xs: [n]f64) : [n]f64"
    check_against(_nan_where_negative, _nan_where_negative, signature=sig, settings=NO_DB,
                  examples=[{"xs": np.array([-1.0, 4.0])}])
    # refused when asked, with the shrunk case: one negative element
    with pytest.raises(MismatchError, match="NaN != NaN") as info:
        check_against(_nan_where_negative, _nan_where_negative, signature=sig, settings=NO_DB,
                      tolerance=Tolerance(equal_nan=False))
    xs = info.value.inputs["xs"]
    assert xs.size == 1 and not xs[0] >= 0  # one negative (or NaN) element
    # NaN against a number is still a mismatch
    with pytest.raises(MismatchError):
        check_against(_nan_where_negative, lambda xs: np.sqrt(np.abs(xs)), signature=sig, settings=NO_DB)


def test_a_reference_that_raises_is_reported_with_the_input() -> None:
    from pybridge.testing import ReferenceRaisedError

    sig = "entry f [n] (xs: [n]f32) : f32"
    naive = lambda xs: xs.max()  # noqa: E731 - raises ValueError on an empty array

    def target(xs: np.ndarray) -> np.float32:
        return xs.max() if xs.size else np.float32(-np.inf)

    with pytest.raises(ReferenceRaisedError, match="the reference raised on this input: ValueError") as info:
        check_against(naive, target, signature=sig, settings=NO_DB)
    err = info.value
    assert isinstance(err, MismatchError) and isinstance(err.__cause__, ValueError)
    assert err.inputs["xs"].size == 0 and "xs" in str(err)  # the input is named and shown
    assert "Traceback" not in str(err) and err.results == -np.inf  # what the target returned
    # a reference raising on one specific value: shrunk to it
    def picky(xs: np.ndarray) -> np.float32:
        if (xs == 3).any():
            raise KeyError("three")
        return np.float32(xs.sum())

    with pytest.raises(ReferenceRaisedError, match="KeyError") as info:
        check_against(picky, lambda xs: np.float32(xs.sum()), signature=sig, settings=NO_DB,
                      examples=[{"xs": np.array([1, 3], np.float32)}])
    assert (info.value.inputs["xs"] == 3).any()
    # with errors= a raising reference stays part of the specification (unchanged)
    check_against(naive, lambda xs: xs.max(), signature=sig, settings=NO_DB, errors=ValueError)


def test_no_floating_point_warning_escapes_the_comparison() -> None:
    """docs/testing.md: floating-point warnings of the comparison are silenced. An infinite result
    with `Tolerance(reduction=True)` (rtol 0 times inf), overflowing bounds and ulps, through
    compare, assert_close, a rule and check_against; under warnings-as-errors."""
    import warnings

    inf32 = np.array([np.inf, -np.inf, np.nan, 1.0, 3e38], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare(inf32, inf32.copy(), Tolerance(reduction=True), bound=lambda dtype: np.float64(1e308) * 10) == []
        assert compare(inf32, inf32.copy(), Tolerance(ulps=2, rtol=1e-3)) == []
        assert compare(np.float64(np.inf), np.float64(np.inf), Tolerance(rtol=1e-3), bound=np.inf) == []
        assert compare(inf32[:1], inf32[1:2], Tolerance(reduction=True), bound=1.0)  # +inf vs -inf: a mismatch, no warning
        assert_close(inf32, inf32.copy(), rtol=0.0, atol=0.0)
        sig = "entry f [n] (xs: [n]f32) : [n]f32"
        square = lambda xs: xs * xs * np.float32(1e30)  # noqa: E731 - overflows to inf on most inputs
        check_against(square, square, signature=sig, settings=NO_DB, tolerance=Tolerance(reduction=True),
                      inputs=InputOptions(allow_infinity=True, allow_nan=True), examples=[{"xs": inf32}])
        check_against(square, square, signature=sig, settings=NO_DB,
                      rule=lambda args, expected, got: bool(np.all((got == expected) | np.isnan(expected) | (got * 0 != 0))))
