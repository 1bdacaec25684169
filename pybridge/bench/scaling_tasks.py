"""What ``pybridge bench scaling`` runs on the workers: one function per (row, implementation), each
``fn(comm, *blocks)`` for ``pybridge.dask.spmd`` (device blocks on GPU workers, NumPy on CPU ones),
and the one-device timings ("direct": the same work in one worker, no Dask in the timed loop).

The pybridge implementations go through ``pybridge.dask.blocks.call_entry`` (what every pybridge.dask
task does: the worker's resident context, blocks in and out without a copy); "peer" is the same
graph with CuPy (NumPy on CPU) doing the block's work; "floor" is the same graph doing none.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from ..dask import phases
from ..dask.blocks import array_module, call_entry, wait_for_device

# ---------------------------------------------------------------- per-rank work


def floor(comm: Any, *blocks: Any) -> Any:
    """Dask's own cost of the graph: the task returns a one-element slice of its first block (and
    when its worker records phases, its start and end: the runs' times beside pybridge's)."""
    clock = phases.clock(False)
    if clock is not None:
        clock.finish(rank=comm.rank, size=comm.size)
    return blocks[0][:1]


def synced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for a ``da.map_blocks`` graph, ending as every timed task does: its GPU work waited
    for (``pbd.map_blocks(..., sync=True)`` and ``pbd.spmd(..., sync=True)`` do the same)."""

    def run(*blocks: Any) -> Any:
        out = fn(*blocks)
        wait_for_device(out)
        return out

    return run


def first(x: Any, y: Any) -> Any:
    """B0's plain-Dask task: the block passed through (no work), ending as every timed task does
    (its GPU work waited for). A module-level function, as a Dask user writes one: a closure
    (``synced(...)``) would be pickled by value with every task and slow plain Dask down."""
    clock = phases.clock(False)
    wait_for_device(x)
    if clock is not None:
        clock.finish()
    return x


def saxpy_block(x: Any, y: Any, a: Any) -> Any:
    """B0's Dask + CuPy task (NumPy on CPU workers): the same saxpy as pybridge's, written as a CuPy
    user writes it, ending as every timed task does. Module-level for the reason ``first`` is."""
    clock = phases.clock(False)
    out = a * x + y
    wait_for_device(out)
    if clock is not None:
        clock.finish()
    return out


def task_costs(entry: Any, a: Any, block_len: int, gpu: bool, batch: int = 200, batches: int = 5) -> dict[str, float]:
    """On a worker: µs per call of each B0 task function on a block of ``block_len`` elements made
    there (the median of ``batches`` batches of ``batch`` calls, after one warm-up batch), the
    scheduler and the network left out: ``pybridge`` (``blocks.map_block`` as a worker runs it,
    its shared call unpickled as a worker gets it, ``sync=True``), ``pybridge_nosync`` (the same
    without the wait), ``entry`` (the entry point alone on handles made beforehand: Futhark's part),
    ``peer`` (B0's CuPy / NumPy saxpy task) and ``plain`` (plain Dask's pass-through task)."""
    import pickle

    from ..dask.blocks import BlockCall, Shared, map_block
    from ..dask.workers import worker_slot
    from ..futhark import ArrayKind

    xp: Any = np
    if gpu:
        import cupy

        xp = cupy
    x = xp.ones(block_len, np.float32)
    location = ((0, block_len),)
    calls = {sync: pickle.loads(pickle.dumps(Shared(BlockCall(entry, [a, None, None], [1, 2], (1,), sync)))) for sync in (True, False)}
    slot = worker_slot(entry.library)
    ep = slot.library.entry_points[entry.name]
    kind = slot.library.types[ep.info.inputs[1].type]
    assert isinstance(kind, ArrayKind)  # saxpy's x: an array type
    handle = kind.from_cuda(x) if gpu else kind.new(x)

    def entry_alone() -> None:
        with slot.lock:
            ep(a, handle, handle).free()

    fns: dict[str, Callable[[], Any]] = {
        "pybridge": lambda: map_block(calls[True], (0,), location, x, x),
        "pybridge_nosync": lambda: map_block(calls[False], (0,), location, x, x),
        "entry": entry_alone,
        "peer": lambda: saxpy_block(x, x, a),
        "plain": lambda: first(x, x),
    }
    out = {}
    for name, fn in fns.items():
        times = []
        for i in range(batches + 1):
            wait_for_device(x)
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            if i:
                times.append((time.perf_counter() - t0) / batch * 1e6)
        out[name] = float(np.median(times))
    wait_for_device(x)
    with slot.lock:
        handle.free()
    return out


def saxpy_iter(entry: Any, iters: int, a: float) -> Callable[..., Any]:
    def run(comm: Any, xs: Any, ys: Any) -> Any:
        return call_entry(entry, (np.int32(iters), np.float32(a), xs, ys))

    return run


