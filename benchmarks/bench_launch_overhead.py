"""Host overhead of a checked pybridge.cuda launch: argument checks, a Kernel call, catalog ops.

Two modes, same rows:

* CPU (default; no GPU or PyCUDA needed): a stand-in ``pycuda`` package is installed first. Its
  ``Function.prepared_async_call`` is PyCUDA's own Python code (block shape, kwargs, argument
  packing with ``struct``, texture references) with the C++ calls (``_set_block_shape``,
  ``_launch_kernel``) as no-ops; ``mem_alloc`` hands out fake pointers and ``gpuarray.empty`` is a
  minimal GPUArray (cheaper than PyCUDA's, so "before" numbers for allocating rows are
  understated). What remains is pybridge's own Python per call.
* GPU (``--gpu``): real PyCUDA, real launches of build/cuda/saxpy (``make cuda`` first), one
  ``pycuda.driver.Context.synchronize()`` per batch of calls.

    python benchmarks/bench_launch_overhead.py [--n 65536] [--calls 2000] [--repeat 7] [--profile]
    python benchmarks/bench_launch_overhead.py --gpu [--n 65536] [--calls 2000] [--profile]
    PYBRIDGE_CUDA_LAUNCH=prepared python benchmarks/bench_launch_overhead.py --gpu   # PyCUDA's call

To compare with another version of the code, put its checkout first on the path, e.g.
``git archive <rev> pybridge | tar -x -C /tmp/old && PYTHONPATH=/tmp/old python benchmarks/...``;
the script uses only interfaces both versions have.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import struct
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

SAXPY = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"


# ------------------------------------------------------------------ a stand-in PyCUDA (CPU mode)


def install_fake_pycuda() -> None:
    """Put a minimal ``pycuda`` (driver, gpuarray, _pvt_struct) into sys.modules."""
    pycuda: Any = types.ModuleType("pycuda")
    driver: Any = types.ModuleType("pycuda.driver")
    gpuarray: Any = types.ModuleType("pycuda.gpuarray")
    pvt: Any = types.ModuleType("pycuda._pvt_struct")
    tools: Any = types.ModuleType("pycuda.tools")
    pvt.pack = struct.pack
    pvt.calcsize = struct.calcsize
    pycuda.driver, pycuda.gpuarray, pycuda._pvt_struct, pycuda.tools = driver, gpuarray, pvt, tools
    tools.clear_context_caches = lambda: None
    next_ptr = [0x7F0000000000]

    class DeviceAllocation:
        __slots__ = ("ptr",)

        def __init__(self, nbytes: int) -> None:
            self.ptr = next_ptr[0]
            next_ptr[0] += (nbytes + 511) // 512 * 512

        def __int__(self) -> int:
            return self.ptr

        __index__ = __int__

    def mem_alloc(nbytes: int) -> DeviceAllocation:
        return DeviceAllocation(nbytes)

    class Context:
        def push(self) -> None:
            pass

        @staticmethod
        def pop() -> None:
            pass

        @staticmethod
        def synchronize() -> None:
            pass

    class Device:
        def __init__(self, n: int) -> None:
            self.n = n

        @staticmethod
        def count() -> int:
            return 1

        def retain_primary_context(self) -> Context:
            return Context()

        def compute_capability(self) -> tuple[int, int]:
            return (9, 0)

    next_stream = [0x5000]

    class Stream:
        def __init__(self, flags: int = 0) -> None:
            self.handle = next_stream[0]
            next_stream[0] += 16

        def synchronize(self) -> None:
            pass

    class Function:
        """PyCUDA's Function: its Python launch wrapper verbatim, the C++ parts as no-ops."""

        def prepare(self, arg_types: Any, texrefs: Any = None) -> Any:
            self.texrefs = texrefs or []
            self.arg_format = "".join(arg_types)
            return self

        def _set_block_shape(self, x: int, y: int, z: int) -> None:
            pass

        def _launch_kernel(self, grid: Any, block: Any, arg_buf: bytes, shared_size: int, stream: Any) -> None:
            pass

        def prepared_async_call(self, grid: Any, block: Any, stream: Any, *args: Any, **kwargs: Any) -> None:
            if isinstance(block, tuple):
                self._set_block_shape(*block)
            shared_size = kwargs.pop("shared_size", 0)
            if kwargs:
                raise TypeError("unknown keyword arguments: " + ", ".join(kwargs.keys()))
            from pycuda._pvt_struct import pack  # type: ignore[import-not-found]

            arg_buf = pack(self.arg_format, *args)
            for texref in self.texrefs:
                self.param_set_texref(texref)  # type: ignore[attr-defined]  # (never: no texrefs here)
            self._launch_kernel(grid, block, arg_buf, shared_size, stream)

    Function.__module__ = "pycuda._driver"

    class GPUArray:
        def __init__(self, shape: Any, dtype: Any, allocator: Any = mem_alloc, base: Any = None,
                     gpudata: Any = None, strides: Any = None, order: str = "C") -> None:
            self.shape = tuple(int(d) for d in shape)
            self.dtype = np.dtype(dtype)
            size = 1
            for d in self.shape:
                size *= d
            self.size = size
            st, step = [], self.dtype.itemsize
            for d in reversed(self.shape):
                st.append(step)
                step *= max(d, 1)
            self.strides = tuple(strides) if strides is not None else tuple(reversed(st))
            self.gpudata = gpudata if gpudata is not None else (allocator(size * self.dtype.itemsize) if size else None)
            self.base = base

    def empty(shape: Any, dtype: Any, allocator: Any = mem_alloc, order: str = "C") -> GPUArray:
        return GPUArray(shape, dtype, allocator)

    driver.init = lambda flags=0: None
    driver.Device, driver.Context, driver.Stream, driver.Function = Device, Context, Stream, Function
    driver.DeviceAllocation, driver.mem_alloc = DeviceAllocation, mem_alloc
    driver.memset_d8_async = lambda ptr, value, n, stream=None: None
    driver.memset_d8 = lambda ptr, value, n: None
    gpuarray.GPUArray, gpuarray.empty = GPUArray, empty
    for name, mod in (("pycuda", pycuda), ("pycuda.driver", driver), ("pycuda.gpuarray", gpuarray),
                      ("pycuda._pvt_struct", pvt), ("pycuda.tools", tools)):
        sys.modules[name] = mod


