"""The thin call path on a real GPU: direct launches (checked, cuda.launch, prepared), host launchers
with integer pointers (checked, prepared), launches on foreign streams without a proxy stream, and
Futhark cuda handles exported repeatedly (CAI, DLPack) and wrapped from PyTorch's CAI v2.
Fresh random inputs every time; outputs poisoned (NaN) before each launch."""

from __future__ import annotations

import numpy as np
import pytest

import pybridge.futhark as pf
from conftest import library_sources
from cuda_gpu_support import require_cuda

pytestmark = pytest.mark.gpu

SAXPY = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"


@pytest.fixture(scope="module")
def cuda_mod():
    require_cuda()
    from pybridge import cuda

    return cuda


def _inputs(cuda, n, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    a = float(rng.standard_normal())
    out = cuda.to_device(np.full(n, np.nan, np.float32))
    return a, x, y, cuda.to_device(x), cuda.to_device(y), out


def _expected(a, x, y):
    return (np.float32(a) * x + y).astype(np.float32)


@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_direct_checked_and_prepared_kernel_launches(cuda_mod, n):
    cuda = cuda_mod
    k = cuda.load_module("saxpy").kernel(SAXPY)
    a, x, y, dx, dy, out = _inputs(cuda, n, n)
    k(a, dx, dy, out, n, grid=cuda.grid_for(n, 256), block=256)
    assert k.launch_path.startswith("direct"), k.launch_path
    np.testing.assert_allclose(out.get(), _expected(a, x, y), rtol=1e-6, atol=1e-6)
    out2 = cuda.to_device(np.full(n, np.nan, np.float32))
    cuda.launch(None, cuda.LaunchConfig(grid=cuda.grid_for(n, 256), block=256), k, a, dx, dy, out2, n)
    np.testing.assert_array_equal(out2.get(), out.get())
    out3 = cuda.to_device(np.full(n, np.nan, np.float32))
    p = k.prepare(a, dx, dy, out3, n, grid=cuda.grid_for(n, 256), block=256)
    for _ in range(3):
        p()
    assert p.raw() == 0
    np.testing.assert_array_equal(out3.get(), out.get())


def test_host_launcher_checked_and_prepared(cuda_mod):
    cuda = cuda_mod
    n = 4099
    a, x, y, dx, dy, out = _inputs(cuda, n, 7)
    lnch = cuda.load_launchers("saxpy")
    assert lnch.mode == "api", lnch.mode
    lnch.launch_saxpy(a, dx, dy, out, n)
    np.testing.assert_allclose(out.get(), _expected(a, x, y), rtol=1e-6, atol=1e-6)
    out2 = cuda.to_device(np.full(n, np.nan, np.float32))
    replay = lnch.launch_saxpy.prepare(a, dx, dy, out2, n)
    replay()
    np.testing.assert_array_equal(out2.get(), out.get())
    with pytest.raises(ValueError, match="parameter y"):
        lnch.launch_saxpy(a, dx, cuda.to_device(y[:-1]), out, n)


def test_launch_on_a_foreign_stream_is_ordered(cuda_mod):
    torch = pytest.importorskip("torch")
    cuda = cuda_mod
    k = cuda.load_module("saxpy").kernel(SAXPY)
    n = 1 << 22
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        out = torch.full((n,), float("nan"), device="cuda")
    # Launched straight on PyTorch's stream (no proxy): the inputs written there come first.
    k(2.0, x, y, out, n, grid=cuda.grid_for(n, 256), block=256, stream=s)
    s.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), (2 * x + y).cpu().numpy(), rtol=1e-6, atol=1e-6)


@pytest.fixture(params=[p for p in library_sources("probe", backends=("cuda",))])
def probe(request):
    lib = pf.load(request.param)
    yield lib
    lib.close()


def test_futhark_handle_exports_repeat_and_check_validity(probe):
    torch = pytest.importorskip("torch")
    cp = pytest.importorskip("cupy")
    xs = np.random.default_rng(3).standard_normal(5000, dtype=np.float32)
    h = probe.saxpy(2.0, xs, xs)
    first = cp.asarray(h)
    second = cp.asarray(h)  # from the cached export state
    t = torch.from_dlpack(h)
    c = cp.from_dlpack(h)
    assert first.data.ptr == second.data.ptr == t.data_ptr() == c.data.ptr == h.data_pointer()
    np.testing.assert_array_equal(t.cpu().numpy(), 3 * xs)
    np.testing.assert_array_equal(cp.asnumpy(c), 3 * xs)
    del t, c
    h.free()
    with pytest.raises(pf.InvalidHandleError):
        h.__cuda_array_interface__
    with pytest.raises(pf.InvalidHandleError):
        h.__dlpack__()


def test_from_cuda_of_pytorch_cai_v2(probe):
    torch = pytest.importorskip("torch")
    x = torch.randn(3000, device="cuda")
    h = probe.types["[]f32"].from_cuda(x)
    out = probe.saxpy(1.0, h, h)
    np.testing.assert_allclose(out.numpy(), 2 * x.cpu().numpy(), rtol=1e-6)
    h.free()
