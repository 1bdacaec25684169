"""The programs in futhark/*.fut, run through pybridge.futhark, against the NumPy references and
tolerance rules of the example catalog (pybridge/examples.py).

Each test needs ``build/futhark/<backend>/lib<prog>.so`` and skips, saying how to build it, where
it is missing (``make futhark FUTHARK_BACKEND=<backend>`` with the Futhark compiler on PATH).
Backends: c and multicore; cuda as well, marked ``gpu``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pybridge import examples as E
from pybridge.paths import find_build_file

pytestmark = pytest.mark.futhark

BACKENDS = [
    pytest.param("c", id="c"),
    pytest.param("multicore", id="multicore"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]

# Module-scoped fixtures feed @given tests; that is safe here (a library is not per-example state).
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])

f32 = np.float32


# ------------------------------------------------------------------------------------------------
# libraries
# ------------------------------------------------------------------------------------------------


def _load_or_skip(prog: str, backend: str):
    rel = f"futhark/{backend}/lib{prog}.so"
    if find_build_file(rel) is None:
        pytest.skip(
            f"build/{rel} not built: run `make futhark FUTHARK_BACKEND={backend}` with the Futhark "
            f"compiler on PATH (or make FUTHARK=/path/to/futhark)"
        )
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
chain_lib = _program("chain")
bounds_lib = _program("bounds")

LIB_FIXTURES = {
    "saxpy": "saxpy_lib", "dot": "dot_lib", "stats": "stats_lib", "scan": "scan_lib",
    "matmul": "matmul_lib", "histogram": "histogram_lib", "mandelbrot": "mandelbrot_lib",
    "chain": "chain_lib", "bounds": "bounds_lib",
}


@pytest.fixture(scope="module")
def pf():
    import pybridge.futhark as pf

    return pf


def run(lib, name: str, *args):
    """Call the example's Futhark entry point and check the result against the catalog."""
    ex = E.get(name)
    src = ex.source("futhark")
    out = getattr(lib, src.entry)(*args)
    result = ex.check(args, out, source=src)
    assert result.ok, f"{name}{tuple(np.shape(a) for a in args)}: {result.message}"
    return out


# ------------------------------------------------------------------------------------------------
# strategies
# ------------------------------------------------------------------------------------------------


def floats32(lo=-1e3, hi=1e3):
    return st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False)


def f32_vec(max_size=300, lo=-1e3, hi=1e3):
    return hnp.arrays(np.float32, st.integers(0, max_size), elements=floats32(lo, hi))


@st.composite
def same_length(draw, dtype, elements, max_size=300):
    n = draw(st.integers(0, max_size))
    return draw(hnp.arrays(dtype, n, elements=elements)), draw(hnp.arrays(dtype, n, elements=elements))


# ------------------------------------------------------------------------------------------------
# every catalogued entry point on its demo inputs
# ------------------------------------------------------------------------------------------------

FUTHARK_EXAMPLES = [n for n, e in E.EXAMPLES.items() if e.source("futhark") is not None]


@pytest.mark.parametrize("name", FUTHARK_EXAMPLES)
def test_demo_inputs(name, backend, request):
    ex = E.get(name)
    lib = request.getfixturevalue(LIB_FIXTURES[ex.source("futhark").library])
    for size in (0, 1, 1000, 65_536) if name not in ("checked_sqrt", "index_at") else (1, 1000):
        run(lib, name, *ex.inputs(size=size, seed=size))


# ------------------------------------------------------------------------------------------------
# saxpy, dot, sum
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(a=floats32(), xy=same_length(np.float32, floats32()))
def test_saxpy(saxpy_lib, a, xy):
    out = run(saxpy_lib, "saxpy", f32(a), *xy)
    assert out.shape == xy[0].shape


def test_saxpy_length_mismatch(saxpy_lib, pf):
    with pytest.raises(pf.FutharkError, match="invalid sizes"):
        saxpy_lib.saxpy(f32(1), np.zeros(3, f32), np.zeros(4, f32))


@SETTINGS
@given(xy=same_length(np.float32, floats32()))
def test_dot(dot_lib, xy):
    out = run(dot_lib, "dot", *xy)
    assert isinstance(out, np.float32)


@SETTINGS
@given(xy=same_length(np.float64, st.floats(-1e6, 1e6)))
def test_dot_f64(dot_lib, xy):
    out = run(dot_lib, "dot_f64", *xy)
    assert isinstance(out, np.float64)


@SETTINGS
@given(xs=f32_vec())
def test_sum(dot_lib, xs):
    run(dot_lib, "sum", xs)


@SETTINGS
@given(xy=same_length(np.float32, st.integers(-100, 100).map(float), max_size=1000))
def test_dot_and_sum_exact_on_integers(dot_lib, xy):
    # |products| <= 1e4 and |partial sums| <= 1e7 < 2**24: every order of summation is exact, so
    # a dropped or doubled element cannot hide inside the worst-case tolerance.
    xs, ys = xy
    exact_dot = f32(int(np.dot(xs.astype(np.int64), ys.astype(np.int64))))
    assert dot_lib.dot(xs, ys) == exact_dot
    assert dot_lib.sum(xs) == f32(int(xs.astype(np.int64).sum()))


def test_dot_length_mismatch(dot_lib, pf):
    with pytest.raises(pf.FutharkError, match="invalid sizes"):
        dot_lib.dot(np.zeros(3, f32), np.zeros(2, f32))


