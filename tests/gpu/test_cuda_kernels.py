"""Every kernel of kernels_cu/ against NumPy, property-tested with hypothesis, through each path:

* ``kernel``: the PyCUDA path (catalog.cuda_* -> checked Kernel launches), legacy default stream;
* ``stream``: the same on a non-blocking pybridge Stream;
* ``launcher``: the cffi-bound C host launchers of build/cuda/lib<mod>.so.

Sizes cover 0, 1, non-multiples of the block and tile sizes, and large explicit examples (2^24 + 3
elements, 2^26 + 5 for the scan). Tolerances, per operation, with eps = 2^-23 (float32 machine
epsilon, = 2u for the unit roundoff u = 2^-24):

* saxpy, chain, histogram, mandelbrot: exact. The float kernels round each multiply and add on
  its own (__fmul_rn/__fadd_rn), exactly like NumPy's float32 ufuncs, so results are bit-identical;
  histogram is integer counting.
* sum: any order of n-1 float additions is within gamma_{n-1} * sum|x| <= n * eps * sum|x| of the
  exact sum (Higham, Accuracy and Stability, eq. 4.4), compared with math.fsum (exact).
* scan: prefix i is a sum of i+1 terms by some addition tree, so the same bound per prefix:
  |out_i - S_i| <= (i+1) * eps * sum_{j<=i} |x_j| (exact S_i from float64 cumsum of float32 data).
* matmul: each c_ij is a length-k dot product accumulated with fmaf, within
  gamma_k * sum_l |a_il||b_lj| <= k * eps * (|A| @ |B|)_ij of the exact value.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest
from cuda_gpu_support import EPS32, Big, first_mismatch, materialize, require_cuda
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

pytestmark = pytest.mark.gpu

GPU_SETTINGS = settings(
    max_examples=int(os.environ.get("PYBRIDGE_GPU_EXAMPLES", "40")),  # per test and path, plus the @examples
    deadline=None,  # the first launch loads the module; device timing varies
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# Sizes around the block (256), scan tile (2048) and warp (32) boundaries, plus anything up to 5000.
SIZES = st.one_of(
    st.sampled_from([0, 1, 2, 31, 32, 33, 255, 256, 257, 1023, 1025, 2047, 2048, 2049, 4095, 4097]),
    st.integers(0, 5000),
)
ALL_F32 = st.floats(width=32)  # including NaN, inf, subnormals: the exact kernels must agree on all
PATHS = ["kernel", "stream", "launcher"]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def f32s(lo: float, hi: float) -> st.SearchStrategy[float]:
    # hypothesis wants float32-representable bounds for width=32 (1e-4 is not).
    lo32, hi32 = float(np.float32(lo)), float(np.float32(hi))
    return st.floats(min_value=lo32, max_value=hi32, width=32, allow_nan=False, allow_infinity=False)


@pytest.fixture(scope="module", autouse=True)
def _cuda() -> None:
    require_cuda()


_streams: dict[str, Any] = {}


def stream_for(path: str) -> Any:
    """None (legacy default stream) or a non-blocking pybridge Stream for the "stream" path."""
    if path != "stream":
        return None
    if "s" not in _streams:
        from pybridge.cuda import Stream

        _streams["s"] = Stream(non_blocking=True)
    return _streams["s"]


def launchers(module: str) -> Any:
    from pybridge.cuda import load_launchers

    return load_launchers(module)


def dev(a: np.ndarray) -> Any:
    from pybridge.cuda import to_device

    return to_device(a)


def empty(shape: Any, dtype: Any = np.float32) -> Any:
    from pybridge.cuda import empty as _empty

    return _empty(shape, dtype)


# ------------------------------------------------------------------------------------- saxpy


def run_saxpy(path: str, a: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from pybridge.cuda import catalog

    xd, yd = dev(x), dev(y)
    if path == "launcher":
        out = empty(x.size)
        launchers("saxpy").launch_saxpy(a, xd, yd, out, x.size)
    else:
        out = catalog.cuda_saxpy(a, xd, yd, stream=stream_for(path))
    return out.get()


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(a=ALL_F32, x=arrays(np.float32, SIZES, elements=ALL_F32), seed=st.integers(0, 2**32 - 1))
@example(a=2.5, x=Big(2**24 + 3, 1), seed=2)
@example(a=-0.0, x=np.zeros(0, np.float32), seed=0)
def test_saxpy_exact(path: str, a: float, x: Any, seed: int) -> None:
    from pybridge.cuda.catalog import reference_saxpy

    xs = materialize(x)
    ys = Big(xs.size, seed).floats()
    got = run_saxpy(path, a, xs, ys)
    want = reference_saxpy(a, xs, ys)
    assert np.array_equal(got, want, equal_nan=True), f"saxpy a={a!r} n={xs.size}: {first_mismatch(got, want)}"


# ------------------------------------------------------------------------------------- sum


def run_sum(path: str, x: np.ndarray) -> np.float32:
    from pybridge.cuda import catalog

    xd = dev(x)
    if path == "launcher":
        out = empty(1)
        scratch = empty(catalog.sum_num_partials(x.size))
        launchers("reduce").launch_sum(xd, out, x.size, scratch)
    else:
        out = catalog.cuda_sum(xd, stream=stream_for(path))
    return out.get()[0]


def check_sum(got: float, x: np.ndarray) -> None:
    from pybridge.cuda.catalog import reference_sum

    exact = reference_sum(x)
    bound = x.size * EPS32 * float(np.abs(x.astype(np.float64)).sum())
    err = abs(float(got) - exact)
    assert err <= bound, f"sum of n={x.size}: got {got!r}, exact {exact!r}, |err| {err:.3g} > bound {bound:.3g}"


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(x=arrays(np.float32, SIZES, elements=f32s(-1e4, 1e4)))
@example(x=Big(2**24 + 3, 7))
@example(x=np.array([1e8, 1.0, -1e8], np.float32))
def test_sum_accuracy(path: str, x: Any) -> None:
    xs = materialize(x)
    got = run_sum(path, xs)
    if xs.size == 0:
        assert got == 0.0
    check_sum(got, xs)


def test_sum_is_deterministic() -> None:
    """Same input => same bits, run after run, stream after stream, kernel or launcher."""
    from pybridge.cuda import Stream, catalog

    x = Big(2**24 + 3, 11).floats(scale=100.0)
    xd = dev(x)
    runs = [catalog.cuda_sum(xd).get() for _ in range(5)]
    s = Stream(non_blocking=True)
    runs += [catalog.cuda_sum(xd, stream=s).get() for _ in range(2)]
    out, scratch = empty(1), empty(catalog.sum_num_partials(x.size))
    launchers("reduce").launch_sum(xd, out, x.size, scratch)
    runs.append(out.get())
    bits = {int(r.view(np.uint32)[0]) for r in runs}
    assert len(bits) == 1, f"the sum differed between runs: {[float(r[0]) for r in runs]}"
    check_sum(runs[0][0], x)


# ------------------------------------------------------------------------------------- scan


def run_scan(path: str, x: np.ndarray, inplace: bool) -> np.ndarray:
    from pybridge.cuda import catalog

    xd = dev(x)
    if path == "launcher":
        out = xd if inplace else empty(x.size)
        launchers("scan").launch_scan(xd, out, x.size, empty(catalog.scan_num_tiles(x.size)))
    else:
        out = catalog.cuda_scan(xd, out=xd if inplace else None, stream=stream_for(path))
    return out.get()


def check_scan(got: np.ndarray, x: np.ndarray) -> None:
    x64 = x.astype(np.float64)
    exact = np.cumsum(x64)
    bound = np.arange(1, x.size + 1, dtype=np.float64) * EPS32 * np.cumsum(np.abs(x64))
    err = np.abs(got.astype(np.float64) - exact)
    bad = np.flatnonzero(err > bound)
    assert got.shape == x.shape
    assert bad.size == 0, (
        f"scan n={x.size}: {bad.size} prefixes outside (i+1)*eps*sum|x|; first i={bad[0]}: got {got[bad[0]]!r}, "
        f"exact {exact[bad[0]]!r}, bound {bound[bad[0]]:.3g}"
    )


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(x=arrays(np.float32, SIZES, elements=f32s(-100, 100)), inplace=st.booleans())
@example(x=Big(2**24 + 3, 5), inplace=False)
@example(x=Big(2**26 + 5, 6), inplace=True)  # > 2^26: 32769 tiles, 9 chunks in scan_block_sums
def test_scan_accuracy(path: str, x: Any, inplace: bool) -> None:
    xs = materialize(x)
    check_scan(run_scan(path, xs, inplace), xs)


# ------------------------------------------------------------------------------------- matmul


def run_matmul(path: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from pybridge.cuda import catalog

    ad, bd = dev(a), dev(b)
    m, k = a.shape
    n = b.shape[1]
    if path == "launcher":
        c = empty((m, n))
        launchers("matmul").launch_matmul(ad, bd, c, m, n, k)
    else:
        c = catalog.cuda_matmul(ad, bd, stream=stream_for(path))
    return c.get()


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(m=st.integers(0, 150), n=st.integers(0, 150), k=st.integers(0, 150), seed=st.integers(0, 2**32 - 1))
@example(m=1, n=1, k=1, seed=0)
@example(m=64, n=64, k=16, seed=1)  # exactly one tile
@example(m=65, n=63, k=17, seed=2)  # one past / short of the tile edges
@example(m=3, n=4, k=0, seed=3)  # empty inner dimension: C = 0
@example(m=1031, n=1029, k=515, seed=4)
def test_matmul_accuracy(path: str, m: int, n: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-2, 2, (m, k)).astype(np.float32)
    b = rng.uniform(-2, 2, (k, n)).astype(np.float32)
    got = run_matmul(path, a, b).astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = a64 @ b64
    bound = k * EPS32 * (np.abs(a64) @ np.abs(b64))
    err = np.abs(got - exact)
    bad = np.argwhere(err > bound)
    assert got.shape == (m, n)
    assert bad.size == 0, (
        f"matmul {m}x{k} @ {k}x{n}: {len(bad)} elements outside k*eps*(|A||B|); first {tuple(bad[0])}: "
        f"got {got[tuple(bad[0])]!r}, exact {exact[tuple(bad[0])]!r}"
    )


# ------------------------------------------------------------------------------------- histogram


def run_histogram(path: str, x: np.ndarray, nbins: int) -> np.ndarray:
    from pybridge.cuda import catalog

    xd = dev(x)
    if path == "launcher":
        bins = empty(nbins, np.int32)
        launchers("histogram").launch_histogram(xd, bins, x.size, nbins)
    else:
        bins = catalog.cuda_histogram(xd, nbins, stream=stream_for(path))
    return bins.get()


HIST_VALUES = st.one_of(st.integers(-3, 700), st.sampled_from([INT32_MIN, INT32_MAX, -1]))
# 12288 bins = 48 KiB fit in default shared memory; 12289 and 20000 need the launcher's opt-in
# (Python path: global atomics); 70000 bins exceed any shared memory (both: global atomics).
NBINS = st.one_of(st.sampled_from([0, 1, 2, 255, 256, 257, 12288, 12289, 20000, 70000]), st.integers(0, 800))


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(x=arrays(np.int32, SIZES, elements=HIST_VALUES), nbins=NBINS)
@example(x=Big(2**24 + 3, 5, "ints"), nbins=256)
@example(x=Big(2**24 + 3, 6, "ints"), nbins=70000)
def test_histogram_exact(path: str, x: Any, nbins: int) -> None:
    from pybridge.cuda.catalog import reference_histogram

    xs = x.ints(-5, 300 if nbins <= 256 else nbins + 5) if isinstance(x, Big) else x
    got = run_histogram(path, xs, nbins)
    want = reference_histogram(xs, nbins)
    assert np.array_equal(got, want), f"histogram n={xs.size} nbins={nbins}: {first_mismatch(got, want)}"


# ------------------------------------------------------------------------------------- mandelbrot


def run_mandelbrot(path: str, *args: Any) -> np.ndarray:
    from pybridge.cuda import catalog

    w, h = args[0], args[1]
    if path == "launcher":
        out = empty((h, w), np.int32)
        launchers("mandelbrot").launch_mandelbrot(out, *args)
    else:
        out = catalog.cuda_mandelbrot(*args, stream=stream_for(path))
    return out.get()


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(
    w=st.integers(0, 70), h=st.integers(0, 70), x0=f32s(-2.5, 1.0), y0=f32s(-1.5, 1.5),
    dx=f32s(1e-4, 0.1), dy=f32s(1e-4, 0.1), max_iter=st.integers(0, 300),
)
@example(w=4099, h=1031, x0=-2.0, y0=-1.25, dx=2.5 / 4099, dy=2.5 / 1031, max_iter=64)
@example(w=1, h=1, x0=-0.75, y0=0.1, dx=0.0, dy=0.0, max_iter=1000)
@example(w=17, h=0, x0=0.0, y0=0.0, dx=0.1, dy=0.1, max_iter=10)
def test_mandelbrot_exact(path: str, w: int, h: int, x0: float, y0: float, dx: float, dy: float,
                          max_iter: int) -> None:
    from pybridge.cuda.catalog import reference_mandelbrot

    got = run_mandelbrot(path, w, h, x0, y0, dx, dy, max_iter)
    want = reference_mandelbrot(w, h, x0, y0, dx, dy, max_iter)
    assert np.array_equal(got, want), f"mandelbrot {h}x{w} max_iter={max_iter}: {first_mismatch(got, want)}"


# ------------------------------------------------------------------------------------- chain


def run_chain(path: str, x: np.ndarray, nops: int, fused: bool) -> np.ndarray:
    from pybridge.cuda import catalog

    xd = dev(x)
    if path == "launcher":
        lib = launchers("chain")
        out = empty(x.size)
        if fused:
            lib.launch_chain(xd, out, x.size, nops)
        elif nops == 0:
            lib.launch_chain(xd, out, x.size, 0)
        else:
            lib.launch_chain_step(xd, out, x.size, 1)
            for k in range(2, nops + 1):
                lib.launch_chain_step(out, out, x.size, k)
    else:
        run = catalog.cuda_chain if fused else catalog.cuda_chain_unfused
        out = run(xd, nops, stream=stream_for(path))
    return out.get()


@pytest.mark.parametrize("path", PATHS)
@GPU_SETTINGS
@given(x=arrays(np.float32, SIZES, elements=ALL_F32), nops=st.integers(0, 40))
@example(x=Big(2**24 + 3, 9), nops=10)
def test_chain_fused_equals_unfused_equals_numpy(path: str, x: Any, nops: int) -> None:
    from pybridge.cuda.catalog import reference_chain

    xs = materialize(x)
    want = reference_chain(xs, nops)
    fused = run_chain(path, xs, nops, fused=True)
    unfused = run_chain(path, xs, nops, fused=False)
    assert np.array_equal(fused, want, equal_nan=True), f"fused chain nops={nops}: {first_mismatch(fused, want)}"
    assert np.array_equal(unfused, want, equal_nan=True), f"unfused chain nops={nops}: {first_mismatch(unfused, want)}"


# ------------------------------------------------------------------------------------- the Kernel API itself


def test_design_doc_kernel_api() -> None:
    """docs/DESIGN.md's example, on the default and on our own stream, cubin and PTX."""
    from pybridge import cuda

    n = 1000
    x = np.linspace(-1, 1, n, dtype=np.float32)
    y = np.full(n, 0.5, np.float32)
    want = np.float32(2.0) * x + y
    for prefer in ("auto", "ptx"):
        mod = cuda.load_module("saxpy", prefer=prefer)
        if prefer == "auto":
            cc = cuda.context.compute_capability()
            assert mod.kind == ("cubin" if cc[0] == 9 else "ptx"), (cc, mod)
        k = mod.kernel("saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
        xd, yd, out = cuda.to_device(x), cuda.to_device(y), cuda.empty(n)
        s = cuda.Stream()
        k(2.0, xd, yd, out, n, grid=cuda.grid_for(n, 256), block=256, stream=s)
        assert out.stream == s  # CAI consumers will wait for s
        assert np.array_equal(out.get(), want)
        out2 = cuda.empty(n)
        cuda.launch(None, cuda.LaunchConfig(grid=cuda.grid_for(n, 128), block=128), k, 2.0, xd, yd, out2, n)
        assert np.array_equal(out2.get(), want)
    assert k.max_threads_per_block >= 256 and k.num_regs > 0


def test_events_time_gpu_work() -> None:
    from pybridge import cuda

    x = cuda.to_device(Big(2**22).floats())
    s = cuda.Stream()
    start, end = cuda.Event(), cuda.Event()
    start.record(s)
    cuda.catalog.cuda_chain(x, 200, stream=s)
    end.record(s)
    end.synchronize()
    assert end.query() and s.query()
    ms = cuda.Event.elapsed_ms(start, end)
    assert 0.0 < ms < 10_000.0 and math.isfinite(ms)
