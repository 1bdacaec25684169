"""Every kernel of kernels_cu/ against NumPy, property-tested with pybridge.testing.check_against,
through each path:

* ``kernel``: the PyCUDA path (catalog.cuda_* -> checked Kernel launches), legacy default stream;
* ``stream``: the same on a non-blocking pybridge Stream;
* ``launcher``: the cffi-bound C host launchers of build/cuda/lib<mod>.so;

each wrapped with ``pybridge.testing.on_device`` (NumPy in, device arrays to the operation, results
read back); and the single-launch kernels once more as pybridge.cuda Kernel objects driven by the
toolkit's KernelTarget (test_kernel_object), on the default stream and on a Stream.

Inputs come from each operation's signature, written as a Futhark-style header (``[n]`` shared
between parameters; a scalar that sizes the result, such as ``nbins`` or ``w``/``h``, is drawn like
a size), or from the kernel's own declaration. Sizes cover 0, 1, non-multiples of the block and
tile sizes (``extra_sizes=``), and large explicit examples (2^24 + 3 elements, 2^26 + 5 for the
scan; ``examples=``). Tolerances, per operation, with eps = 2^-23 (float32 machine epsilon, = 2u
for the unit roundoff u = 2^-24):

* saxpy, chain, histogram, mandelbrot: exact (``ulps=0``: bit-identical up to the sign of zero,
  NaN matching NaN; integers are always compared exactly). The float kernels round each multiply
  and add on its own (__fmul_rn/__fadd_rn), exactly like NumPy's float32 ufuncs, so results are
  bit-identical; histogram is integer counting.
* sum: any order of n-1 float additions is within gamma_{n-1} * sum|x| <= n * eps * sum|x| of the
  exact sum (Higham, Accuracy and Stability, eq. 4.4), compared with math.fsum (exact): that is
  the toolkit's ``reduction=True`` (n * eps * sum|x| over the float inputs, eps of the float32
  result); for n = 0 the bound is 0, so an empty sum must be exactly 0.
* scan: prefix i is a sum of i+1 terms by some addition tree, so the same bound per prefix:
  |out_i - S_i| <= (i+1) * eps * sum_{j<=i} |x_j| (exact S_i from float64 cumsum of float32 data),
  given to ``reduction=`` as a function of the inputs.
* matmul: each c_ij is a length-k dot product accumulated with fmaf, within
  gamma_k * sum_l |a_il||b_lj| <= k * eps * (|A| @ |B|)_ij of the exact value (``reduction=``).
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable

import numpy as np
import pytest
from cuda_gpu_support import EPS32, Big, dense, normal_f32, require_cuda, uniform_f32
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pybridge.demo import catalog
from pybridge.demo import examples as E
from pybridge.testing import InputOptions, KernelTarget, Tolerance, check_against, on_device

pytestmark = pytest.mark.gpu

GPU_SETTINGS = settings(
    max_examples=int(os.environ.get("PYBRIDGE_GPU_EXAMPLES", "40")),  # per test and path, plus the examples
    deadline=None,  # the first launch loads the module; device timing varies
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    report_multiple_bugs=False,  # one minimal failure
)

# Sizes around the block (256), scan tile (8192) and warp (32) boundaries, plus anything up to 5000.
SIZE_EDGES = (0, 1, 2, 31, 32, 33, 255, 256, 257, 1023, 1025, 2047, 2048, 2049, 4095, 4097, 8191, 8193)
SIZES: dict[str, Any] = dict(max_size=5000, extra_sizes=SIZE_EDGES)  # InputOptions fields
# Every float32, NaN, infinities and subnormals included: the exact kernels must agree on all.
ALL_F32: dict[str, Any] = dict(allow_nan=True, allow_infinity=True, allow_subnormal=True)  # InputOptions fields
EXACT = Tolerance(ulps=0, equal_nan=True)
PATHS = ["kernel", "stream", "launcher"]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
f32 = np.float32
i32 = np.int32


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


def empty(shape: Any, dtype: Any = np.float32) -> Any:
    from pybridge.cuda import empty as _empty

    return _empty(shape, dtype)


def zeros(shape: Any, dtype: Any = np.float32) -> Any:
    from pybridge.cuda import zeros as _zeros

    return _zeros(shape, dtype)


def on_path(name: str, path: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a function of device arrays) taking and returning NumPy, named for the reports and
    for Hypothesis' example database (one per path)."""
    fn.__name__ = fn.__qualname__ = f"{name}[{path}]"
    return on_device(fn)