# ------------------------------------------------------------------------------------------------
# stats (a record)
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(xs=hnp.arrays(np.float64, st.integers(0, 300), elements=st.floats(-1e6, 1e6)))
def test_stats(stats_lib, xs):
    r = run(stats_lib, "stats", xs)
    if xs.size:
        np.testing.assert_allclose(r.std, np.std(xs), rtol=1e-9, atol=1e-9 * (1 + np.abs(xs).max()))
    else:
        assert r.sum == 0 and math.isnan(r.mean) and math.isnan(r.std)


def test_stats_is_population_std(stats_lib):
    r = stats_lib.stats(np.array([1.0, 3.0]))
    assert (r.sum, r.mean, r.std) == (4.0, 2.0, 1.0)


# ------------------------------------------------------------------------------------------------
# scans
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(xs=f32_vec(max_size=500))
def test_prefix_sum(scan_lib, xs):
    out = run(scan_lib, "prefix_sum", xs)
    assert out.shape == xs.shape


@SETTINGS
@given(xs=hnp.arrays(np.int64, st.integers(0, 500)))
def test_prefix_sum_i64_wraps(scan_lib, xs):
    run(scan_lib, "prefix_sum_i64", xs)


# ------------------------------------------------------------------------------------------------
# matmul
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(dims=st.tuples(st.integers(0, 24), st.integers(0, 24), st.integers(0, 24)), data=st.data())
def test_matmul(matmul_lib, dims, data):
    n, m, p = dims
    a = data.draw(hnp.arrays(np.float32, (n, m), elements=floats32(-100, 100)))
    b = data.draw(hnp.arrays(np.float32, (m, p), elements=floats32(-100, 100)))
    out = run(matmul_lib, "matmul", a, b)
    assert out.shape == (n, p)


def test_matmul_identity_and_mismatch(matmul_lib, pf):
    a = np.random.default_rng(0).standard_normal((5, 7)).astype(f32)
    np.testing.assert_array_equal(matmul_lib.matmul(a, np.eye(7, dtype=f32)).numpy(), a)
    with pytest.raises(pf.FutharkError, match="invalid sizes"):
        matmul_lib.matmul(a, np.zeros((6, 2), f32))


# ------------------------------------------------------------------------------------------------
# histogram
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(
    nbins=st.integers(0, 300),
    xs=hnp.arrays(
        np.int32, st.integers(0, 1000),
        elements=st.one_of(st.integers(-20, 320), st.integers(-(2**31), 2**31 - 1)),
    ),
)
def test_histogram(histogram_lib, nbins, xs):
    out = run(histogram_lib, "histogram", np.int64(nbins), xs)
    assert out.shape == (nbins,)


def test_histogram_ignores_out_of_range(histogram_lib):
    xs = np.array([-1, 0, 3, 4, 2**31 - 1, -(2**31), 3], np.int32)
    np.testing.assert_array_equal(histogram_lib.histogram(np.int64(4), xs).numpy(), [1, 0, 0, 2])


# ------------------------------------------------------------------------------------------------
# mandelbrot
# ------------------------------------------------------------------------------------------------


@FEW
@given(
    w=st.integers(0, 40), h=st.integers(0, 40),
    x0=floats32(-2.5, 1.0), y0=floats32(-1.5, 1.5),
    dx=floats32(-0.125, 0.125), dy=floats32(-0.125, 0.125),
    max_iter=st.integers(-2, 100),
)
def test_mandelbrot(mandelbrot_lib, w, h, x0, y0, dx, dy, max_iter):
    out = run(mandelbrot_lib, "mandelbrot", np.int64(w), np.int64(h), f32(x0), f32(y0), f32(dx),
              f32(dy), np.int32(max_iter))
    assert out.shape == (h, w)


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
    @FEW
    @given(xs=f32_vec(max_size=200, lo=-100, hi=100))
    def check(xs):
        run(chain_lib, f"chain{n}", xs)

    check()


# ------------------------------------------------------------------------------------------------
# runtime errors
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def test_index_at(bounds_lib, data):
    xs = data.draw(f32_vec(max_size=50))
    assume(xs.size > 0)
    i = data.draw(st.integers(0, xs.size - 1))
    run(bounds_lib, "index_at", xs, np.int64(i))


@pytest.mark.parametrize("i", [4, 10, -1, 2**40])
def test_index_at_out_of_bounds(bounds_lib, pf, i):
    xs = np.arange(4, dtype=f32)
    with pytest.raises(pf.ProgramError) as info:
        bounds_lib.index_at(xs, np.int64(i))
    assert "out of bounds" in str(info.value)
    assert isinstance(info.value, pf.FutharkError)
    assert bounds_lib.index_at(xs, np.int64(2)) == f32(2)  # the context still works


@SETTINGS
@given(x=st.floats(0, 1e300))
def test_checked_sqrt(bounds_lib, x):
    run(bounds_lib, "checked_sqrt", np.float64(x))


@pytest.mark.parametrize("x", [-1.0, -1e-300, -math.inf, math.nan])
def test_checked_sqrt_assertion(bounds_lib, pf, x):
    with pytest.raises(pf.ProgramError, match="Assertion is false"):
        bounds_lib.checked_sqrt(np.float64(x))
    assert bounds_lib.checked_sqrt(np.float64(4.0)) == 2.0
