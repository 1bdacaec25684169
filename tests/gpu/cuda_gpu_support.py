"""Shared setup for the pybridge.cuda GPU tests: skip (with the reason) unless PyCUDA, a GPU and
the built kernels are all there; big inputs described lazily (built only when a test runs); dense
random arrays for pybridge.testing's ``values=``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
EPS32 = float(np.finfo(np.float32).eps)  # 2^-23: twice the unit roundoff u = 2^-24


def require_cuda() -> None:
    """Skip unless PyCUDA imports, a GPU is usable, and `make cuda` has been run."""
    try:
        import pycuda.driver  # noqa: F401  # pyflakes: ignore
    except ImportError as e:
        pytest.skip(
            f"PyCUDA is not importable ({e}): on the GPU machine run `source .gpu-wheels/install.sh` "
            "(see shared/gpu-wheels/README.md) or pip install pycuda"
        )
    from pybridge.cuda import device_count, ensure_context
    from pybridge.paths import find_build_file

    if device_count() == 0:
        pytest.skip("PyCUDA sees no CUDA device")
    missing = [m for m in ("saxpy", "reduce", "scan", "matmul", "histogram", "mandelbrot", "chain")
               if find_build_file(f"cuda/{m}.cubin") is None or find_build_file(f"cuda/lib{m}.so") is None]
    if missing:
        pytest.skip(f"kernels not built ({', '.join(missing)}): run `make cuda` first")
    ensure_context()


@dataclass(frozen=True)
class Big:
    """A large input described, not built, so that @example does not allocate at import time."""

    n: int
    seed: int = 0
    kind: str = "normal"  # normal | uniform01 | ints

    def floats(self, scale: float = 1.0) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        if self.kind == "uniform01":
            return rng.random(self.n, dtype=np.float32) * np.float32(scale)
        return normal_f32(rng, self.n, scale)

    def ints(self, lo: int, hi: int) -> np.ndarray:
        return np.random.default_rng(self.seed).integers(lo, hi, self.n, dtype=np.int32)


def normal_f32(rng: np.random.Generator, shape: Any, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)


def uniform_f32(rng: np.random.Generator, shape: Any, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


Sizes = Mapping[str, int]


def dense(make: Callable[[np.random.Generator, Sizes], np.ndarray]) -> Callable[[Sizes], Any]:
    """A ``values=`` entry for pybridge.testing: ``make(rng, sizes)`` from a drawn seed, so every
    element is random at any size (Hypothesis' own arrays draw a few elements and fill the rest)."""
    from pybridge.testing import seeded

    return lambda sizes: seeded(lambda rng: make(rng, sizes))


def first_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    """A readable description of where two arrays first differ (for exact-equality failures)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    same = (got == want) | (np.isnan(got) & np.isnan(want)) if got.dtype.kind == "f" else got == want
    bad = np.argwhere(~same)
    if bad.size == 0:
        return "no mismatch"
    idx = tuple(bad[0])
    return (f"{len(bad)} of {got.size} elements differ; first at index {idx}: got {got[idx]!r}, "
            f"expected {want[idx]!r}")


SLEEP_CYCLES = 100_000_000  # ~50 ms of a spinning kernel at ~2 GHz


def spin(cp: Any, stream: Any, cycles: int = SLEEP_CYCLES) -> None:
    """A one-thread kernel spinning ``cycles`` clock cycles on ``stream`` (loaded beforehand)."""
    spin = cp.RawKernel(r"""extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64(); while (clock64() - t0 < cycles) { } }""", "spin")
    spin((1,), (1,), (np.int64(1),))  # module load (it may synchronise) before anything is queued
    cp.cuda.runtime.deviceSynchronize()
    with stream:
        spin((1,), (1,), (np.int64(cycles),))


def slow_cupy(cp: Any, stream: Any, x0: np.ndarray) -> Any:
    """y = 2 x + 1 on ``stream``, queued behind a kernel that spins for tens of milliseconds."""
    spin = cp.RawKernel(r"""extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64(); while (clock64() - t0 < cycles) { } }""", "spin")
    with stream:
        xg = cp.asarray(x0)
        spin((1,), (1,), (np.int64(1),))
        xg * np.float32(2.0) + np.float32(1.0)
        # the host copy and the kernels' first use (loading a module can synchronise the device) first
        stream.synchronize()
        spin((1,), (1,), (np.int64(SLEEP_CYCLES),))
        return xg * np.float32(2.0) + np.float32(1.0)
