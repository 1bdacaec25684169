"""Futhark's cuda backend with CuPy and PyTorch on one device: zero-copy both ways, ordering,
contexts, plain device memory, out-of-memory. Runs on the real compiler's cuda output
(`make futhark FUTHARK_BACKEND=cuda`; see conftest.library_sources)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import pybridge.futhark as pf
from conftest import library_sources

pytestmark = pytest.mark.gpu


def _cuda_sources(program: str) -> list:
    return [p for p in library_sources(program, backends=("cuda",))]


@pytest.fixture(params=_cuda_sources("probe"))
def probe(request):
    lib = pf.load(request.param)
    yield lib
    lib.close()


@pytest.fixture(params=_cuda_sources("probe"))
def probe_device_memory(request):
    # Plain cuMemAlloc memory (no managed memory), as the GPU-safety rules ask for OOM tests.
    lib = pf.load(request.param, unified_memory=0)
    yield lib
    lib.close()


def _cu():
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuInit(0)
    return cu


def _pointer_is_managed(ptr: int) -> bool:
    cu = _cu()
    v = ctypes.c_int(0)
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    rc = cu.cuPointerGetAttribute(ctypes.byref(v), CU_POINTER_ATTRIBUTE_IS_MANAGED, ctypes.c_uint64(ptr))
    assert rc == 0, f"cuPointerGetAttribute failed: {rc}"
    return bool(v.value)


def test_cai_zero_copy_into_cupy(probe):
    cp = pytest.importorskip("cupy")
    xs = np.arange(1000, dtype=np.float32)
    h = probe.saxpy(2.0, xs, xs)
    view = cp.asarray(h)  # through __cuda_array_interface__
    assert view.data.ptr == h.data_pointer()
    np.testing.assert_array_equal(cp.asnumpy(view), 3 * xs)


def test_cai_zero_copy_into_torch(probe):
    torch = pytest.importorskip("torch")
    xs = np.arange(257, dtype=np.float32)
    h = probe.saxpy(1.0, xs, xs)
    t = torch.as_tensor(h, device="cuda")
    assert t.data_ptr() == h.data_pointer()
    np.testing.assert_array_equal(t.cpu().numpy(), 2 * xs)


def test_new_raw_over_cupy_memory_and_writes_are_seen(probe):
    cp = pytest.importorskip("cupy")
    a = cp.arange(1, 101, dtype=cp.float32)
    h = probe.types["[]f32"].from_cuda(a)
    assert h.data_pointer() == a.data.ptr
    assert probe.sum(h) == pytest.approx(5050.0)
    a *= 2  # CuPy writes; pybridge's from_cuda synced CuPy's stream before handing over
    cp.cuda.get_current_stream().synchronize()
    assert probe.sum(h) == pytest.approx(10100.0)
    h.free()
    assert float(a.sum()) == pytest.approx(10100.0)  # Futhark did not free CuPy's memory


def test_torch_output_into_futhark_and_back(probe):
    torch = pytest.importorskip("torch")
    t = torch.linspace(0, 1, 4096, device="cuda", dtype=torch.float32)
    h = probe.types["[]f32"].from_cuda(t)
    out = probe.saxpy(3.0, h, h)
    back = torch.as_tensor(out, device="cuda")
    torch.testing.assert_close(back, 4 * t)


def test_plain_device_memory_is_shared_across_contexts(probe_device_memory):
    cp = pytest.importorskip("cupy")
    xs = np.arange(64, dtype=np.float32)
    h = probe_device_memory.saxpy(1.0, xs, xs)
    assert not _pointer_is_managed(h.data_pointer())
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(h)), 2 * xs)


def test_frameworks_still_work_after_futhark_context(probe):
    torch = pytest.importorskip("torch")
    x = torch.ones(1024, device="cuda")
    assert float((x * 2).sum()) == 2048.0
    cu = _cu()
    cur = ctypes.c_void_p()
    cu.cuCtxGetCurrent(ctypes.byref(cur))
    dev = ctypes.c_int()
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    primary = ctypes.c_void_p()
    cu.cuDevicePrimaryCtxRetain(ctypes.byref(primary), dev)
    cu.cuDevicePrimaryCtxRelease(dev)
    assert cur.value == primary.value, "Futhark's context was left current over the primary context"


OOM_CHILD = """
import sys, numpy as np, pybridge.futhark as pf
lib = pf.load(sys.argv[1], unified_memory=0)  # plain cuMemAlloc: failing is safe, nothing oversubscribed
kind = lib.types["[]f32"]
small = np.zeros(4, np.float32)
ptr = kind.new_fn(lib.context.ptr, kind.buffer(small), 1 << 40)  # 4 TiB of f32 in device memory
try:
    if ptr == lib.ffi.NULL:
        raise lib.context.error(None, "futhark_new_f32_1d")
    print("NO-ERROR")
