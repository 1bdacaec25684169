"""pybridge.cuda with the rest of the CUDA Python world, on a GPU.

* zero-copy in both directions with CuPy, PyTorch and numba.cuda, through CAI and DLPack, proven
  by equal device pointers (and by writes on one side being seen on the other);
* stream ordering: a producer's CAI stream, a DLPack consumer stream, and launches on foreign
  streams are honoured (a slow producer on a non-blocking stream would otherwise be raced);
* argument errors name the kernel and the parameter; a bad launch configuration is a LaunchError;
* an out-of-bounds write (tests/gpu/bad_kernels.cu) raises StickyCudaError, in a subprocess since
  it kills the CUDA context.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cuda_gpu_support import ROOT, Big, first_mismatch, require_cuda

from pybridge.demo import catalog
from pybridge.demo import examples as E

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def _cuda() -> None:
    require_cuda()


def cupy_or_skip() -> Any:
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CuPy cannot use the GPU: {e}")
    return cp


def torch_or_skip() -> Any:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch was built without CUDA or sees no GPU")
    return torch


def numba_cuda_or_skip() -> Any:
    numba_cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
    if not numba_cuda.is_available():
        pytest.skip("numba.cuda sees no GPU")
    return numba_cuda


def cai_ptr(obj: Any) -> int:
    return int(obj.__cuda_array_interface__["data"][0])


# ------------------------------------------------------------------------------ our own arrays


@pytest.mark.parametrize("dtype", ["f4", "f8", "i4", "u1", "i8", "?", "f2"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 5), (2, 0, 4)])
def test_to_device_round_trip(dtype: str, shape: tuple[int, ...]) -> None:
    from pybridge import cuda

    a = (np.arange(int(np.prod(shape))) % 5).astype(dtype).reshape(shape)
    d = cuda.to_device(a)
    assert d.shape == a.shape and d.dtype == a.dtype and d.c_contiguous
    back = d.get()
    assert back.dtype == a.dtype and np.array_equal(back, a)
    assert np.array_equal(np.asarray(d), a)
    assert np.array_equal(d.copy().get(), a)
    cai = d.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == shape and cai["data"][0] == d.ptr
    assert cai["stream"] is None  # a synchronous copy leaves nothing pending


def test_to_device_on_a_stream_marks_pending_work() -> None:
    from pybridge import cuda

    s = cuda.Stream(non_blocking=True)
    d = cuda.to_device(np.arange(10, dtype=np.float32), stream=s)
    assert d.stream == s and d.__cuda_array_interface__["stream"] == s.handle
    assert np.array_equal(d.get(), np.arange(10, dtype=np.float32))
    z = cuda.zeros((4, 4), np.int32, stream=s)
    assert np.array_equal(z.get(), np.zeros((4, 4), np.int32))


# ------------------------------------------------------------------------------ CuPy


@pytest.mark.parametrize("via", ["cai", "dlpack"])
def test_cupy_to_us_zero_copy(via: str) -> None:
    from pybridge import cuda

    cp = cupy_or_skip()
    x = cp.arange(1000, dtype=cp.float32)
    d = cuda.as_device_array(x, prefer=via)
    assert d.ptr == x.data.ptr, f"{via}: our pointer 0x{d.ptr:x} != CuPy's 0x{x.data.ptr:x} (a copy was made)"
    # Writes through our kernel land in CuPy's memory.
    catalog.cuda_saxpy(2.0, d, d, out=d)
    cp.cuda.runtime.deviceSynchronize()
    assert cp.array_equal(x, cp.arange(1000, dtype=cp.float32) * 3)


@pytest.mark.parametrize("via", ["cai", "dlpack"])
def test_us_to_cupy_zero_copy(via: str) -> None:
    from pybridge import cuda

    cp = cupy_or_skip()
    d = cuda.to_device(np.arange(100, dtype=np.float32))
    x = cp.asarray(d) if via == "cai" else cp.from_dlpack(d)
    assert x.data.ptr == d.ptr, f"{via}: CuPy's pointer 0x{x.data.ptr:x} != ours 0x{d.ptr:x}"
    x *= 2
    cp.cuda.runtime.deviceSynchronize()
    assert np.array_equal(d.get(), np.arange(100, dtype=np.float32) * 2)


_busy: dict[str, Any] = {}


def keep_busy(stream: Any) -> None:
    """Queue tens of milliseconds of our own GPU work on ``stream`` (the chain, 150000 ops on 2^22
    elements), so that whatever is queued after it is still pending when a consumer looks: a
    consumer that does not wait for the stream reads stale memory and the test fails."""
    from pybridge import cuda

    if "x" not in _busy:
        _busy["x"], _busy["out"] = cuda.zeros(2**22), cuda.empty(2**22)
    catalog.cuda_chain(_busy["x"], 150_000, out=_busy["out"], stream=stream)


def test_cupy_producer_stream_is_honoured() -> None:
    """CuPy writes y on a non-blocking stream behind a long queue of matmuls; its CAI names that
    stream; our kernel on our own non-blocking stream must see the final y, not stale memory."""
    from pybridge import cuda

    cp = cupy_or_skip()
    n = 2**20
    x0 = Big(n, 3).floats()
    cs = cp.cuda.Stream(non_blocking=True)
    with cs:
        xg = cp.asarray(x0)  # the host copy first: a copy from pageable memory may block the host
        cs.synchronize()
        m = cp.ones((4096, 4096), dtype=cp.float32)
        for _ in range(12):  # ~1.6e12 flops queued on cs before y is written
            m = m @ m * np.float32(1e-4)
        y = xg * np.float32(2.0) + np.float32(1.0)
        cai = y.__cuda_array_interface__
        assert cai.get("stream") not in (None, 0), f"CuPy did not export its stream: {cai.get('stream')!r}"
        ours = cuda.Stream(non_blocking=True)
        yd = cuda.as_device_array(y, stream=ours)
        out = catalog.cuda_saxpy(1.0, yd, cuda.zeros(n), stream=ours)  # 1*y + 0 == y exactly
    got = out.get()
    want = x0 * np.float32(2.0) + np.float32(1.0)
    assert np.array_equal(got, want), "our stream did not wait for CuPy's: " + first_mismatch(got, want)


def test_our_pending_stream_is_honoured_by_cupy() -> None:
    """Our output is written behind a long queue on our stream; CuPy, importing it through CAI on
    its own stream, must wait for that stream."""
    from pybridge import cuda

    cp = cupy_or_skip()
    x0 = Big(2**20, 4).floats()
    xd = cuda.to_device(x0)
    s = cuda.Stream(non_blocking=True)
    keep_busy(s)
    out = catalog.cuda_chain(xd, 5, stream=s)
    assert out.__cuda_array_interface__["stream"] == s.handle
    with cp.cuda.Stream(non_blocking=True):
        got = cp.asnumpy(cp.asarray(out).copy())
    want = E.chain_reference(x0, 5)
    assert np.array_equal(got, want), "CuPy did not wait for our CAI stream: " + first_mismatch(got, want)


def test_launchers_take_cupy_arrays_and_streams() -> None:
    from pybridge import cuda

    cp = cupy_or_skip()
    cs = cp.cuda.Stream(non_blocking=True)
    with cs:
        x = cp.linspace(-1, 1, 5000, dtype=cp.float32)
        y = cp.ones(5000, dtype=cp.float32)
        out = cp.empty(5000, dtype=cp.float32)
    cuda.load_launchers("saxpy").launch_saxpy(3.0, x, y, out, 5000, stream=cs)
    cs.synchronize()
    want = np.float32(3.0) * cp.asnumpy(x) + np.float32(1.0)
    assert np.array_equal(cp.asnumpy(out), want)


# ------------------------------------------------------------------------------ PyTorch


@pytest.mark.parametrize("via", ["cai", "dlpack"])
def test_torch_to_us_zero_copy(via: str) -> None:
    from pybridge import cuda

    torch = torch_or_skip()
    t = torch.arange(1000, dtype=torch.float32, device="cuda")
    d = cuda.as_device_array(t, prefer=via)
    assert d.ptr == t.data_ptr(), f"{via}: our pointer 0x{d.ptr:x} != torch's 0x{t.data_ptr():x}"
    catalog.cuda_saxpy(2.0, d, d, out=d)
    torch.cuda.synchronize()
    assert torch.equal(t.cpu(), torch.arange(1000, dtype=torch.float32) * 3)


@pytest.mark.parametrize("via", ["cai", "dlpack"])
def test_us_to_torch_zero_copy(via: str) -> None:
    from pybridge import cuda

    torch = torch_or_skip()
    d = cuda.to_device(np.arange(100, dtype=np.float32))
    t = torch.as_tensor(d, device="cuda") if via == "cai" else torch.from_dlpack(d)
    assert t.data_ptr() == d.ptr, f"{via}: torch's pointer 0x{t.data_ptr():x} != ours 0x{d.ptr:x}"
    t.mul_(2)
    torch.cuda.synchronize()
    assert np.array_equal(d.get(), np.arange(100, dtype=np.float32) * 2)
    del t  # torch drops its reference; our array stays valid


def test_torch_dlpack_consumer_stream_waits_for_our_work() -> None:
    """torch.from_dlpack passes its current stream to our __dlpack__, which must make it wait."""
    from pybridge import cuda

    torch = torch_or_skip()
    x0 = Big(2**20, 8).floats()
    xd = cuda.to_device(x0)
    s = cuda.Stream(non_blocking=True)
    keep_busy(s)
    out = catalog.cuda_chain(xd, 5, stream=s)
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        t = torch.from_dlpack(out)
        got = (t + 0).cpu().numpy()
    want = E.chain_reference(x0, 5)
    assert np.array_equal(got, want), "torch's stream did not wait for ours: " + first_mismatch(got, want)


def test_kernel_launch_on_a_torch_stream() -> None:
    """A foreign stream: our launch is ordered after the work queued on it and before what follows."""
    from pybridge import cuda

    torch = torch_or_skip()
    n = 2**20
    x0 = Big(n, 12).floats()
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        xg = torch.from_numpy(x0).to("cuda")  # the host copy first (it may block the host)
        ts.synchronize()
        m = torch.ones((4096, 4096), device="cuda")
        for _ in range(12):  # a long queue on ts before x is written
            m = (m @ m) * 1e-4
        x = xg * 2.0
        out = torch.empty(n, device="cuda", dtype=torch.float32)
        catalog.cuda_chain(x, 7, out=out, stream=ts)
        following = out + 0.0  # queued on ts after our kernel
    ts.synchronize()
    want = E.chain_reference(x0 * np.float32(2.0), 7)
    got = following.cpu().numpy()
    assert np.array_equal(got, want), "launch on a torch stream was not ordered: " + first_mismatch(got, want)


# ------------------------------------------------------------------------------ numba.cuda


def test_numba_to_us_zero_copy_cai() -> None:
    from pybridge import cuda

    nc = numba_cuda_or_skip()
    a = nc.to_device(np.arange(100, dtype=np.float32))
    d = cuda.as_device_array(a)
    assert d.ptr == cai_ptr(a), f"our pointer 0x{d.ptr:x} != numba's 0x{cai_ptr(a):x}"
    catalog.cuda_saxpy(2.0, d, d, out=d)
    assert np.array_equal(a.copy_to_host(), np.arange(100, dtype=np.float32) * 3)


def test_us_to_numba_zero_copy_cai() -> None:
    from pybridge import cuda

    nc = numba_cuda_or_skip()
    d = cuda.to_device(np.arange(100, dtype=np.float32))
    a = nc.as_cuda_array(d)
    assert cai_ptr(a) == d.ptr, f"numba's pointer 0x{cai_ptr(a):x} != ours 0x{d.ptr:x}"

    @nc.jit
    def double(v: Any) -> None:
        i = nc.grid(1)
        if i < v.size:
            v[i] *= 2

    try:
        double[1, 128](a)
    except AttributeError as e:  # numba-cuda's own compiler, not the interop under test
        pytest.skip(f"numba-cuda cannot JIT-compile kernels with NumPy {np.__version__} here: {e}")
    nc.synchronize()
    assert np.array_equal(d.get(), np.arange(100, dtype=np.float32) * 2)


def test_numba_dlpack_both_ways() -> None:
    from pybridge import cuda

    nc = numba_cuda_or_skip()
    a = nc.to_device(np.arange(10, dtype=np.float32))
    if not hasattr(a, "__dlpack__"):
        pytest.skip("this numba-cuda's device arrays do not export DLPack")
    d = cuda.as_device_array(a, prefer="dlpack")
    assert d.ptr == cai_ptr(a)
    from_dlpack = getattr(nc, "from_dlpack", None)
    if from_dlpack is None:
        pytest.skip("this numba-cuda has no from_dlpack (DLPack import)")
    b = from_dlpack(cuda.to_device(np.ones(3, np.float32)))
    assert np.array_equal(b.copy_to_host(), np.ones(3, np.float32))


# ------------------------------------------------------------------------------ argument errors


def test_argument_errors_name_kernel_and_parameter() -> None:
    from pybridge import cuda

    k = catalog.get_kernel("saxpy")
    n = 16
    x, y, out = cuda.to_device(np.ones(n, np.float32)), cuda.to_device(np.ones(n, np.float32)), cuda.empty(n)
    cfg = cuda.LaunchConfig(1, 256)
    with pytest.raises(TypeError, match=r"kernel saxpy, parameter x .*NumPy array"):
        k(2.0, np.ones(n, np.float32), y, out, n, config=cfg)
    with pytest.raises(TypeError, match=r"kernel saxpy, parameter y .*expected float32.*float64"):
        k(2.0, x, cuda.to_device(np.ones(n)), out, n, config=cfg)
    with pytest.raises(ValueError, match=r"kernel saxpy, parameter out .*8 elements.*n = 16"):
        k(2.0, x, y, cuda.empty(8), n, config=cfg)
    with pytest.raises(TypeError, match=r"kernel saxpy, parameter n .*integer"):
        k(2.0, x, y, out, 16.0, config=cfg)

    class ReadOnly:  # a CAI producer that marks its memory read-only
        def __init__(self, d: Any) -> None:
            self.__cuda_array_interface__ = dict(d.__cuda_array_interface__, data=(d.ptr, True))

    with pytest.raises(ValueError, match=r"kernel saxpy, parameter out .*read-only"):
        k(2.0, x, y, ReadOnly(out), n, config=cfg)
    k(2.0, ReadOnly(x), y, out, n, config=cfg)  # read-only is fine for const parameters
    cp = None
    try:
        import cupy as cp  # type: ignore[no-redef]
    except ImportError:
        pass
    if cp is not None:
        strided = cp.zeros(2 * n, dtype=cp.float32)[::2]
        with pytest.raises(ValueError, match=r"parameter x .*not C-contiguous"):
            k(2.0, strided, y, out, n, config=cfg)
    with pytest.raises(TypeError, match=r"parameter x .*NumPy"):
        cuda.load_launchers("saxpy").launch_saxpy(2.0, np.ones(n, np.float32), y, out, n)


def test_bad_launch_configuration_is_a_launch_error() -> None:
    from pybridge import cuda

    k = catalog.get_kernel("chain", "chain")
    x, out = cuda.to_device(np.ones(10, np.float32)), cuda.empty(10)
    with pytest.raises(cuda.LaunchError, match="threads"):
        k(x, out, 10, 1, grid=1, block=(32, 64))  # caught before CUDA: 2048 threads
    with pytest.raises(cuda.LaunchError) as e:
        k(x, out, 10, 1, grid=1, block=256, shared_mem=1 << 20)  # 1 MiB of shared memory: CUDA says no
    assert e.value.kernel == "chain" and "shared_mem=1048576" in str(e.value)
    k(x, out, 10, 1, grid=1, block=256)  # the context is still fine
    assert np.array_equal(out.get(), E.chain_reference(np.ones(10, np.float32), 1))


# ------------------------------------------------------------------------------ sticky errors


_STICKY_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    from pybridge import cuda
    image, which = sys.argv[1], sys.argv[2]
    result = {}
    try:
        cuda.ensure_context()
        mod = cuda.load_module(image)
        if which == "write":
            k = mod.kernel("bad_write(float* out[n], int64 n)")
            out = cuda.empty(4)
            k(out, 4, grid=1, block=32)
        else:
            k = mod.kernel("bad_assert(int32 value)")
            k(0, grid=1, block=1)
        try:
            cuda.Stream.default().synchronize()
            result["sync"] = "no error"
        except Exception as e:
            result["sync"] = [type(e).__name__, getattr(e, "code", None), getattr(e, "kernel", None), str(e)]
        try:
            cuda.to_device(np.ones(4, np.float32)).get()
            result["after"] = "no error"
        except Exception as e:
            result["after"] = [type(e).__name__, getattr(e, "code", None), str(e)]
    except Exception as e:
        result["setup"] = [type(e).__name__, str(e)]
    print("RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # skip PyCUDA's clean-up in a dead context
    """
)