# ------------------------------------------------------------------------------------- saxpy


def saxpy_on(path: str) -> Callable[..., Any]:
    def run(a: Any, x: Any, y: Any) -> Any:
        if path == "launcher":
            out = empty(x.size)
            launchers("saxpy").launch_saxpy(a, x, y, out, x.size)
            return out
        return catalog.cuda_saxpy(a, x, y, stream=stream_for(path))

    return on_path("saxpy", path, run)


@pytest.mark.parametrize("path", PATHS)
def test_saxpy_exact(path: str) -> None:
    from pybridge.demo.examples import saxpy_reference as reference_saxpy

    big = 2**24 + 3
    check_against(
        reference_saxpy, saxpy_on(path),
        signature="entry saxpy [n] (a: f32) (x: [n]f32) (y: [n]f32) : [n]f32",
        # a, x: any float32; y: dense N(0, 1)
        inputs=InputOptions(**SIZES, **ALL_F32, values={"y": dense(lambda rng, s: normal_f32(rng, s["n"]))}),
        tolerance=EXACT,
        examples=[
            {"a": f32(2.5), "x": Big(big, 1).floats(), "y": Big(big, 2).floats()},
            {"a": f32(-0.0), "x": np.zeros(0, f32), "y": np.zeros(0, f32)},
        ],
        settings=GPU_SETTINGS,
    )


# ------------------------------------------------------------------------------------- sum


def sum_on(path: str) -> Callable[..., Any]:
    def run(x: Any) -> Any:
        if path == "launcher":
            out = empty(1)
            scratch = zeros(catalog.sum_scratch_floats(x.size))  # the ticket counter starts at 0
            launchers("reduce").launch_sum(x, out, x.size, scratch)
            return out
        return catalog.cuda_sum(x, stream=stream_for(path))

    return on_path("sum", path, run)


def exact_sum(x: np.ndarray) -> np.ndarray:
    """The sum (in f64, rounded once to f32), as the 1-element array the operation returns."""
    from pybridge.demo.examples import sum_reference

    return np.array([sum_reference(x)])


@pytest.mark.parametrize("path", PATHS)
def test_sum_accuracy(path: str) -> None:
    check_against(
        exact_sum, sum_on(path),
        signature="entry sum [n] (x: [n]f32) : [1]f32",
        inputs=InputOptions(**SIZES, min_value=-1e4, max_value=1e4, allow_subnormal=True),
        tolerance=Tolerance(reduction=True),  # n * eps32 * sum|x| (see the module docstring)
        examples=[{"x": Big(2**24 + 3, 7).floats()}, {"x": np.array([1e8, 1.0, -1e8], f32)}],
        settings=GPU_SETTINGS,
    )


def test_sum_is_deterministic() -> None:
    """Same input => same bits, run after run, stream after stream, kernel or launcher."""
    from pybridge.cuda import Stream, to_device
    from pybridge.testing import assert_close

    x = Big(2**24 + 3, 11).floats(scale=100.0)
    xd = to_device(x)
    runs = [catalog.cuda_sum(xd).get() for _ in range(5)]
    s = Stream(non_blocking=True)
    runs += [catalog.cuda_sum(xd, stream=s).get() for _ in range(2)]
    out, scratch = empty(1), zeros(catalog.sum_scratch_floats(x.size))
    for _ in range(3):  # each launch leaves the ticket counter at 0 for the next
        launchers("reduce").launch_sum(xd, out, x.size, scratch)
        runs.append(out.get())
    assert scratch.get().view(np.uint32)[0] == 0, "sum_single left its ticket counter set"
    bits = {int(r.view(np.uint32)[0]) for r in runs}
    assert len(bits) == 1, f"the sum differed between runs: {[float(r[0]) for r in runs]}"
    bound = x.size * EPS32 * float(np.abs(x.astype(np.float64)).sum())
    assert_close(runs[0], exact_sum(x), bound=bound, what="cuda_sum")