def saxpy_iter_peer(iters: int, a: float) -> Callable[..., Any]:
    def run(comm: Any, xs: Any, ys: Any) -> Any:
        a32 = np.float32(a)
        for _ in range(iters):
            ys = a32 * xs + ys
        return ys

    return run


def make_b(n: int, seed: int) -> Callable[..., Any]:
    """B of the matmul row, made on rank 0 only (an empty block elsewhere), to be broadcast."""

    def run(comm: Any, a: Any) -> Any:
        xp = array_module(a)
        if comm.rank == 0:
            return xp.random.default_rng(seed).standard_normal((n, n), dtype=np.float32)
        return xp.empty((0, n), np.float32)

    return run


def broadcast_b(n: int) -> Callable[..., Any]:
    def run(comm: Any, b: Any) -> Any:
        return comm.broadcast(b if comm.rank == 0 else None, 0, shape=(n, n), dtype=np.float32)

    return run


def matmul_futhark(entry: Any) -> Callable[..., Any]:
    def run(comm: Any, a: Any, b: Any) -> Any:
        return call_entry(entry, (a, b))

    return run


def matmul_peer(comm: Any, a: Any, b: Any) -> Any:
    return a @ b  # cuBLAS SGEMM on GPUs (CUPY_TF32=0: float32 arithmetic), NumPy's BLAS on CPUs


_launchers: Any = None


def matmul_kernel(comm: Any, a: Any, b: Any) -> Any:
    """pybridge's own CUDA matmul (kernels_cu/matmul.cu through pybridge.cuda's host launcher), on
    the worker's current CuPy stream."""
    global _launchers
    import cupy

    from .. import cuda

    if _launchers is None:
        _launchers = cuda.load_launchers("matmul")
    m, k = a.shape
    n = b.shape[1]
    c = cupy.empty((m, n), np.float32)
    _launchers.launch_matmul(a, b, c, m, n, k, stream=cupy.cuda.get_current_stream())
    return c


def mandelbrot_frame(entry: Any, side: int, max_iter: int) -> Callable[..., Any]:
    """Rank r's frame: the view [-2.25, 0.75] x [-1.5, 1.5] shifted by r/100 of a pixel (another
    image, the same work: at 2048² and 2000 iterations the four frames' iteration totals differ by
    less than 0.01%). The frame stays on the GPU (``on_device``: the entry point takes only
    scalars, so no argument says where its result goes)."""
    d = np.float32(3.0 / side)

    def run(comm: Any, frame: Any) -> Any:
        x0 = np.float32(-2.25 + comm.rank * float(d) / 100)
        args = (np.int64(side), np.int64(side), x0, np.float32(-1.5), d, d, np.int32(max_iter))
        return call_entry(entry, args, on_device=True)

    return run


# ---------------------------------------------------------------- transfers, timed inside the task


def _device_sync(x: Any) -> None:
    if array_module(x) is not np:
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _median_seconds(step: Callable[[], Any], on: Any, repeat: int, before: Callable[[], Any] | None = None) -> Any:
    """Median seconds of ``step()`` over ``repeat`` runs after one warm-up (the device idle first)."""
    out = []
    for i in range(repeat + 1):
        _device_sync(on)
        if before is not None:
            before()
        t0 = time.perf_counter()
        step()
        if i:
            out.append(time.perf_counter() - t0)
    return np.asarray([np.median(out)])


def p2p_bandwidth(nbytes: int, repeat: int) -> Callable[..., Any]:
    """Rank 0 sends ``nbytes`` to rank 1 (``exchange``); every rank returns seconds per transfer."""

    def run(comm: Any, block: Any) -> Any:
        buf = array_module(block).ones(nbytes, np.uint8)
        sends = {1: buf} if comm.rank == 0 else {}
        recvs = {0: ((nbytes,), np.uint8)} if comm.rank == 1 else {}
        return _median_seconds(lambda: comm.exchange(sends, recvs), buf, repeat)

    return run


def allreduce_time(count: int, repeat: int) -> Callable[..., Any]:
    """Seconds of an all-reduce (sum) of ``count`` float32 on every rank, ranks lined up first."""

    def run(comm: Any, block: Any) -> Any:
        x = array_module(block).ones(count, np.float32)
        return _median_seconds(lambda: comm.allreduce(x), x, repeat, before=comm.barrier)

    return run


# ---------------------------------------------------------------- one device, no Dask


def direct(fn: Callable[..., Any], make_inputs: Callable[[Any], tuple[Any, ...]], gpu: bool, repeat: int) -> list[float]:
    """On a worker (submitted as a task): ``fn(Rank(0, 1), *inputs)`` timed as call + device sync,
    one warm-up, ``repeat`` runs, inputs made there first."""
    from ..dask.spmd import Rank

    xp: Any = np
    if gpu:
        import cupy

        xp = cupy
    inputs = make_inputs(xp)
    samples = []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        out = fn(Rank(0, 1), *inputs)
        if gpu:
            xp.cuda.runtime.deviceSynchronize()
        if i:
            samples.append(time.perf_counter() - t0)
        del out
    return samples