@pytest.fixture(scope="module")
def bad_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bad_kernels.cu compiled now for this GPU (nvcc), else the PTX shipped next to it."""
    from pybridge.cuda.context import compute_capability

    nvcc = shutil.which("nvcc")
    if nvcc:
        major, minor = compute_capability()
        out = tmp_path_factory.mktemp("bad") / "bad_kernels.cubin"
        r = subprocess.run([nvcc, "-cubin", f"-arch=sm_{major}{minor}", "-o", str(out), str(HERE / "bad_kernels.cu")],
                           capture_output=True, text=True, timeout=300)
        if r.returncode == 0:
            return out
    return HERE / "bad_kernels.ptx"


@pytest.mark.parametrize("which,code", [("write", 700), ("assert", 710)])
def test_out_of_bounds_write_is_sticky(bad_image: Path, which: str, code: int) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _STICKY_SCRIPT, str(bad_image), which], capture_output=True,
                       text=True, timeout=300, env=env, cwd=ROOT)
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"the subprocess printed no result (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    result = json.loads(lines[-1][len("RESULT "):])
    assert "setup" not in result, f"could not even launch the bad kernel: {result['setup']}"
    sync = result["sync"]
    assert sync != "no error", "the bad kernel did not fail: is it really out of bounds?"
    name, got_code, _kernel, message = sync
    assert name == "StickyCudaError", f"expected StickyCudaError, got {name}: {message}"
    assert got_code == code, f"expected CUDA error {code}, got {got_code}: {message}"
    assert "restart" in message
    after = result["after"]
    assert after != "no error" and after[0] in ("StickyCudaError", "CudaError"), (
        f"the context should be dead after a sticky error, but the next call gave: {after}"
    )