except pf.OutOfMemoryError as e:
    print("OOM", type(e).__name__, repr(str(e)))
except pf.FutharkError as e:
    print("OTHER", type(e).__name__, e.code, repr(str(e)))
print("AFTER", float(lib.sum(np.arange(5, dtype=np.float32))))
"""

REAL_OOM_CHILD = """
import sys, pybridge.futhark as pf
lib = pf.load(sys.argv[1], unified_memory=0)
try:
    lib.mandelbrot(1 << 20, 1 << 20, -2.0, -1.0, 1e-6, 1e-6, 10).numpy()  # 4 TiB of i32 on the device
    print("NO-ERROR")
except pf.FutharkError as e:
    print("RAISED", type(e).__name__, repr(str(e).splitlines()[0]))
print("AFTER", int(lib.mandelbrot(4, 4, -2.0, -1.0, 0.5, 0.5, 10).numpy().sum()))
"""


def _child(code: str, so) -> str:
    """Run in a child process: if a backend mishandles the failed allocation, only the child dies."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code, str(so)], capture_output=True, text=True, timeout=300)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.futhark
def test_out_of_memory_in_new_is_an_exception():
    """A failed device allocation in futhark_new_* on real cuda output (plain device memory, nothing
    oversubscribed). Futhark 0.25.32's cuda backend does not report the failed cuMemAlloc itself: the
    copy into the missing buffer fails next ("invalid argument"), seen on the H100. What must hold:
    an exception naming the failed CUDA call, never a crash, and the context stays usable."""
    from pybridge.paths import find_build_file

    so = find_build_file("reference/cuda/libprobe.so")
    if so is None:
        pytest.skip("reference/cuda/libprobe.so not built (make futhark FUTHARK_BACKEND=cuda)")
    out = _child(OOM_CHILD, so)
    assert ("OOM OutOfMemoryError" in out and "Failed to allocate" in out) or (
        "OTHER FutharkError" in out and "CUDA call" in out
    ), out
    assert "AFTER 10.0" in out


@pytest.mark.futhark
def test_failed_device_allocation_in_real_futhark_raises_and_context_survives():
    """Futhark 0.25.32's generated cuda code ignores a failed allocation inside an entry point
    (upstream: the result of gpu_alloc is discarded), so no OOM code comes back; the failure shows up
    at the next operation on the result. pybridge must raise there and keep the context usable."""
    from pybridge.paths import find_build_file

    so = find_build_file("futhark/cuda/libmandelbrot.so")
    if so is None:
        pytest.skip("futhark/cuda/libmandelbrot.so not built (make futhark FUTHARK_BACKEND=cuda)")
    out = _child(REAL_OOM_CHILD, so)
    assert "RAISED" in out and "NO-ERROR" not in out
    assert "AFTER 88" in out  # 4x4 mandelbrot with these parameters, as NumPy's reference gives


def test_program_error_on_gpu_then_usable(probe):
    xs = np.arange(4, dtype=np.float32)
    with pytest.raises(pf.ProgramError, match=r"Index \[10\] out of bounds"):
        probe.index_at(xs, 10)
        probe.sync()
    assert probe.index_at(xs, 2) == np.float32(2)
