"""The programs in futhark/*.fut, run through pybridge.futhark, property-tested with
pybridge.testing.check_against against the NumPy references and tolerance rules of the example
catalog (pybridge/demo/examples.py).

Inputs come from each entry point's manifest and its header in futhark/<prog>.fut (so ``[n]``
shared between parameters, and size parameters such as ``nbins`` or ``w``/``h``, are honoured);
the catalog's demo inputs at sizes 0, 1, 1000 and 65536 (1 and 1000 for the bounds checks) run as
explicit examples of every property test. Each test needs ``build/futhark/<backend>/lib<prog>.so``
(``make`` builds c and multicore, obtaining the Futhark compiler) and skips, saying how to build it,
where it is missing. Backends: c and multicore; cuda as well, marked ``gpu``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pybridge.demo import examples as E
from pybridge.paths import find_build_file
from pybridge.testing import InputOptions, Tolerance, check_against, elements, to_numpy

pytestmark = [pytest.mark.futhark, pytest.mark.slow]  # slow: left out of the quick subset (-m 'not slow')

BACKENDS = [
    pytest.param("c", id="c"),
    pytest.param("multicore", id="multicore"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], report_multiple_bugs=False
)
FEW = settings(SETTINGS, max_examples=10)

f32 = np.float32


# ------------------------------------------------------------------------------------------------
# libraries
# ------------------------------------------------------------------------------------------------


def _load_or_skip(prog: str, backend: str):
    rel = f"futhark/{backend}/lib{prog}.so"
    if find_build_file(rel) is None:
        how = "make" if backend in ("c", "multicore") else f"make futhark FUTHARK_BACKEND={backend}"
        pytest.skip(f"build/{rel} not built: run `{how}` (it obtains the Futhark compiler)")
    import pybridge.futhark as pf  # only once a library exists: a broken import is then a failure

    return pf.load(prog, backend=backend)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    return request.param


def _program(prog: str):
    @pytest.fixture(scope="module")
    def fixture(backend):
        lib = _load_or_skip(prog, backend)
        try:
            yield lib
        finally:
            lib.close()

    return fixture


saxpy_lib = _program("saxpy")
dot_lib = _program("dot")
stats_lib = _program("stats")
scan_lib = _program("scan")
matmul_lib = _program("matmul")
histogram_lib = _program("histogram")
mandelbrot_lib = _program("mandelbrot")
jacobi_lib = _program("jacobi")
chain_lib = _program("chain")
bounds_lib = _program("bounds")


@pytest.fixture(scope="module")
def pf():
    import pybridge.futhark as pf

    return pf


# ------------------------------------------------------------------------------------------------
# the catalog's references, rules and demo inputs through check_against
# ------------------------------------------------------------------------------------------------

DEMO_SIZES = (0, 1, 1000, 65_536)


def demo_examples(name: str, sizes: Iterable[int] = DEMO_SIZES, *, bad: bool = False) -> list[dict[str, Any]]:
    """The catalog's deterministic inputs (``make_bad_inputs`` with ``bad``) at ``sizes``, as
    explicit examples for check_against (a dict per call, in parameter order)."""
    ex = E.get(name)
    make = ex.make_bad_inputs if bad else ex.make_inputs
    assert make is not None, f"{name} has no {'bad ' if bad else ''}inputs in the catalog"
    return [dict(zip(ex.arg_names, make(np.random.default_rng(s), s))) for s in sizes]


def entry(lib: Any, name: str) -> Any:
    """The Futhark entry point of catalog example ``name`` in ``lib``."""
    return getattr(lib, E.get(name).source("futhark").entry)


INPUT_FIELDS = frozenset(f.name for f in dataclasses.fields(InputOptions))


def check_example(name: str, lib: Any, *, demo_sizes: Iterable[int] = DEMO_SIZES, examples=(), **options: Any) -> None:
    """check_against(the catalog's reference, the entry point) under the catalog's tolerance rule
    (its reasoning is in pybridge/demo/examples.py, at the example), with the demo inputs as examples."""
    ex = E.get(name)
    options.setdefault("settings", SETTINGS)
    # The InputOptions fields among the options (min_value=, max_size= ...) make the inputs= object.
    generation = {k: options.pop(k) for k in [k for k in options if k in INPUT_FIELDS]}
    check_against(ex.reference, entry(lib, name), rule=ex.tolerance, inputs=InputOptions(**generation),
                  examples=[*demo_examples(name, demo_sizes), *examples], **options)


#: The catalogued entry points that have a property test below (test_every_entry_point_is_tested).
PROPERTY_TESTED = frozenset(
    {"saxpy", "saxpy_iter", "jacobi", "dot", "dot_f64", "sum", "stats", "prefix_sum", "prefix_sum_i64", "matmul", "histogram",
     "mandelbrot", "index_at", "checked_sqrt", *(f"chain{n}" for n in E.CHAIN_LENGTHS)}
)
FUTHARK_EXAMPLES = [n for n, e in E.EXAMPLES.items() if e.source("futhark") is not None]


def test_every_entry_point_is_tested() -> None:
    """Every catalogued futhark/ entry point has a property test here (its demo inputs run there)."""
    missing = sorted(set(FUTHARK_EXAMPLES) - PROPERTY_TESTED)
    assert not missing, f"catalogued Futhark entry points without a property test: {missing}"


# ------------------------------------------------------------------------------------------------
# saxpy, dot, sum
# ------------------------------------------------------------------------------------------------


def test_saxpy(saxpy_lib):
    # xs and ys share the size n of `entry saxpy [n]`; the result's shape is checked by the rule.
    check_example("saxpy", saxpy_lib, min_value=-1e3, max_value=1e3, max_size=300)


def test_saxpy_iter(saxpy_lib):
    # iters is an iteration count: kept small; |a| <= 1 as the catalog's bound assumes.
    check_example("saxpy_iter", saxpy_lib, min_value=-1e3, max_value=1e3, max_size=200,
                  ranges={"iters": (0, 8), "a": (-1, 1)}, settings=FEW)


def test_jacobi(jacobi_lib):
    # n, m of `entry jacobi [n] [m]` in 0..24 (grids without an interior included); steps small.
    check_example("jacobi", jacobi_lib, min_value=-100, max_value=100, max_size=24,
                  ranges={"steps": (0, 6)}, settings=FEW)


def test_saxpy_length_mismatch(saxpy_lib, pf):
    with pytest.raises(pf.FutharkError, match="invalid sizes"):
        saxpy_lib.saxpy(f32(1), np.zeros(3, f32), np.zeros(4, f32))


def test_dot(dot_lib):
    check_example("dot", dot_lib, min_value=-1e3, max_value=1e3, max_size=300)
    assert isinstance(dot_lib.dot(np.ones(3, f32), np.ones(3, f32)), np.float32)  # a NumPy scalar


def test_dot_f64(dot_lib):
    check_example("dot_f64", dot_lib, min_value=-1e6, max_value=1e6, max_size=300)
    assert isinstance(dot_lib.dot_f64(np.ones(3), np.ones(3)), np.float64)


def test_sum(dot_lib):
    check_example("sum", dot_lib, min_value=-1e3, max_value=1e3, max_size=300)
    assert isinstance(dot_lib.sum(np.ones(3, f32)), np.float32)


def test_dot_and_sum_exact_on_integers(dot_lib):
    # |products| <= 1e4 and |partial sums| <= 1e7 < 2**24: every order of summation is exact, so
    # a dropped or doubled element cannot hide inside the worst-case tolerance: ulps=0 (exact).
    ints = st.integers(-100, 100).map(float)
    exact = dict(tolerance=Tolerance(ulps=0, check_dtype=True), settings=SETTINGS)
    check_against(lambda xs, ys: f32(int(np.dot(xs.astype(np.int64), ys.astype(np.int64)))), dot_lib.dot,
                  inputs=InputOptions(max_size=1000, elements={"xs": ints, "ys": ints}), **exact)
    check_against(lambda xs: f32(int(xs.astype(np.int64).sum())), dot_lib.sum,
                  inputs=InputOptions(max_size=1000, elements={"xs": ints}), **exact)


def test_dot_length_mismatch(dot_lib, pf):
    with pytest.raises(pf.FutharkError, match="invalid sizes"):
        dot_lib.dot(np.zeros(3, f32), np.zeros(2, f32))


# ------------------------------------------------------------------------------------------------
# stats (a record)
# ------------------------------------------------------------------------------------------------


def test_stats(stats_lib):
    # The catalog's rule bounds each field; for n = 0 it wants sum exactly 0 and NaN mean and std.
    check_example("stats", stats_lib, min_value=-1e6, max_value=1e6, max_size=300)

    # And std against np.std, a reference independent of the catalog's:
    # |got - np.std| <= 1e-9*|np.std| + 1e-9*(1 + max|x|) (the input-dependent absolute part is
    # given through reduction=, which takes the allowed error as a function of the inputs).
    def std(xs):
        r = stats_lib.stats(xs)
        try:
            return to_numpy(r)["std"]
        finally:
            r.free()

    check_against(np.std, std, signature="entry std [n] (xs: [n]f64) : f64",
                  inputs=InputOptions(min_size=1, max_size=300, min_value=-1e6, max_value=1e6),
                  tolerance=Tolerance(rtol=1e-9, reduction=lambda xs: 1e-9 * (1 + np.abs(xs).max())),
                  settings=SETTINGS)


def test_stats_is_population_std(stats_lib):
    r = stats_lib.stats(np.array([1.0, 3.0]))
    assert (r.sum, r.mean, r.std) == (4.0, 2.0, 1.0)


# ------------------------------------------------------------------------------------------------
# scans
# ------------------------------------------------------------------------------------------------


def test_prefix_sum(scan_lib):
    check_example("prefix_sum", scan_lib, min_value=-1e3, max_value=1e3, max_size=500)


def test_prefix_sum_i64_wraps(scan_lib):
    # Values from all of i64: the sums wrap, on both sides alike (rule: exact).
    check_example("prefix_sum_i64", scan_lib, max_size=500)


# ------------------------------------------------------------------------------------------------
# matmul
# ------------------------------------------------------------------------------------------------


def test_matmul(matmul_lib):
    # n, m, p from `entry matmul [n] [m] [p] (a: [n][m]f32) (b: [m][p]f32)`, each in 0..24.
    check_example("matmul", matmul_lib, min_value=-100, max_value=100, max_size=24)


def test_matmul_identity_and_mismatch(matmul_lib, pf):
    a = np.random.default_rng(0).standard_normal((5, 7)).astype(f32)
    np.testing.assert_array_equal(matmul_lib.matmul(a, np.eye(7, dtype=f32)).numpy(), a)
    with pytest.raises(pf.FutharkError, match="invalid sizes"):
        matmul_lib.matmul(a, np.zeros((6, 2), f32))


# ------------------------------------------------------------------------------------------------
# histogram
# ------------------------------------------------------------------------------------------------


def test_histogram(histogram_lib):
    # nbins sizes the result ([nbins]i32), so it is drawn like a size; values mostly near the bins
    # (both sides of [0, nbins)), sometimes anywhere in i32.
    check_example(
        "histogram", histogram_lib,
        ranges={"nbins": (0, 300), "n": (0, 1000)},
        elements={"xs": st.one_of(st.integers(-20, 320), elements(np.int32))},
    )


def test_histogram_ignores_out_of_range(histogram_lib):
    xs = np.array([-1, 0, 3, 4, 2**31 - 1, -(2**31), 3], np.int32)
    np.testing.assert_array_equal(histogram_lib.histogram(np.int64(4), xs).numpy(), [1, 0, 0, 2])


# ------------------------------------------------------------------------------------------------
# mandelbrot
# ------------------------------------------------------------------------------------------------


def test_mandelbrot(mandelbrot_lib):
    # w and h size the result ([h][w]i32): drawn like sizes, in 0..40.
    check_example(
        "mandelbrot", mandelbrot_lib,
        ranges={"w": (0, 40), "h": (0, 40), "x0": (-2.5, 1.0), "y0": (-1.5, 1.5),
                "dx": (-0.125, 0.125), "dy": (-0.125, 0.125), "max_iter": (-2, 100)},
        settings=FEW,
    )


def test_mandelbrot_known_points(mandelbrot_lib):
    # One row of pixels at c = -2, -1, 0, 1, 2, 3 (+0i): in the set (-2 stays at |z|^2 == 4),
    # in, in, escapes at 3 (0, 1, 2, 5), at 2 (0, 2, 6), at 1.
    row = mandelbrot_lib.mandelbrot(np.int64(6), np.int64(1), f32(-2), f32(0), f32(1), f32(0),
                                    np.int32(50)).numpy()
    np.testing.assert_array_equal(row, [[50, 50, 50, 3, 2, 1]])


# ------------------------------------------------------------------------------------------------
# chains
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", E.CHAIN_LENGTHS)
def test_chain(chain_lib, n):
    check_example(f"chain{n}", chain_lib, min_value=-100, max_value=100, max_size=200, settings=FEW)


# ------------------------------------------------------------------------------------------------
# runtime errors
# ------------------------------------------------------------------------------------------------


def test_index_at(bounds_lib):
    check_example(
        "index_at", bounds_lib, demo_sizes=(1, 1000), min_size=1, max_size=50, min_value=-1e3, max_value=1e3,
        values={"i": lambda s: st.integers(0, s["xs[0]"] - 1).map(np.int64)},
    )


def test_index_at_fails_exactly_out_of_bounds(bounds_lib, pf):
    # Where the reference raises (i outside [0, n), n = 0 included), the entry point must fail
    # Futhark's bounds check with a ProgramError, and nowhere else.
    check_example(
        "index_at", bounds_lib, demo_sizes=(1, 1000), max_size=50, min_value=-1e3, max_value=1e3,
        values={"i": lambda s: st.one_of(
            st.integers(-3, s["xs[0]"] + 3), st.sampled_from([2**40, -(2**40), 2**63 - 1, -(2**63)])
        ).map(np.int64)},
        errors=pf.ProgramError, error_match=re.escape(E.get("index_at").error_substring),
        examples=demo_examples("index_at", (1, 1000), bad=True),
    )


@pytest.mark.parametrize("i", [4, 10, -1, 2**40])
def test_index_at_out_of_bounds(bounds_lib, pf, i):
    xs = np.arange(4, dtype=f32)
    with pytest.raises(pf.ProgramError) as info:
        bounds_lib.index_at(xs, np.int64(i))
    assert "out of bounds" in str(info.value)
    assert isinstance(info.value, pf.FutharkError)
    assert bounds_lib.index_at(xs, np.int64(2)) == f32(2)  # the context still works


def test_checked_sqrt(bounds_lib):
    check_example("checked_sqrt", bounds_lib, demo_sizes=(1, 1000), ranges={"x": (0, 1e300)}, allow_subnormal=True)


def test_checked_sqrt_fails_exactly_below_zero(bounds_lib, pf):
    # Any f64 (NaN, infinities and subnormals too): the assertion fails iff not x >= 0.
    check_example(
        "checked_sqrt", bounds_lib, demo_sizes=(1, 1000),
        allow_nan=True, allow_infinity=True, allow_subnormal=True,
        errors=pf.ProgramError, error_match=re.escape(E.get("checked_sqrt").error_substring),
        examples=[*demo_examples("checked_sqrt", (1, 1000), bad=True),
                  *({"x": np.float64(x)} for x in (-1.0, -1e-300, -math.inf, math.nan, -0.0, math.inf))],
    )


@pytest.mark.parametrize("x", [-1.0, -1e-300, -math.inf, math.nan])
def test_checked_sqrt_assertion(bounds_lib, pf, x):
    with pytest.raises(pf.ProgramError, match="Assertion is false"):
        bounds_lib.checked_sqrt(np.float64(x))
    assert bounds_lib.checked_sqrt(np.float64(4.0)) == 2.0


# ------------------------------------------------------------------------------------------------
# handle lifecycles (pybridge.testing.handle_lifecycle_machine) on every program
# ------------------------------------------------------------------------------------------------

#: The futhark/ programs of the catalog (each has a module-scoped ``<prog>_lib`` fixture above).
PROGRAMS = sorted({E.get(n).source("futhark").library for n in FUTHARK_EXAMPLES})
# Integer scalars are sizes or iteration counts: keep mandelbrot's loop short.
LIFECYCLE_RANGES = {"mandelbrot": {"mandelbrot.max_iter": (0, 16)}}


@pytest.mark.parametrize("prog", PROGRAMS)
def test_handle_lifecycle(prog, backend, request):
    """Create, read, index, pass, free and misuse handles of every array type against a model;
    afterwards pybridge holds exactly the values it held before (real Futhark has no live-value
    counter, so the context's own registry is what is checked)."""
    import gc

    from hypothesis.stateful import run_state_machine_as_test

    from pybridge.testing import handle_lifecycle_machine

    lib = request.getfixturevalue(f"{prog}_lib")
    before = lib.context.live_values
    machine = handle_lifecycle_machine(lib, max_size=6, ranges=LIFECYCLE_RANGES.get(prog))
    run_state_machine_as_test(
        machine, settings=settings(SETTINGS, max_examples=15, stateful_step_count=15, database=None)
    )
    gc.collect()
    assert lib.context.live_values == before, f"{lib.context.live_values - before} handle(s) left registered"