# ------------------------------------------------------------------ timing


def per_call_us(fn: Callable[[], Any], sync: Callable[[], Any], calls: int, repeat: int) -> tuple[float, float]:
    """(median, min) microseconds per call over ``repeat`` batches of ``calls`` calls + one sync."""
    for _ in range(max(20, calls // 20)):
        fn()
    sync()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples), min(samples)


def python_calls_per_op(fn: Callable[[], Any], sync: Callable[[], Any], ops: int = 200) -> float:
    fn()
    sync()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(ops):
        fn()
    pr.disable()
    sync()
    stats = pstats.Stats(pr)
    return stats.total_calls / ops  # type: ignore[attr-defined]


def top_functions(fn: Callable[[], Any], ops: int = 500, limit: int = 12) -> None:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(ops):
        fn()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(limit)


# ------------------------------------------------------------------ the rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", action="store_true", help="real PyCUDA launches (needs a GPU and `make cuda`)")
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    ap.add_argument("--repeat", type=int, default=7, help="timed batches (median reported)")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions per row group")
    ns = ap.parse_args()

    if not ns.gpu:
        install_fake_pycuda()

    import pycuda.driver as drv  # type: ignore[import-not-found]

    import pybridge
    from pybridge import cuda
    from pybridge.cuda import catalog
    from pybridge.cuda.arrays import DeviceArray
    from pybridge.cuda.kernel import Kernel, bind_args
    from pybridge.cuda.signature import parse_signature
    from pybridge.interop import ArrayInfo

    n = ns.n
    sig = parse_signature(SAXPY)
    if ns.gpu:
        cuda.ensure_context()
        x = cuda.to_device(np.ones(n, np.float32))
        y = cuda.to_device(np.ones(n, np.float32))
        out = cuda.empty(n, np.float32)
        k = catalog.get_kernel("saxpy")
        sync = drv.Context.synchronize
        where = f"GPU: {drv.Device(0).name()}, PyCUDA {getattr(sys.modules.get('pycuda'), 'VERSION_TEXT', '?')}"
    else:
        cuda.ensure_context()

        def dev(ptr: int) -> Any:
            return DeviceArray(ArrayInfo(ptr, (n,), (4,), np.dtype(np.float32)))

        x, y, out = dev(0x7E0000000000), dev(0x7E0001000000), dev(0x7E0002000000)
        fn = drv.Function()
        k = Kernel(fn, sig)
        for mod, entry in catalog.MODULES.items():  # our kernels, on stand-in functions
            for kname, decl in entry.kernels.items():
                catalog._kernels[(mod, kname)] = Kernel(drv.Function(), decl)
        catalog._kernels[("saxpy", "saxpy")] = k

        def sync() -> None:
            pass

        where = "CPU: stand-in PyCUDA (launch and allocation C++ calls are no-ops)"

    class CAI:  # a foreign CAI producer pointing at our memory
        def __init__(self, d: Any) -> None:
            self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (int(d.ptr), False),
                                             "version": 3, "strides": None, "stream": None}

    cx, cy, cout = CAI(x), CAI(y), CAI(out)
    cfg = catalog.grid_stride_config(n)
    grid = cfg.grid[0]
    stream = cuda.Stream(non_blocking=True)
    launch_mode = "n/a"
    if hasattr(k, "_launch_fn"):
        k(2.0, x, y, out, n, config=cfg)  # picks the launch path
        launch_mode = "PyCUDA _launch_kernel (direct)" if "_direct_launch" in getattr(
            k._launch_fn, "__qualname__", "") else "PyCUDA prepared_async_call"
    values = [2.0, int(x.ptr), int(y.ptr), int(out.ptr), n]

    out1 = cuda.empty(1, np.float32) if ns.gpu else DeviceArray(ArrayInfo(0x7E0003000000, (1,), (4,), np.dtype(np.float32)))
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("floor: function.prepared_async_call (packed values)",
         lambda: k.function.prepared_async_call(cfg.grid, cfg.block, None, *values, shared_size=0)),
        ("bind_args(saxpy, DeviceArrays)", lambda: bind_args(sig, (2.0, x, y, out, n))),
        ("bind_args(saxpy, CAI producers)", lambda: bind_args(sig, (2.0, cx, cy, cout, n))),
        ("Kernel(...) config=, default stream", lambda: k(2.0, x, y, out, n, config=cfg)),
        ("Kernel(...) grid=, block=, default stream", lambda: k(2.0, x, y, out, n, grid=grid, block=256)),
        ("Kernel(...) config=, pybridge Stream", lambda: k(2.0, x, y, out, n, config=cfg, stream=stream)),
        ("Kernel(...) config=, CAI producers", lambda: k(2.0, cx, cy, cout, n, config=cfg)),
        ("catalog.cuda_saxpy(2, x, y, out)", lambda: catalog.cuda_saxpy(2.0, x, y, out)),
        ("catalog.cuda_saxpy(2, x, x) (allocates out)", lambda: catalog.cuda_saxpy(2.0, x, x)),
        ("catalog.cuda_saxpy(2, x, y, out, stream=s)", lambda: catalog.cuda_saxpy(2.0, x, y, out, stream=stream)),
        ("catalog.cuda_sum(x, out1) (2 launches)", lambda: catalog.cuda_sum(x, out1)),
    ]
    def stream_sync() -> None:
        sync()

    print(f"pybridge from {os.path.dirname(pybridge.__file__)}")
    print(f"{where}; n={n}, {ns.calls} calls x {ns.repeat} batches, one sync per batch")
    print(f"Kernel launch path: {launch_mode} (PYBRIDGE_CUDA_LAUNCH={os.environ.get('PYBRIDGE_CUDA_LAUNCH', '')!r})")
    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'median µs':>9}  {'min µs':>7}  {'py calls':>8}")
    for name, f in rows:
        sync()
        for arr in (x, y, out, out1):  # each row starts with nothing pending (no cross-stream waits)
            arr._set_pending(None)
        med, lo = per_call_us(f, stream_sync, ns.calls, ns.repeat)
        calls = python_calls_per_op(f, stream_sync)
        print(f"{name:<{width}}  {med:9.2f}  {lo:7.2f}  {calls:8.0f}")
    if ns.gpu:  # results must still be right after all that
        got = catalog.cuda_saxpy(2.0, x, y).get()
        assert np.array_equal(got, np.full(n, 3.0, np.float32)), "saxpy result is wrong"
        print("check: cuda_saxpy(2, ones, ones) == 3 everywhere")
    if ns.profile:
        for name, f in rows[3:4] + rows[8:9]:
            print(f"\n--- cProfile: {name}")
            top_functions(f)
            sync()


if __name__ == "__main__":
    main()
