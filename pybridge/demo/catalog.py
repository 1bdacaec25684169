"""The project's own kernels (kernels_cu/*.cu): declarations, launch configurations, whole operations.

One entry per module of docs/DESIGN.md's table. For each: the kernel declarations (which drive
argument checks and pybridge.testing's strategies), and here the Python functions that run a whole
operation on a stream (``cuda_sum`` runs both passes), shared by the demo, the tests and the
benchmarks. The host launchers declare themselves in their .cu files (``make`` writes
``lib<mod>.launchers.json``; :func:`pybridge.cuda.load_launchers`). The NumPy references the
kernels are tested against are the examples' (:mod:`pybridge.demo.examples`).

The constants below mirror the ``#define``s of the .cu files (a CPU test checks they agree); the
launch configurations are the ones the C host launchers choose, so both paths do identical work
(and the deterministic sum gives identical bits through either).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cuda import _driver
from ..cuda.arrays import DeviceArray, as_device_array, empty, zeros
from ..cuda.context import ensure_context, pycuda_driver
from ..cuda.errors import pycuda_errors
from ..cuda.kernel import Kernel, proxy_stream
from ..cuda.launch_config import LaunchConfig, grid_for, shared_config
from ..cuda.module import load_module
from ..cuda.streams import DEFAULT_STREAM, Stream, as_stream
from ..interop import ArrayInfo

__all__ = [
    "MODULES",
    "ModuleEntry",
    "cuda_chain",
    "cuda_chain_unfused",
    "cuda_histogram",
    "cuda_mandelbrot",
    "cuda_matmul",
    "cuda_saxpy",
    "cuda_scan",
    "cuda_sum",
    "get_kernel",
]

# ---------------------------------------------------------------- constants shared with kernels_cu
GRID_STRIDE_BLOCK = 256
PB_MAX_GRID_STRIDE_BLOCKS = 4096  # common.cuh
SAXPY_BLOCK = 256  # saxpy.cu
SAXPY_UNROLL = 4
SAXPY_BLOCK_ELEMS = SAXPY_BLOCK * SAXPY_UNROLL * 4
SUM_BLOCK = 256  # reduce.cu
SUM_MAX_PARTIALS = 1024
SCAN_BLOCK = 256  # scan.cu
SCAN_ITEMS = 32
SCAN_TILE = SCAN_BLOCK * SCAN_ITEMS
MM_BM = 128  # matmul.cu
MM_BN = 128
MM_THREADS = 256
HIST_BLOCK = 256  # histogram.cu
MANDEL_BLOCK = (16, 16)  # mandelbrot.cu
# Dynamic shared memory usable without a per-kernel opt-in; beyond it the Python path uses
# histogram_global (the C launcher opts in up to the device limit instead).
SHARED_MEM_DEFAULT_LIMIT = 48 * 1024


@dataclass(frozen=True)
class ModuleEntry:
    name: str
    kernels: dict[str, str]  # kernel name -> declaration


MODULES: dict[str, ModuleEntry] = {
    "saxpy": ModuleEntry(
        "saxpy",
        {"saxpy": "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"},
    ),
    "reduce": ModuleEntry(
        "reduce",
        {
            "sum_partial": "sum_partial(const float* x[n], float* partials[min((n + 255) / 256, 1024)], int64 n)",
            "sum_final": "sum_final(const float* partials[num_partials], float* out[1], int64 num_partials)",
            # scratch: a ticket counter that must be 0 (the kernel leaves it 0), then the partials
            "sum_single": "sum_single(const float* x[n], float* out[1], int64 n, float* scratch[min((n + 255) / 256, 1024) + 1])",
        },
    ),
    "scan": ModuleEntry(
        "scan",
        {
            # scratch: the tile counter and one 64-bit status word per tile (zeroed before each launch)
            "scan_lookback": "scan_lookback(const float* x[n], float* out[n], int64 n, uint64* scratch[1 + (n + 8191) / 8192])",
        },
    ),
    "matmul": ModuleEntry(
        "matmul",
        {"matmul": "matmul(const float* a[m*k], const float* b[k*n], float* c[m*n], int32 m, int32 n, int32 k)"},
    ),
    "histogram": ModuleEntry(
        "histogram",
        {
            "histogram": "histogram(const int32* x[n], int32* bins[nbins], int64 n, int32 nbins)",
            "histogram_global": "histogram_global(const int32* x[n], int32* bins[nbins], int64 n, int32 nbins)",
        },
    ),
    "mandelbrot": ModuleEntry(
        "mandelbrot",
        {
            "mandelbrot": "mandelbrot(int32* out[h*w], int32 w, int32 h, float x0, float y0, float dx, float dy, "
            "int32 max_iter)"
        },
    ),
    "chain": ModuleEntry(
        "chain",
        {
            "chain": "chain(const float* x[n], float* out[n], int64 n, int32 nops)",
            "chain_step": "chain_step(const float* x[n], float* out[n], int64 n, int32 k)",
        },
    ),
}


# ---------------------------------------------------------------- launch configurations


# Launch configurations are immutable: the helpers below hand out one object per distinct
# configuration of plain ints instead of building (and re-checking) one per call.
_MAX_CACHED_CONFIGS = 4096
_config = shared_config


_grid_stride_configs: dict[int, LaunchConfig] = {}


def grid_stride_config(n: int) -> LaunchConfig:
    """saxpy, chain, chain_step, histogram_global: as pb_grid_stride_blocks in common.cuh."""
    if type(n) is int:
        config = _grid_stride_configs.get(n)
        if config is not None:
            return config
    config = LaunchConfig(grid_for(n, GRID_STRIDE_BLOCK, max_blocks=PB_MAX_GRID_STRIDE_BLOCKS), GRID_STRIDE_BLOCK)
    if type(n) is int:
        if len(_grid_stride_configs) >= _MAX_CACHED_CONFIGS:
            _grid_stride_configs.clear()
        _grid_stride_configs[n] = config
    return config


def sum_num_partials(n: int) -> int:
    """Blocks of sum_partial (and partial sums) for n elements: fixed by n alone (determinism)."""
    return 0 if n <= 0 else min(-(-n // SUM_BLOCK), SUM_MAX_PARTIALS)


def sum_scratch_floats(n: int) -> int:
    """Scratch launch_sum needs (floats): sum_single's ticket counter (word 0, at the same place for
    every n, so one zeroed scratch serves any n) and the partials. The counter must be zero before
    the first launch on it; every launch leaves it zero."""
    return sum_num_partials(n) + 1


def saxpy_config(n: int) -> LaunchConfig:
    """As launch_saxpy: one pass, SAXPY_BLOCK_ELEMS elements per block (float4s, unrolled)."""
    return _config(max(1, -(-n // SAXPY_BLOCK_ELEMS)), SAXPY_BLOCK, 0)


def scan_num_tiles(n: int) -> int:
    return 0 if n <= 0 else -(-n // SCAN_TILE)


def scan_scratch_floats(n: int) -> int:
    """Scratch launch_scan needs (floats): the tile counter and a 64-bit status word per tile."""
    return 2 * (1 + scan_num_tiles(n))


def matmul_config(m: int, n: int) -> LaunchConfig:
    return _config((max(1, -(-n // MM_BN)), max(1, -(-m // MM_BM))), MM_THREADS, 0)


def mandelbrot_config(w: int, h: int) -> LaunchConfig:
    bx, by = MANDEL_BLOCK
    return _config((max(1, -(-w // bx)), max(1, -(-h // by))), MANDEL_BLOCK, 0)


_sm_count: dict[int, int] = {}


def _multiprocessors(device: int = 0) -> int:
    if device not in _sm_count:
        ensure_context(device)
        drv = pycuda_driver()
        _sm_count[device] = int(drv.Device(device).get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT))
    return _sm_count[device]


def histogram_config(n: int, nbins: int, sms: int) -> tuple[str, LaunchConfig]:
    """(kernel name, config): shared-memory bins when they fit without opt-in, else global atomics."""
    smem = 4 * nbins
    if smem <= SHARED_MEM_DEFAULT_LIMIT:
        blocks = min(max(1, -(-n // HIST_BLOCK)), 4 * max(1, sms))
        return "histogram", _config(blocks, HIST_BLOCK, smem)
    return "histogram_global", grid_stride_config(n)


# ---------------------------------------------------------------- kernels and helpers

_kernels: dict[tuple[str, str | None], Kernel] = {}
_kernels_lock = threading.Lock()


def get_kernel(module: str, name: str | None = None) -> Kernel:
    """The checked Kernel ``name`` (default: the module's first) of one of our modules."""
    k = _kernels.get((module, name))  # a dict read is atomic: no lock on the every-call path
    if k is not None:
        return k
    entry = MODULES[module]
    asked = name
    name = name or next(iter(entry.kernels))
    key = (module, name)
    with _kernels_lock:
        k = _kernels.get(key)
    if k is None:
        k = load_module(module).kernel(entry.kernels[name])
        with _kernels_lock:
            k = _kernels.setdefault(key, k)
    if asked is None:
        with _kernels_lock:
            _kernels.setdefault((module, None), k)
    return k


def _view(buf: DeviceArray, count: int) -> DeviceArray:
    """The first ``count`` elements of a 1-D scratch buffer, as an array of exactly that size."""
    info = ArrayInfo(buf.ptr, (count,), (buf.dtype.itemsize,), buf.dtype)
    return DeviceArray(info, owner=buf)


_scratch = threading.local()


def _scratch_f32(stream: Stream, count: int) -> DeviceArray:
    """Reusable float32 scratch for work queued on ``stream`` (stream order makes reuse safe)."""
    # The cache holds the Stream too: a live stream's handle cannot be reused by a new stream
    # while the old one may still have work reading this buffer. The views of the buffer are
    # kept with it (one per count): they are only ever used on this same stream.
    cache: dict[int, tuple[Stream, DeviceArray, dict[int, DeviceArray]]] | None = getattr(_scratch, "cache", None)
    if cache is None:
        cache = _scratch.cache = {}
    entry = cache.get(stream.cai_stream)
    if entry is None or entry[1].size < count:
        buf = empty(max(count, SUM_MAX_PARTIALS), np.float32)
        if entry is not None:
            stream.synchronize()  # the old buffer may still be in use on this stream
        entry = cache[stream.cai_stream] = (stream, buf, {})
    views = entry[2]
    view = views.get(count)
    if view is None:
        if len(views) >= 64:
            views.clear()
        view = views[count] = _view(entry[1], count)
    return view


def _direct_stream(stream: Any) -> Stream | None:
    """``stream`` as a Stream when operations can queue on it directly (ours or the default
    stream), else None: a foreign stream needs :func:`_execution_stream`'s proxy."""
    s = DEFAULT_STREAM if stream is None else as_stream(stream)
    return None if s.is_external else s


@contextlib.contextmanager
def _execution_stream(stream: Any) -> Iterator[Stream]:
    """The stream to queue a multi-step operation on: ``stream`` itself, or for a foreign stream
    our per-thread proxy fenced both ways (so scratch reuse and ordering stay per stream)."""
    s = as_stream(stream)
    if not s.is_external:
        yield s
        return
    proxy = proxy_stream()
    _driver.stream_wait(proxy.cai_stream, s.cai_stream)
    yield proxy
    _driver.stream_wait(s.cai_stream, proxy.cai_stream)


def _out(out: Any, shape: tuple[int, ...], dtype: Any, stream: Stream) -> DeviceArray:
    if out is None:
        return empty(shape, dtype)
    return as_device_array(out, stream=stream)


def _memset0(arr: DeviceArray, stream: Stream) -> None:
    if arr.nbytes == 0:
        return
    with pycuda_errors(operation="memset"):
        pycuda_driver().memset_d8_async(arr.ptr, 0, arr.nbytes, stream.pycuda)
    arr._set_pending(stream)


def _run(op: Any, stream: Any, *args: Any) -> DeviceArray:
    """``op(s, *args)`` on the execution stream: ``stream`` itself when it is ours or the default
    one (no context manager on this path), else the fenced proxy of :func:`_execution_stream`."""
    s = _direct_stream(stream)
    if s is not None:
        result: DeviceArray = op(s, *args)
        return result
    with _execution_stream(stream) as proxy:
        result = op(proxy, *args)
    return result


# ---------------------------------------------------------------- whole operations


def _saxpy_on(s: Stream, a: float, x: Any, y: Any, out: Any) -> DeviceArray:
    xd = as_device_array(x, stream=s)
    yd = as_device_array(y, stream=s)
    n = xd.size
    o = _out(out, (n,), np.float32, s)
    get_kernel("saxpy")(a, xd, yd, o, n, config=saxpy_config(n), stream=s)
    return o


def cuda_saxpy(a: float, x: Any, y: Any, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """out = a*x + y (float32; product and sum rounded separately, as NumPy does)."""
    return _run(_saxpy_on, stream, a, x, y, out)


_sum_scratch = threading.local()


def _sum_scratch_f32(stream: Stream, count: int) -> DeviceArray:
    """sum_single's scratch for ``stream`` (``count`` floats: ticket counter + partials), zeroed once
    when made: the kernel leaves the counter 0, and stream order keeps launches on one stream from
    overlapping. Separate from :func:`_scratch_f32`, which scan leaves full of status words."""
    cache: dict[int, tuple[Stream, DeviceArray, dict[int, DeviceArray]]] | None = getattr(_sum_scratch, "cache", None)
    if cache is None:
        cache = _sum_scratch.cache = {}
    entry = cache.get(stream.cai_stream)
    if entry is None:
        buf = zeros(SUM_MAX_PARTIALS + 1, np.float32, stream=stream)
        entry = cache[stream.cai_stream] = (stream, buf, {})
    view = entry[2].get(count)
    if view is None:  # at most SUM_MAX_PARTIALS + 1 distinct counts
        view = entry[2][count] = _view(entry[1], count)
    return view


def _sum_on(s: Stream, x: Any, out: Any) -> DeviceArray:
    xd = as_device_array(x, stream=s)
    n = xd.size
    p = sum_num_partials(n)
    o = _out(out, (1,), np.float32, s)
    if p > 0:  # one launch; its last block adds the partials (the counter is word 0 for every n)
        scratch = _sum_scratch_f32(s, sum_scratch_floats(n))
        get_kernel("reduce", "sum_single")(xd, o, n, scratch, config=_config(p, SUM_BLOCK, 0), stream=s)
    else:  # the sum of nothing: 0
        get_kernel("reduce", "sum_final")(_scratch_f32(s, 0), o, 0, config=_config(1, SUM_BLOCK, 0), stream=s)
    return o


def cuda_sum(x: Any, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """The float32 sum of x as a 1-element device array; deterministic (same bits every run)."""
    return _run(_sum_on, stream, x, out)


def _scan_on(s: Stream, x: Any, out: Any) -> DeviceArray:
    xd = as_device_array(x, stream=s)
    n = xd.size
    o = _out(out, (n,), np.float32, s)
    tiles = scan_num_tiles(n)
    if tiles == 0:
        return o
    scratch = _scratch_f32(s, scan_scratch_floats(n))
    _memset0(scratch, s)  # the tile counter and every status word start at 0
    status = DeviceArray(ArrayInfo(scratch.ptr, (tiles + 1,), (8,), np.dtype(np.uint64)), owner=scratch)
    get_kernel("scan", "scan_lookback")(xd, o, n, status, config=_config(tiles, SCAN_BLOCK, 0), stream=s)
    return o


def cuda_scan(x: Any, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """Inclusive prefix sum of float32 x (out may be x itself)."""
    return _run(_scan_on, stream, x, out)


def _matmul_on(s: Stream, a: Any, b: Any, out: Any) -> DeviceArray:
    ad = as_device_array(a, stream=s)
    bd = as_device_array(b, stream=s)
    if ad.ndim != 2 or bd.ndim != 2:
        raise ValueError(f"cuda_matmul needs 2-D matrices, got shapes {ad.shape} and {bd.shape}")
    m, k = ad.shape
    k2, n = bd.shape
    if k != k2:
        raise ValueError(f"cuda_matmul: inner dimensions differ: {ad.shape} @ {bd.shape}")
    o = _out(out, (m, n), np.float32, s)
    if m and n:
        get_kernel("matmul")(ad, bd, o, m, n, k, config=matmul_config(m, n), stream=s)
    return o


def cuda_matmul(a: Any, b: Any, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """C = A @ B for row-major float32 matrices A (m x k) and B (k x n)."""
    return _run(_matmul_on, stream, a, b, out)


def _histogram_on(s: Stream, x: Any, nbins: int, out: Any) -> DeviceArray:
    xd = as_device_array(x, stream=s)
    n = xd.size
    if nbins < 0:
        raise ValueError(f"cuda_histogram: nbins must be >= 0, got {nbins}")
    o = _out(out, (nbins,), np.int32, s)
    if nbins == 0:
        return o
    _memset0(o, s)
    if n:
        name, config = histogram_config(n, nbins, _multiprocessors())
        get_kernel("histogram", name)(xd, o, n, nbins, config=config, stream=s)
    return o


def cuda_histogram(x: Any, nbins: int, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """Counts of each value in [0, nbins) of int32 x (other values ignored), as int32."""
    return _run(_histogram_on, stream, x, nbins, out)


def _mandelbrot_on(s: Stream, w: int, h: int, x0: float, y0: float, dx: float, dy: float, max_iter: int,
                   out: Any) -> DeviceArray:
    o = _out(out, (h, w), np.int32, s)
    if w and h:
        get_kernel("mandelbrot")(o, w, h, x0, y0, dx, dy, max_iter, config=mandelbrot_config(w, h), stream=s)
    return o


def cuda_mandelbrot(w: int, h: int, x0: float, y0: float, dx: float, dy: float, max_iter: int,
                    out: Any = None, *, stream: Any = None) -> DeviceArray:
    """Escape-iteration counts of an h x w image (row-major int32); see kernels_cu/mandelbrot.cu."""
    return _run(_mandelbrot_on, stream, w, h, x0, y0, dx, dy, max_iter, out)


def _chain_on(s: Stream, x: Any, nops: int, out: Any) -> DeviceArray:
    xd = as_device_array(x, stream=s)
    n = xd.size
    o = _out(out, (n,), np.float32, s)
    get_kernel("chain", "chain")(xd, o, n, nops, config=grid_stride_config(n), stream=s)
    return o


def cuda_chain(x: Any, nops: int, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """op nops (... op 1 (x)) in one fused kernel."""
    return _run(_chain_on, stream, x, nops, out)


def _chain_unfused_on(s: Stream, x: Any, nops: int, out: Any) -> DeviceArray:
    xd = as_device_array(x, stream=s)
    n = xd.size
    o = _out(out, (n,), np.float32, s)
    config = grid_stride_config(n)
    if nops <= 0:
        get_kernel("chain", "chain")(xd, o, n, 0, config=config, stream=s)  # the identity
        return o
    step = get_kernel("chain", "chain_step")
    step(xd, o, n, 1, config=config, stream=s)
    for k in range(2, nops + 1):
        step(o, o, n, k, config=config, stream=s)
    return o


def cuda_chain_unfused(x: Any, nops: int, out: Any = None, *, stream: Any = None) -> DeviceArray:
    """The same result as :func:`cuda_chain`, one kernel per op (op 1 into out, then in place)."""
    return _run(_chain_unfused_on, stream, x, nops, out)
