"""Property tests of Futhark entry points and CUDA kernels against NumPy: copy this file and adapt.

    make                                   # builds build/futhark/{c,multicore}/lib*.so (and CUDA kernels)
    python -m pytest examples/test_my_kernels.py

Each test says "this target computes what this NumPy function computes". pybridge.testing reads
the target's signature (the Futhark manifest plus the ``.fut`` header for shared sizes like ``[n]``,
or the CUDA declaration), generates inputs with Hypothesis, compares with dtype-aware tolerances,
and on a difference shrinks to a minimal failing input. Libraries that are not built are skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from pybridge.testing import (
    InputOptions,
    KernelTarget,
    Tolerance,
    block_sizes,
    check_against,
    handle_lifecycle_machine,
    on_device,
    reduction_bound,
)


def load(name: str) -> Any:
    """A Futhark library from the build directories, or skip the test module's test."""
    import pybridge.futhark as pf

    try:
        return pf.load(name, backend="c")
    except FileNotFoundError as e:
        pytest.skip(f"{name} is not built: {e}")


# ---------------------------------------------------------------- Futhark entry points


def test_saxpy() -> None:
    # futhark/saxpy.fut: entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32
    lib = load("saxpy")
    check_against(lambda a, xs, ys: a * xs + ys, lib.saxpy, inputs=InputOptions(extra_sizes=block_sizes(256)))


def test_dot_is_a_reduction() -> None:
    # A sum in another order: bound the error by n*eps*sum|x_i*y_i| instead of a fixed rtol.
    lib = load("dot")
    check_against(
        lambda xs, ys: np.float32(np.dot(xs.astype(np.float64), ys.astype(np.float64))),
        lib.dot,
        tolerance=Tolerance(reduction=lambda xs, ys: reduction_bound(xs.astype(np.float64) * ys, np.float32)),
        inputs=InputOptions(min_value=-1e3, max_value=1e3),
    )


def test_stats_record() -> None:
    # Records are dicts; NaN (empty input) must match NaN.
    lib = load("stats")

    def stats(xs: np.ndarray) -> dict[str, Any]:
        mean = xs.mean() if xs.size else np.nan
        std = xs.std() if xs.size else np.nan
        return {"sum": xs.sum(), "mean": mean, "std": std}

    check_against(stats, lib.stats, tolerance=Tolerance(equal_nan=True, rtol=1e-9, atol=1e-6),
                  inputs=InputOptions(min_value=-1e6, max_value=1e6))


def test_histogram() -> None:
    # `nbins` is a size of the result ([nbins]i32), so it is drawn like a size (small);
    # `ranges` keeps the values near the bins, negative ones included.
    lib = load("histogram")

    def histogram(nbins: np.int64, xs: np.ndarray) -> np.ndarray:
        inside = (xs >= 0) & (xs < nbins)
        return np.bincount(xs[inside], minlength=int(nbins)).astype(np.int32)

    check_against(histogram, lib.histogram, inputs=InputOptions(ranges={"xs": (-3, 40)}))


def test_matmul() -> None:
    # entry matmul [n] [m] [p] (a: [n][m]f32) (b: [m][p]f32): the shapes agree by construction.
    lib = load("matmul")
    check_against(
        lambda a, b: (a.astype(np.float64) @ b).astype(np.float32),
        lib.matmul,
        inputs=InputOptions(max_size=12, min_value=-10, max_value=10),
        tolerance=Tolerance(rtol=1e-4, atol=1e-4),
    )


def test_index_within_bounds() -> None:
    # A value that depends on a drawn size: an index into xs (sizes are named "<param>[<axis>]"
    # when the source gives no name, as in `(xs: []f32)`).
    lib = load("bounds")
    check_against(
        lambda xs, i: xs[i],
        lib.index_at,
        inputs=InputOptions(min_size=1, values={"i": lambda sizes: st.integers(0, sizes["xs[0]"] - 1).map(np.int64)}),
    )


# Handle lifecycles (create, read, pass, consume, free, misuse) on one library, as a state machine.
def _saxpy_machine() -> Any:
    import pybridge.futhark as pf

    try:
        return handle_lifecycle_machine(pf.load("saxpy", backend="c")).TestCase
    except FileNotFoundError:
        return None


TestSaxpyHandles = _saxpy_machine()
if TestSaxpyHandles is None:
    del TestSaxpyHandles


# ---------------------------------------------------------------- CUDA kernels


def cuda_or_skip() -> Any:
    try:
        from pybridge import cuda

        if cuda.device_count() == 0:
            raise RuntimeError("no CUDA device")
    except Exception as e:  # no PyCUDA, no driver, no GPU
        pytest.skip(f"CUDA not available: {e}")
    return cuda


def test_saxpy_kernel() -> None:
    # The declaration gives the sizes: x[n], y[n], out[n] with the scalar n bound to them. `out` is
    # filled with random data too (in/out); the reference returns what out must hold afterwards.
    cuda = cuda_or_skip()
    try:
        k = cuda.load_module("saxpy").kernel(
            "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
    except Exception as e:
        pytest.skip(f"kernels_cu/saxpy.cu is not built: {e}")
    check_against(
        lambda a, x, y, out, n: a * x + y,
        KernelTarget(k, block=256),
        inputs=InputOptions(extra_sizes=block_sizes(256, large=1 << 16)),
    )


def test_catalog_operation() -> None:
    # A whole operation of device arrays (here the demo's, pybridge.demo.catalog): on_device()
    # copies NumPy in and reads the result back.
    cuda_or_skip()
    from pybridge.demo import catalog

    check_against(
        lambda a, xs, ys: a * xs + ys,
        on_device(catalog.cuda_saxpy),
        signature="entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32",
    )
