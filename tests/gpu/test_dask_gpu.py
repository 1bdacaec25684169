"""pybridge.dask on GPUs: one worker per GPU, CuPy blocks that stay on the device between steps,
Futhark's cuda backend and pybridge CUDA kernels over the blocks. Runs on every GPU present (two on
the nvidia-h200-x2 machine). Needs CuPy, dask + distributed, `make futhark FUTHARK_BACKEND=cuda`
and `make cuda` (build/futhark/cuda, build/cuda).
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# Imported here only where a GPU is present: on a machine without one every test skips as a gpu test
# (tests/conftest.py), never for a missing CuPy.
from conftest import GPU_OK  # noqa: E402

if GPU_OK:
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    da = pytest.importorskip("dask.array", reason="dask is not installed: pip install 'dask[array]' distributed")
    distributed = pytest.importorskip("distributed", reason="distributed is not installed: pip install 'dask[array]' distributed")

import pybridge.dask as pbd  # noqa: E402
from pybridge.paths import find_build_file  # noqa: E402

SAXPY_CU = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"


def cuda_entry(prog: str, name: str):
    so = find_build_file(f"futhark/cuda/lib{prog}.so")
    if so is None:
        pytest.skip(f"build/futhark/cuda/lib{prog}.so not built: make futhark FUTHARK_BACKEND=cuda")
    return pbd.entry(str(so), name, backend="cuda")


def ngpus() -> int:
    return int(cupy.cuda.runtime.getDeviceCount())


def chunk_is_cupy(block):
    import cupy as cp

    return np.array([isinstance(block, cp.ndarray)])


@pytest.fixture(scope="module", params=["visible", "index"])
def client(request):
    cluster = pbd.local_cluster(devices=list(range(ngpus())), pin=request.param, threads_per_worker=2)
    with cluster, distributed.Client(cluster) as c:
        c.pin = request.param
        yield c


def test_futhark_blocks_stay_on_the_device(client):
    rng = np.random.default_rng(0)
    n = 1 << 22
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    X, Y = pbd.to_device(da.from_array(x, chunks=n // 8)), pbd.to_device(da.from_array(y, chunks=n // 8))
    saxpy = cuda_entry("saxpy", "saxpy")
    once = pbd.map_blocks(saxpy, np.float32(2.0), X, Y, sync=(client.pin == "visible"))  # settled results too
    twice = pbd.map_blocks(saxpy, np.float32(0.5), once, Y)  # Futhark output straight back in
    assert isinstance(twice._meta, cupy.ndarray)
    kinds = client.compute(da.map_blocks(chunk_is_cupy, twice, chunks=((1,) * 8,), dtype=bool), sync=True)
    assert kinds.all()  # every block on the workers is a CuPy array
    got = client.compute(pbd.to_host(twice), sync=True)
    np.testing.assert_allclose(got, np.float32(0.5) * (np.float32(2.0) * x + y) + y, rtol=1e-6)
    stats = client.run(pbd.stats)
    assert all(s["contexts_created"] <= 1 for s in stats.values())
    assert sum(1 for s in stats.values() if s["contexts_created"]) == min(ngpus(), 8)  # every GPU worked


def test_futhark_dot_reduction_on_gpus(client):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1 << 20, dtype=np.float32)
    X = pbd.to_device(da.from_array(x, chunks=1 << 17))
    total = pbd.reduction(cuda_entry("dot", "dot"), X, X, combine=cuda_entry("dot", "sum"))
    exact = float(np.dot(x.astype(np.float64), x))
    assert abs(float(client.compute(total, sync=True)) - exact) <= 1e-4 * exact


def test_cuda_kernel_over_device_and_host_blocks(client):
    if client.pin == "index":
        pytest.skip("CUDA kernels over Dask launch on each worker's device 0 (pin='visible')")
    x = np.arange(1 << 20, dtype=np.float32)
    k = pbd.kernel("saxpy", SAXPY_CU)
    on_device = pbd.map_kernel(k, 3.0, pbd.to_device(da.from_array(x, chunks=1 << 17)), pbd.to_device(da.from_array(x, chunks=1 << 17)))
    on_host = pbd.map_kernel(k, 3.0, da.from_array(x, chunks=1 << 17), da.from_array(x, chunks=1 << 17))
    assert isinstance(on_device._meta, cupy.ndarray) and isinstance(on_host._meta, np.ndarray)
    np.testing.assert_array_equal(client.compute(pbd.to_host(on_device), sync=True), 4 * x)
    np.testing.assert_array_equal(client.compute(on_host, sync=True), 4 * x)


@pytest.mark.parametrize("pin", ["visible", "index"])
def test_two_workers_sharing_one_gpu_give_correct_results(pin):
    """Issue 23: two worker processes on device 0 (each its own Futhark context on the same GPU),
    a chain of Futhark calls whose blocks stay on the device and a reduction; both workers work and
    every result equals NumPy's."""
    rng = np.random.default_rng(2)
    n = 1 << 22
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    with pbd.local_cluster(devices=[0, 0], pin=pin) as cluster, distributed.Client(cluster) as client:
        X, Y = pbd.to_device(da.from_array(x, chunks=n // 16)), pbd.to_device(da.from_array(y, chunks=n // 16))
        saxpy = cuda_entry("saxpy", "saxpy")
        twice = pbd.map_blocks(saxpy, np.float32(0.5), pbd.map_blocks(saxpy, np.float32(2.0), X, Y), Y)
        got = client.compute(pbd.to_host(twice), sync=True)
        np.testing.assert_allclose(got, np.float32(0.5) * (np.float32(2.0) * x + y) + y, rtol=1e-6)
        total = pbd.reduction(cuda_entry("dot", "dot"), X, X, combine=cuda_entry("dot", "sum"))
        exact = float(np.dot(x.astype(np.float64), x))
        assert abs(float(client.compute(total, sync=True)) - exact) <= 1e-4 * exact
        stats = client.run(pbd.stats)
        # both workers ran tasks, each with one context per library it loaded (saxpy, dot)
        assert len(stats) == 2 and len({s["pid"] for s in stats.values()}) == 2
        for s in stats.values():
            assert 1 <= s["contexts_created"] == len(s["libraries"]) <= 2, s