def _offset_view(buf: Any, offset: int, shape: tuple[int, ...]) -> Any:
    """A float32 C-contiguous view of ``shape`` starting ``offset`` elements into ``buf``: with
    offset % 4 != 0 it is not 16-byte aligned, so the kernels must take their scalar paths."""
    from pybridge.cuda import DeviceArray
    from pybridge.interop import ArrayInfo

    strides = tuple(4 * int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return DeviceArray(ArrayInfo(buf.ptr + 4 * offset, shape, strides, np.dtype(np.float32)), owner=buf)


def _unaligned(x: np.ndarray, offset: int) -> Any:
    """``x`` on the device at ``offset`` floats past an aligned allocation (NaN before it)."""
    from pybridge.cuda import to_device

    buf = to_device(np.concatenate([np.full(offset, np.nan, np.float32), x.ravel()]))
    return _offset_view(buf, offset, x.shape)


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_unaligned_arrays(offset: int) -> None:
    """The 16-byte paths fall back to scalar accesses for misaligned arrays, with the same results:
    saxpy exact, sum bit-identical to the aligned sum (its order does not depend on alignment),
    scan and matmul within their bounds; every output element written (outputs start as NaN)."""
    from pybridge.cuda import to_device
    from pybridge.testing import assert_close

    rng = np.random.default_rng(100 + offset)
    n = 3 * catalog.SCAN_TILE + 4 * 1024 + 5  # several scan tiles, a partial one, a tail past n % 4
    x = uniform_f32(rng, n, -1, 1)
    y = uniform_f32(rng, n, -1, 1)
    nan = np.full(n, np.nan, np.float32)
    xv, yv = _unaligned(x, offset), _unaligned(y, offset)

    for path in ("kernel", "launcher"):
        out = _unaligned(nan, offset)
        if path == "kernel":
            catalog.cuda_saxpy(2.5, xv, yv, out=out)
        else:
            launchers("saxpy").launch_saxpy(2.5, xv, yv, out, n)
        np.testing.assert_array_equal(out.get(), E.saxpy_reference(2.5, x, y))

        out = _unaligned(nan, offset)
        if path == "kernel":
            catalog.cuda_scan(xv, out=out)
        else:
            launchers("scan").launch_scan(xv, out, n, empty(catalog.scan_scratch_floats(n)))
        assert_close(out.get(), E.prefix_sum_reference(x), bound=scan_bound(x), what=f"unaligned scan [{path}]")

    aligned_sum = catalog.cuda_sum(to_device(x)).get()
    unaligned_sum = catalog.cuda_sum(xv).get()
    assert aligned_sum.view(np.uint32)[0] == unaligned_sum.view(np.uint32)[0], (aligned_sum, unaligned_sum)
    bound = n * EPS32 * float(np.abs(x.astype(np.float64)).sum())
    assert_close(unaligned_sum, exact_sum(x), bound=bound, what="unaligned sum")

    m, k, nn = 131, 64, 132  # k and n multiples of 4: only the alignment keeps the 16-byte path off
    a = uniform_f32(rng, (m, k), -2, 2)
    b = uniform_f32(rng, (k, nn), -2, 2)
    c = _unaligned(np.full((m, nn), np.nan, np.float32), offset)
    catalog.cuda_matmul(_unaligned(a, offset), _unaligned(b, offset), out=c)
    assert_close(c.get(), E.matmul_reference(a, b), bound=matmul_bound(a, b), what="unaligned matmul")


# ------------------------------------------------------------------------------------- scan


def scan_on(path: str) -> Callable[..., Any]:
    def run(x: Any, inplace: Any) -> Any:
        if path == "launcher":
            out = x if inplace else empty(x.size)
            launchers("scan").launch_scan(x, out, x.size, empty(catalog.scan_scratch_floats(x.size)))
            return out
        return catalog.cuda_scan(x, out=x if inplace else None, stream=stream_for(path))

    return on_path("scan", path, run)


def scan_bound(x: np.ndarray, inplace: Any = None) -> np.ndarray:
    """(i+1) * eps * sum_{j<=i} |x_j| for prefix i."""
    x64 = x.astype(np.float64)
    return np.arange(1, x.size + 1, dtype=np.float64) * EPS32 * np.cumsum(np.abs(x64))


@pytest.mark.parametrize("path", PATHS)
def test_scan_accuracy(path: str) -> None:
    from pybridge.demo.examples import prefix_sum_reference as reference_scan

    check_against(
        lambda x, inplace: reference_scan(x), scan_on(path),
        signature="entry scan [n] (x: [n]f32) (inplace: bool) : [n]f32",  # inplace: out = x
        inputs=InputOptions(**SIZES, min_value=-100, max_value=100, allow_subnormal=True),
        tolerance=Tolerance(reduction=scan_bound),
        examples=[
            {"x": Big(2**24 + 3, 5).floats(), "inplace": False},
            {"x": Big(2**26 + 5, 6).floats(), "inplace": True},  # > 2^26: 16385 tiles, long look-backs
        ],
        settings=GPU_SETTINGS,
    )


@pytest.mark.parametrize("grid", [1, 3, 64])
def test_scan_any_grid(grid: int) -> None:
    """A grid smaller than the number of tiles (blocks loop over tiles), even one block, gives the scan."""
    from pybridge import cuda
    from pybridge.testing import assert_close

    n = 37 * catalog.SCAN_TILE + 7
    x = uniform_f32(np.random.default_rng(grid), n, -1, 1)
    out = cuda.to_device(np.full(n, np.nan, np.float32))
    status = cuda.zeros(catalog.scan_num_tiles(n) + 1, np.uint64)
    catalog.get_kernel("scan", "scan_lookback")(cuda.to_device(x), out, n, status, grid=grid, block=catalog.SCAN_BLOCK)
    assert_close(out.get(), E.prefix_sum_reference(x), bound=scan_bound(x), what=f"scan, grid {grid}")


# ------------------------------------------------------------------------------------- matmul


def matmul_on(path: str) -> Callable[..., Any]:
    def run(a: Any, b: Any) -> Any:
        m, k = a.shape
        n = b.shape[1]
        if path == "launcher":
            c = empty((m, n))
            launchers("matmul").launch_matmul(a, b, c, m, n, k)
            return c
        return catalog.cuda_matmul(a, b, stream=stream_for(path))

    return on_path("matmul", path, run)


def matmul_bound(a: np.ndarray, b: np.ndarray, *_: Any) -> np.ndarray:
    """k * eps * (|A| @ |B|), per element of C."""
    return a.shape[1] * EPS32 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def matmul_example(m: int, n: int, k: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": uniform_f32(rng, (m, k), -2, 2), "b": uniform_f32(rng, (k, n), -2, 2)}


# The kernel's tiles: 128 x 128 of C, slices of 16 along k, 16-byte rows when k or n is a multiple of 4;
# primes and sizes around each boundary.
MATMUL_EDGES = (0, 1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 131)


@pytest.mark.parametrize("path", PATHS)
def test_matmul_accuracy(path: str) -> None:
    from pybridge.demo.examples import matmul_reference as reference_matmul

    check_against(
        reference_matmul, matmul_on(path),
        signature="entry matmul [m] [k] [n] (a: [m][k]f32) (b: [k][n]f32) : [m][n]f32",
        inputs=InputOptions(max_size=150, extra_sizes=MATMUL_EDGES, values={  # dense uniform(-2, 2) matrices
            "a": dense(lambda rng, s: uniform_f32(rng, (s["m"], s["k"]), -2, 2)),
            "b": dense(lambda rng, s: uniform_f32(rng, (s["k"], s["n"]), -2, 2)),
        }),
        tolerance=Tolerance(reduction=matmul_bound),
        examples=[
            matmul_example(1, 1, 1, 0),
            matmul_example(128, 128, 16, 1),  # exactly one tile
            matmul_example(129, 127, 17, 2),  # one past / short of the tile edges
            matmul_example(3, 4, 0, 3),  # empty inner dimension: C = 0
            matmul_example(1031, 1029, 515, 4),  # primes-ish, no dimension a multiple of 4
            matmul_example(1, 257, 1, 5),  # a row times a column
            matmul_example(257, 1, 263, 6),
            matmul_example(509, 521, 523, 7),  # primes
            matmul_example(2048, 2048, 2048, 8),  # a benchmark size: every tile full, 16-byte paths
            matmul_example(1000, 1004, 1012, 9),  # n, k multiples of 4, m not: vector loads, edge rows
        ],
        settings=GPU_SETTINGS,
    )


# ------------------------------------------------------------------------------------- histogram


def histogram_on(path: str) -> Callable[..., Any]:
    def run(x: Any, nbins: Any) -> Any:
        nbins = int(nbins)
        if path == "launcher":
            bins = empty(nbins, np.int32)
            launchers("histogram").launch_histogram(x, bins, x.size, nbins)
            return bins
        return catalog.cuda_histogram(x, nbins, stream=stream_for(path))

    return on_path("histogram", path, run)


HIST_VALUES = st.one_of(st.integers(-3, 700), st.sampled_from([INT32_MIN, INT32_MAX, -1]))
# 12288 bins = 48 KiB fit in default shared memory; 12289 and 20000 need the launcher's opt-in
# (Python path: global atomics); 70000 bins exceed any shared memory (both: global atomics).
NBINS_EDGES = (0, 1, 2, 255, 256, 257, 12288, 12289, 20000, 70000)


def histogram_example(n: int, seed: int, nbins: int) -> dict[str, Any]:
    return {"x": Big(n, seed, "ints").ints(-5, 300 if nbins <= 256 else nbins + 5), "nbins": i32(nbins)}


@pytest.mark.parametrize("path", PATHS)
def test_histogram_exact(path: str) -> None:
    check_against(
        lambda x, nbins: E.histogram_reference(nbins, x), histogram_on(path),
        signature="entry histogram [n] (x: [n]i32) (nbins: i32) : [nbins]i32",  # nbins: drawn like a size
        inputs=InputOptions(ranges={"n": (0, 5000), "nbins": (0, 800)}, extra_sizes={"n": SIZE_EDGES, "nbins": NBINS_EDGES},
                            elements={"x": HIST_VALUES}),
        examples=[histogram_example(2**24 + 3, 5, 256), histogram_example(2**24 + 3, 6, 70000)],
        settings=GPU_SETTINGS,
    )


# ------------------------------------------------------------------------------------- mandelbrot


def mandelbrot_on(path: str) -> Callable[..., Any]:
    def run(w: Any, h: Any, x0: Any, y0: Any, dx: Any, dy: Any, max_iter: Any) -> Any:
        args = (int(w), int(h), float(x0), float(y0), float(dx), float(dy), int(max_iter))
        if path == "launcher":
            out = empty((args[1], args[0]), np.int32)
            launchers("mandelbrot").launch_mandelbrot(out, *args)
            return out
        return catalog.cuda_mandelbrot(*args, stream=stream_for(path))

    return on_path("mandelbrot", path, run)


MANDELBROT_RANGES = {"w": (0, 70), "h": (0, 70), "x0": (-2.5, 1.0), "y0": (-1.5, 1.5),
                     "dx": (1e-4, 0.1), "dy": (1e-4, 0.1), "max_iter": (0, 300)}


def mandelbrot_example(w: int, h: int, x0: float, y0: float, dx: float, dy: float, max_iter: int) -> dict[str, Any]:
    return {"w": i32(w), "h": i32(h), "x0": f32(x0), "y0": f32(y0), "dx": f32(dx), "dy": f32(dy),
            "max_iter": i32(max_iter)}


@pytest.mark.parametrize("path", PATHS)
def test_mandelbrot_exact(path: str) -> None:
    def reference_mandelbrot(w: Any, h: Any, x0: Any, y0: Any, dx: Any, dy: Any, max_iter: Any) -> np.ndarray:
        return E.mandelbrot_reference(w, h, x0, y0, dx, dy, max_iter, nan_stops=False)  # the kernel's NaN rule

    check_against(
        reference_mandelbrot, mandelbrot_on(path),
        # w and h size the result: drawn like sizes, in 0..70
        signature="entry mandelbrot (w: i32) (h: i32) (x0: f32) (y0: f32) (dx: f32) (dy: f32) (max_iter: i32) : [h][w]i32",
        inputs=InputOptions(ranges=MANDELBROT_RANGES),
        examples=[
            mandelbrot_example(4099, 1031, -2.0, -1.25, 2.5 / 4099, 2.5 / 1031, 64),
            mandelbrot_example(1, 1, -0.75, 0.1, 0.0, 0.0, 1000),
            mandelbrot_example(17, 0, 0.0, 0.0, 0.1, 0.1, 10),
        ],
        settings=GPU_SETTINGS,
    )


# ------------------------------------------------------------------------------------- chain


def chain_on(path: str) -> Callable[..., Any]:
    """Both chains, (fused, unfused), on the same input."""
    def chain(x: Any, nops: int, fused: bool) -> Any:
        if path == "launcher":
            lib = launchers("chain")
            out = empty(x.size)
            if fused:
                lib.launch_chain(x, out, x.size, nops)
            elif nops == 0:
                lib.launch_chain(x, out, x.size, 0)
            else:
                lib.launch_chain_step(x, out, x.size, 1)
                for k in range(2, nops + 1):
                    lib.launch_chain_step(out, out, x.size, k)
            return out
        op = catalog.cuda_chain if fused else catalog.cuda_chain_unfused
        return op(x, nops, stream=stream_for(path))

    def run(x: Any, nops: Any) -> Any:
        return chain(x, int(nops), fused=True), chain(x, int(nops), fused=False)

    return on_path("chain", path, run)


@pytest.mark.parametrize("path", PATHS)
def test_chain_fused_equals_unfused_equals_numpy(path: str) -> None:
    from pybridge.demo.examples import chain_reference as reference_chain

    def reference(x: np.ndarray, nops: Any) -> tuple[np.ndarray, np.ndarray]:
        want = reference_chain(x, nops)
        return want, want  # result[0]: fused, result[1]: unfused

    check_against(
        reference, chain_on(path),
        signature="entry chain [n] (x: [n]f32) (nops: i32) : [n]f32",
        inputs=InputOptions(**SIZES, **ALL_F32, ranges={"nops": (0, 40)}), tolerance=EXACT,
        examples=[{"x": Big(2**24 + 3, 9).floats(), "nops": i32(10)}],
        settings=GPU_SETTINGS,
    )


# ------------------------------------------------------------------------------------- Kernel objects
# The single-launch kernels as pybridge.cuda Kernel objects, launched by the toolkit's KernelTarget:
# inputs from each kernel's declaration in pybridge.demo.catalog.MODULES (so ``n`` is the length of
# ``x[n]``, ``m*k`` that of ``a``), every non-const pointer random on entry and compared on exit.


def _chain_step_reference(x: np.ndarray, out: np.ndarray, n: Any, k: Any) -> np.ndarray:
    from pybridge.demo.examples import CHAIN_ADD, CHAIN_MUL

    return x * CHAIN_MUL + f32(k) * CHAIN_ADD  # (float)k is exact for |k| < 2^24


def _histogram_adds(x: np.ndarray, bins: np.ndarray, n: Any, nbins: Any) -> np.ndarray:
    return bins + E.histogram_reference(int(nbins), x)  # both kernels add to bins (the caller zeroes them)


def _kernel_cases() -> dict[str, tuple[str, str, Callable[..., Any], dict[str, Any], dict[str, Any]]]:
    """name -> (module, kernel, reference in parameter order, check_against options, KernelTarget
    launch options)."""
    histogram_options: dict[str, Any] = dict(
        ranges={"n": (0, 5000), "nbins": (0, 800), "bins": (-1000, 1000)}, elements={"x": HIST_VALUES},
    )
    return {
        "saxpy": ("saxpy", "saxpy", lambda a, x, y, out, n: E.saxpy_reference(a, x, y),
                  dict(inputs=InputOptions(**SIZES, **ALL_F32), tolerance=EXACT), {}),
        "chain": ("chain", "chain", lambda x, out, n, nops: E.chain_reference(x, nops),
                  dict(inputs=InputOptions(**SIZES, **ALL_F32, ranges={"nops": (0, 40)}), tolerance=EXACT), {}),
        "chain_step": ("chain", "chain_step", _chain_step_reference,
                       dict(inputs=InputOptions(**SIZES, **ALL_F32, ranges={"k": (-1000, 1000)}), tolerance=EXACT), {}),
        # 4*nbins bytes of dynamic shared memory: at most 48 KiB (12288 bins) without an opt-in
        "histogram": ("histogram", "histogram", _histogram_adds,
                      dict(inputs=InputOptions(**histogram_options,
                                               extra_sizes={"n": SIZE_EDGES, "nbins": (0, 1, 2, 255, 256, 257, 12288)})),
                      dict(shared_mem=lambda s: 4 * s["nbins"])),
        "histogram_global": ("histogram", "histogram_global", _histogram_adds,
                             dict(inputs=InputOptions(**histogram_options, extra_sizes={"n": SIZE_EDGES, "nbins": NBINS_EDGES})),
                             {}),
        "matmul": ("matmul", "matmul",
                   lambda a, b, c, m, n, k: E.matmul_reference(a.reshape(m, k), b.reshape(k, n)).ravel(),
                   dict(inputs=InputOptions(
                            max_size=150, extra_sizes=MATMUL_EDGES,
                            values={"a": dense(lambda rng, s: uniform_f32(rng, s["m"] * s["k"], -2, 2)),
                                    "b": dense(lambda rng, s: uniform_f32(rng, s["k"] * s["n"], -2, 2))}),
                        tolerance=Tolerance(
                            reduction=lambda a, b, c, m, n, k: matmul_bound(a.reshape(m, k), b.reshape(k, n)).ravel())),
                   dict(grid=lambda s: catalog.matmul_config(s["m"], s["n"]).grid, block=catalog.MM_THREADS)),
        "mandelbrot": ("mandelbrot", "mandelbrot",
                       lambda out, w, h, *view: E.mandelbrot_reference(w, h, *view, nan_stops=False).ravel(),
                       dict(inputs=InputOptions(ranges=MANDELBROT_RANGES)),
                       dict(grid=lambda s: catalog.mandelbrot_config(s["w"], s["h"]).grid, block=catalog.MANDEL_BLOCK)),
    }


KERNEL_CASES = ["saxpy", "chain", "chain_step", "histogram", "histogram_global", "matmul", "mandelbrot"]


@pytest.mark.parametrize("path", ["kernel", "stream"])
@pytest.mark.parametrize("name", KERNEL_CASES)
def test_kernel_object(name: str, path: str) -> None:
    module, kernel, reference, options, launch = _kernel_cases()[name]
    k = catalog.get_kernel(module, kernel)
    # Default launch geometry where not given: block 256, enough blocks for the longest array.
    check_against(reference, KernelTarget(k, stream=stream_for(path), **launch), settings=GPU_SETTINGS, **options)


def test_kernel_cases_cover_every_single_launch_kernel() -> None:
    multi_pass = {"sum_partial", "sum_final", "sum_single", "scan_lookback"}  # tested as whole ops (scratch to clear)
    kernels = {k for m in catalog.MODULES.values() for k in m.kernels} - multi_pass
    assert kernels == set(KERNEL_CASES) == set(_kernel_cases())


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
    catalog.cuda_chain(x, 200, stream=s)
    end.record(s)
    end.synchronize()
    assert end.query() and s.query()
    ms = cuda.Event.elapsed_ms(start, end)
    assert 0.0 < ms < 10_000.0 and math.isfinite(ms)
