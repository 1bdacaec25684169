"""One-GPU diagnostic for pybridge.dask's task path (no cluster): where a B0 task's time goes (each
piece timed alone, then cProfile of map_block), and whether an idle GPU makes B1's call slower than
back-to-back calls. Prints plain lines. On the GPU machine, after the build:

    CUDA_VISIBLE_DEVICES=0 python3 scripts/gpu_probe_dask.py build/futhark/cuda/libsaxpy.so
"""
import cProfile
import io
import pstats
import sys
import time

import cupy
import numpy as np

import pybridge.dask as pbd
from pybridge.bench import scaling_tasks as tasks
from pybridge.dask import blocks
from pybridge.dask.blocks import BlockCall, Shared, map_block
from pybridge.dask.workers import device_ordinal, worker_device, worker_slot


def per_call_us(fn, n=2000, reps=5):
    out = []
    for i in range(reps + 1):
        cupy.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if i:
            out.append((time.perf_counter() - t0) / n * 1e6)
    return float(np.median(out))


def main(path):
    a = np.float32(2.0)
    entry = pbd.entry(path, "saxpy", backend="cuda", unified_memory=0)
    print("task_costs:", {k: round(v, 2) for k, v in tasks.task_costs(entry, a, 1024, True).items()})
    slot = worker_slot(entry.library)
    lib = slot.library
    ep = lib.entry_points["saxpy"]
    kind = lib.types[ep.info.inputs[1].type]
    x = cupy.ones(1024, np.float32)
    h = kind.from_cuda(x)
    stream = cupy.cuda.get_current_stream()

    def enter_exit():
        with cupy.cuda.Device(0):
            pass

    pieces = {
        "worker_slot": lambda: worker_slot(entry.library),
        "device_ordinal(worker_device)": lambda: device_ordinal(worker_device(entry.library)),
        "from_cuda(cupy).free": lambda: kind.from_cuda(x).free(),
        "entry alone (locked) + free": lambda: ep(a, h, h).free(),
        "entry + context.sync + free": lambda: (lambda r: (lib.context.sync(), r.free()))(ep(a, h, h)),
        "context.sync alone": lambda: lib.context.sync(),
        "stream.synchronize alone": lambda: stream.synchronize(),
        "cupy Device(0) enter/exit": enter_exit,
        "get_current_stream().ptr": lambda: cupy.cuda.get_current_stream().ptr,
        "is_device_array": lambda: blocks.is_device_array(x),
        "cupy saxpy + sync": lambda: (a * x + x, stream.synchronize()),
    }
    with slot.lock:
        for name, fn in pieces.items():
            print(f"piece {name}: {per_call_us(fn):.2f} us")

        def device_view():
            return blocks._device_view(ep(a, h, h), slot, 0, True)

        print(f"piece entry + _device_view (freed when the view dies): {per_call_us(device_view):.2f} us")
    h.free()
    call = Shared(BlockCall(entry, [a, None, None], [1, 2], (1,), True))
    loc = ((0, 1024),)
    for _ in range(500):
        map_block(call, (0,), loc, x, x)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3000):
        map_block(call, (0,), loc, x, x)
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    print("\n".join(s.getvalue().splitlines()[:60]))

    # B1: back-to-back against idle before each call (35 ms, as a Dask run's pause + latency)
    it = np.int32(100)
    n = 2**28
    xs = cupy.ones(n, np.float32)
    ys = cupy.ones(n, np.float32)
    run = tasks.saxpy_iter(entry_iter := pbd.entry(path, "saxpy_iter", backend="cuda", unified_memory=0), 100, 2.0)
    from pybridge.dask.spmd import Rank

    res = {"back-to-back": [], "idle 35 ms": [], "idle 35 ms, events": []}
    for i in range(12):
        for mode in ("back-to-back", "idle 35 ms"):
            if mode != "back-to-back":
                time.sleep(0.035)
            e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()
            t0 = time.perf_counter()
            e0.record()
            out = run(Rank(0, 1), xs, ys)
            e1.record()
            cupy.cuda.runtime.deviceSynchronize()
            t = time.perf_counter() - t0
            if i:
                res[mode].append(t * 1e3)
                if mode != "back-to-back":
                    res["idle 35 ms, events"].append(cupy.cuda.get_elapsed_time(e0, e1))
            del out
    for k, v in res.items():
        print(f"B1 saxpy_iter 2^28 x100 {k}: median {np.median(v):.3f} ms, min {np.min(v):.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
