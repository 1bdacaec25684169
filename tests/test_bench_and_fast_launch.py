"""CPU checks of the thin call path and of ``pybridge bench``.

* the direct-launch shim (cffi API mode) hands cuLaunchKernel exactly the configuration, stream and
  argument bytes PyCUDA would (a recording stand-in replaces the driver's function), for checked
  and prepared launches, and turns a CUDA error code into the documented exception;
* the host-launcher bindings (API-mode shim and the ABI fallback) call the real library;
* ``pybridge bench overhead --quick`` and ``pybridge bench all --quick --json`` run here and
  write what they promise; ``--markdown`` keeps the hand-written notes.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pybridge.cuda import _cshim
from pybridge.cuda.signature import parse_signature

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]
SAXPY = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the cffi API-mode shim")


class FakeCAI:
    """A CAI v3 producer without a GPU (only the pointer value is used by launches)."""

    def __init__(self, ptr: int, n: int, typestr: str = "<f4", stream: int | None = None) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": stream}


_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *([ctypes.c_uint] * 7), ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.POINTER(ctypes.c_void_p))


@pytest.fixture
def recording_driver(monkeypatch):
    """cuLaunchKernel replaced by a recorder; returns (calls, set_return_code)."""
    calls: list[tuple] = []
    rc = [0]

    @_PROTO
    def fake(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        size = ctypes.cast(extra[3], ctypes.POINTER(ctypes.c_size_t))[0]
        calls.append((f, (gx, gy, gz), (bx, by, bz), shared, stream or 0, ctypes.string_at(extra[1], size),
                      params, (extra[0], extra[2], extra[4])))
        return rc[0]

    try:
        lib = _cshim.launch_shim(ctypes.cast(fake, ctypes.c_void_p).value)
    except ImportError as e:
        pytest.skip(str(e))
    previous = lib.pb_get_launch_fn()
    monkeypatch.setattr(_cshim, "launch_shim", lambda: lib)
    import pybridge.cuda.kernel as kmod

    monkeypatch.setattr(kmod, "ensure_context", lambda device=0: None)
    yield calls, rc
    lib.pb_set_launch_fn(previous)


class _Function:  # what Kernel needs of a PyCUDA function on this path
    def prepare(self, fmt):
        self.fmt = fmt


class _Module:
    def raw_function(self, name):
        assert name == "saxpy"
        return 0xF00D


@needs_cc
def test_direct_launch_passes_what_pycuda_would(recording_driver):
    from pybridge.cuda.kernel import Kernel
    from pybridge.cuda.streams import Stream

    calls, _ = recording_driver
    k = Kernel(_Function(), SAXPY, module=_Module())
    rng = np.random.default_rng(1)
    for _ in range(20):
        n = int(rng.integers(0, 10**6))
        a = float(rng.normal() * 1e3)
        ptrs = [int(p) for p in rng.integers(1, 2**47, size=3)] if n else [0, 0, 0]
        stream = Stream.external(int(rng.integers(3, 2**40)))
        k(a, *(FakeCAI(p, n) for p in ptrs), n, grid=(7, 2), block=128, shared_mem=64, stream=stream)
        f, grid, block, shared, s, buf, params, markers = calls[-1]
        assert (f, grid, block, shared, s) == (0xF00D, (7, 2, 1), (128, 1, 1), 64, stream.handle)
        assert buf == struct.pack("@fPPPq", np.float32(a), *ptrs, n)  # PyCUDA's 'fPPPq', native alignment
        assert params is None and markers == (1, 2, None)  # BUFFER_POINTER, BUFFER_SIZE, END
    assert k.launch_path.startswith("direct")
    from pybridge.cuda.launch import launch
    from pybridge.cuda.launch_config import LaunchConfig

    launch(None, LaunchConfig(grid=5, block=64), k, 1.0, *(FakeCAI(p, 3) for p in (16, 32, 48)), 3)
    f, grid, block, shared, s, buf, params, markers = calls[-1]
    assert (grid, block, shared, s, buf) == ((5, 1, 1), (64, 1, 1), 0, 0, struct.pack("@fPPPq", 1.0, 16, 32, 48, 3))
    with pytest.raises(ValueError, match="parameter out"):
        launch(None, LaunchConfig(grid=5, block=64), k, 1.0, FakeCAI(16, 3), FakeCAI(32, 3), FakeCAI(48, 4), 3)


@needs_cc
def test_prepared_launch_checks_once_then_replays(recording_driver):
    from pybridge.cuda.errors import LaunchError
    from pybridge.cuda.kernel import Kernel

    calls, rc = recording_driver
    k = Kernel(_Function(), SAXPY, module=_Module())
    with pytest.raises(ValueError, match="parameter y"):
        k.prepare(2.0, FakeCAI(16, 10), FakeCAI(32, 9), FakeCAI(48, 10), 10, grid=1, block=32)
    with pytest.raises(TypeError, match="parameter x"):
        k.prepare(2.0, np.ones(10, np.float32), FakeCAI(32, 10), FakeCAI(48, 10), 10, grid=1, block=32)
    assert not calls  # nothing launched for bad arguments
    p = k.prepare(2.0, FakeCAI(16, 10), FakeCAI(32, 10), FakeCAI(48, 10), 10, grid=3, block=32)
    for _ in range(3):
        p()
    assert len(calls) == 3 and len({c[5] for c in calls}) == 1
    assert calls[0][5] == struct.pack("@fPPPq", 2.0, 16, 32, 48, 10)
    assert p.raw() == 0 and len(calls) == 4
    rc[0] = 1  # CUDA_ERROR_INVALID_VALUE from the driver: a LaunchError naming the configuration
    with pytest.raises(LaunchError, match="grid=\\(3, 1, 1\\)"):
        p()
    with pytest.raises(LaunchError):
        k(2.0, FakeCAI(16, 10), FakeCAI(32, 10), FakeCAI(48, 10), 10, grid=3, block=32)


def _launchers(monkeypatch, abi: bool):
    from pybridge.cuda import launchers as lmod

    so = ROOT / "build" / "cuda" / "libsaxpy.so"
    if not so.exists():
        pytest.skip("build/cuda/libsaxpy.so not built (make cuda needs nvcc)")
    if abi:
        def no_compiler(*a, **k):
            raise ImportError("no compiler (test)")

        monkeypatch.setattr(_cshim, "compile_shim", no_compiler)
    monkeypatch.setattr(lmod, "ensure_context", lambda device=0: None)
    sigs, _ = lmod.read_sidecar(so.with_name("libsaxpy.launchers.json"))  # make writes it beside the library
    return lmod.Launchers(so, sigs, "")


@pytest.mark.parametrize("abi", [False, True], ids=["api-shim", "abi-fallback"])
def test_host_launcher_call_paths(monkeypatch, abi):
    if not abi and shutil.which("cc") is None:
        pytest.skip("no C compiler")
    lib = _launchers(monkeypatch, abi)
    assert lib.mode.startswith("abi" if abi else "api")
    f = lib.launch_saxpy
    empty = [FakeCAI(0, 0) for _ in range(3)]
    assert f(2.0, *empty, 0) is None  # n == 0: the C launcher returns success before any CUDA call
    replay = f.prepare(2.0, *empty, 0)
    replay()
    assert replay.raw() == 0
    with pytest.raises(ValueError, match="parameter y"):  # checks happen before C sees anything
        f(2.0, FakeCAI(0, 0), FakeCAI(16, 3), FakeCAI(0, 0), 0)
    assert lib.raw("launch_saxpy")(1.0, lib.ffi.NULL, lib.ffi.NULL, lib.ffi.NULL, -1, lib.ffi.NULL) == 1


# ------------------------------------------------------------------ pybridge bench


def _bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The futhark-call rows time tests/reference/probe.fut, which only a checkout's build/ holds
    # (an installed pybridge ships no test programs): point the bench there.
    env = {**os.environ, "PYBRIDGE_BUILD": str(ROOT / "build")}
    return subprocess.run([sys.executable, "-m", "pybridge", "bench", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env)


def test_bench_overhead_quick_runs_here(tmp_path):
    proc = _bench("overhead", "--quick", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "futhark-call (" in proc.stdout and "cuda-launch" in proc.stdout
    assert "median µs" in proc.stdout


def test_bench_all_quick_json_and_markdown(tmp_path):
    out = tmp_path / "bench.json"
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("old\n<!-- notes:start (kept when this file is regenerated) -->\nmy note 42\n<!-- notes:end -->\n")
    proc = _bench("all", "--quick", "--json", str(out), "--markdown", str(md), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["meta"]["command"].startswith("pybridge bench all --quick")
    rows = data["rows"]
    assert {r["benchmark"].split(" (")[0].split(":")[0] for r in rows} >= {
        "futhark-call", "futhark-array-call", "futhark-chain30", "cuda-launch", "exchange", "fusion"}
    for r in rows:
        assert {"benchmark", "impl", "size", "median_us"} <= r.keys()
        # every row is either a measurement or says why it is missing
        assert (r["median_us"] is not None and r["median_us"] > 0) or r.get("skipped"), r
    timed = [r for r in rows if r["median_us"] is not None]
    assert any(r["benchmark"].startswith("futhark-call") and r["impl"] == "C loop" for r in timed) or any(
        r["benchmark"].startswith("futhark-call") and r["impl"] == "C loop" and r.get("skipped") for r in rows)
    assert any(r["benchmark"] == "fusion" for r in timed)
    for name in ("bandwidth", "matmul"):  # written by another change: present, or said to be missing
        assert any(r["benchmark"].startswith(name) for r in rows)
    text = md.read_text()
    assert "my note 42" in text and "old\n" not in text
    assert "## Targets\n" in text and "| kernel launches | Checked kernel launch" in text and "≤ CuPy RawKernel" in text
    # `report` redraws from the JSON alone, keeping the notes; a file that is no bench output is refused
    md.write_text(text.replace("my note 42", "my note 43"))
    proc = _bench("report", str(out), "--markdown", str(md), "--command", "bash scripts/x.sh", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = md.read_text()
    assert "my note 43" in again and again.count("| 13 |") == text.count("| 13 |")
    assert "Generated by `bash scripts/x.sh`" in again  # the command that made the merged runs
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    proc = _bench("report", str(bad), cwd=tmp_path)
    assert proc.returncode == 2 and "not a `pybridge bench --json` file" in proc.stderr


# ------------------------------------------------------------------ the generated fast bind


def _device_array(ptr: int, n: int, dtype=np.float32, readonly: bool = False, strides=None):
    from pybridge.cuda.arrays import DeviceArray
    from pybridge.interop import ArrayInfo, c_contiguous_strides

    dt = np.dtype(dtype)
    info = ArrayInfo(ptr, (n,), strides or c_contiguous_strides((n,), dt.itemsize), dt, readonly)
    return DeviceArray(info, owner=None)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_F32_EDGE = [3.4028234663852886e38, 3.4028235677973366e38, 3.4028235677973362e38, 3.402823567797337e38,
             -3.4028235677973366e38, float("inf"), float("nan"), 1e-46, -0.0]
_scalar = st.one_of(st.floats(allow_nan=False, width=64), st.floats(min_value=-1e39, max_value=1e39),
                    st.sampled_from(_F32_EDGE),
                    st.integers(-2**70, 2**70), st.booleans(), st.just(None), st.just(np.float32(1.5)))
_size = st.integers(-3, 40)


@st.composite
def _pointer(draw):
    kind = draw(st.sampled_from(["ours", "ours-f64", "ours-ro", "ours-strided", "ours-null", "cai", "cai-ro",
                                 "cai-stream", "cai-v2", "cai-f64", "numpy", "int"]))
    n = draw(st.integers(0, 40))
    ptr = draw(st.integers(1, 2**40)) * 256
    if kind == "ours":
        return _device_array(ptr, n)
    if kind == "ours-f64":
        return _device_array(ptr, n, np.float64)
    if kind == "ours-ro":
        return _device_array(ptr, n, readonly=True)
    if kind == "ours-strided":
        return _device_array(ptr, n, strides=(8,))
    if kind == "ours-null":
        return _device_array(0, n)
    if kind == "cai":
        return FakeCAI(ptr, n)
    if kind == "cai-ro":
        c = FakeCAI(ptr, n)
        c.__cuda_array_interface__["data"] = (ptr, True)
        return c
    if kind == "cai-stream":
        return FakeCAI(ptr, n, stream=draw(st.sampled_from([1, 2, 0x5000])))
    if kind == "cai-v2":  # PyTorch's form: version 2, no stream field
        c = FakeCAI(ptr, n)
        c.__cuda_array_interface__.update(version=2)
        del c.__cuda_array_interface__["stream"]
        return c
    if kind == "cai-f64":
        return FakeCAI(ptr, n, typestr="<f8")
    if kind == "numpy":
        return np.ones(n, np.float32)
    return ptr


@settings(max_examples=400, deadline=None)
@given(a=_scalar, x=_pointer(), y=_pointer(), out=_pointer(), n=st.one_of(_size, _scalar))
def test_fast_bind_agrees_with_the_general_check(a, x, y, out, n):
    """Whatever the generated fast path accepts, the general path accepts with the same result;
    whatever the general path rejects, the fast path hands over (returns None)."""
    from pybridge.cuda.kernel import plan_for

    plan = plan_for(parse_signature(SAXPY))
    args = (a, x, y, out, n)
    fast = plan.fast(args)
    saved, plan.fast = plan.fast, None
    try:
        general = plan.bind(args)
    except (TypeError, ValueError, OverflowError, KeyError, ZeroDivisionError):
        general = None
    finally:
        plan.fast = saved
    if fast is None:
        return
    assert general is not None, f"fast path accepted what the general check rejects: {args}"
    # the same bytes for the kernel (floats may stay unrounded: packing rounds them the same way)
    assert struct.pack("@fPPPq", *fast[0]) == struct.pack("@fPPPq", *general[0]) and fast[1] == general[1]
    assert np.float32(fast[0][0]) == np.float32(general[0][0])  # and the same for a C float (cffi)
    assert [id(o) for o in fast[2]] == [id(o) for o in general[2]]


@needs_cc
def test_launch_without_a_current_context_makes_it_current_and_retries(recording_driver, monkeypatch):
    import pybridge.cuda.kernel as kmod
    from pybridge.cuda.errors import CudaError

    calls, rc = recording_driver
    k = kmod.Kernel(_Function(), SAXPY, module=_Module())
    args = (2.0, FakeCAI(16, 4), FakeCAI(32, 4), FakeCAI(48, 4), 4)
    k(*args, grid=1, block=32)  # first launch: chooses the direct path
    made_current = []

    def ensure(device=0):  # what pushing the primary context does for the driver
        made_current.append(device)
        rc[0] = 0

    monkeypatch.setattr(kmod, "ensure_context", ensure)
    rc[0] = 201  # CUDA_ERROR_INVALID_CONTEXT: nothing current on this thread
    k(*args, grid=1, block=32)
    assert made_current == [0] and len(calls) == 3 and calls[-1][5] == calls[-2][5]
    monkeypatch.setattr(kmod, "ensure_context", lambda device=0: None)
    rc[0] = 201  # still no context after ensure_context(): the driver's error, raised
    with pytest.raises(CudaError) as info:
        k(*args, grid=1, block=32)
    assert info.value.code == 201


# ------------------------------------------------------------------ Futhark handle export


@pytest.fixture
def pretend_cuda_library():
    """A real Futhark library (c backend) whose handles take the cuda export path: values_raw
    gives a host pointer here, which is all the export code reads (no consumer runs)."""
    import pybridge.futhark as pf
    from pybridge.paths import find_build_file

    so = find_build_file("reference/c/libprobe.so")
    if so is None:
        pytest.skip("reference/c/libprobe.so not built: run `make` (it obtains the Futhark compiler)")
    lib = pf.load(so)
    lib.backend = "cuda"
    syncs = []
    real_sync = lib.context.sync
    lib.context.sync = lambda: (syncs.append(1), real_sync())[1]
    yield lib, syncs
    lib.backend = "c"
    lib.close()


def test_futhark_export_syncs_once_and_checks_validity_every_time(pretend_cuda_library):
    import gc

    from pybridge import interop
    from pybridge.futhark import InvalidHandleError

    lib, syncs = pretend_cuda_library
    x = np.arange(7, dtype=np.float32)
    h = lib.types["[]f32"].new(x)
    first = h.__cuda_array_interface__
    assert first == {"shape": (7,), "typestr": "<f4", "data": (h.data_pointer(), False), "strides": None,
                     "version": 3, "stream": None}
    assert len(syncs) == 1
    first["shape"] = (99,)  # a consumer scribbling on its copy changes nothing for the next one
    assert h.__cuda_array_interface__["shape"] == (7,) and len(syncs) == 1
    info, owner = interop.import_dlpack(h.__dlpack__(stream=1), producer=h)
    assert (info.ptr, info.shape, info.dtype, info.device_type) == (h.data_pointer(), (7,), np.float32, interop.KDLCUDA)
    owner.release()
    assert h.__dlpack_device__() == (interop.KDLCUDA, 0)
    with pytest.raises(BufferError):
        h.__dlpack__(copy=True)
    with pytest.raises(ValueError):
        h.__dlpack__(stream=0)
    g = lib.saxpy(2.0, h, h)  # another value: its own first export syncs again
    assert g.__cuda_array_interface__["data"][0] == g.data_pointer() and len(syncs) == 2
    h.free()
    with pytest.raises(InvalidHandleError):
        h.__cuda_array_interface__
    with pytest.raises(InvalidHandleError):
        h.__dlpack__()
    before = len(interop._futhark_exports)
    del g
    gc.collect()
    assert len(interop._futhark_exports) == before - 1  # entries go with their handles


def test_futhark_export_is_absent_off_cuda():
    import pybridge.futhark as pf
    from pybridge.paths import find_build_file

    so = find_build_file("reference/c/libprobe.so")
    if so is None:
        pytest.skip("reference/c/libprobe.so not built: run `make` (it obtains the Futhark compiler)")
    with pf.load(so) as lib:
        h = lib.types["[]f32"].new(np.ones(3, np.float32))
        assert not hasattr(h, "__cuda_array_interface__")
        view = np.from_dlpack(h)  # host memory on the c backend: a zero-copy NumPy view
        np.testing.assert_array_equal(view, np.ones(3, np.float32))
        assert view.ctypes.data == h.data_pointer() and h.__dlpack_device__() == (1, 0)
        del view
        h.free()
        assert not hasattr(h, "__cuda_array_interface__")  # AttributeError first, not InvalidHandleError


class CountingCAI:
    """A v2 producer (PyTorch's form) over host memory that counts reads of its interface."""

    def __init__(self, host: np.ndarray) -> None:
        self.host, self.reads = host, 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return {"typestr": "<f4", "shape": self.host.shape, "strides": None,
                "data": (self.host.ctypes.data, False), "version": 2}


def test_from_cuda_reads_the_interface_once(pretend_cuda_library):
    lib, _ = pretend_cuda_library
    t = lib.types["[]f32"]
    producer = CountingCAI(np.arange(5, dtype=np.float32))
    h = t.from_cuda(producer)
    assert producer.reads == 1
    np.testing.assert_array_equal(h.numpy(), np.arange(5, dtype=np.float32))
    h.free()
    with pytest.raises(TypeError, match="dtype"):
        t.from_cuda(FakeCAI(16, 3, typestr="<f8"))
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        t.from_cuda(np.ones(3, np.float32))
