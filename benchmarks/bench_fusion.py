"""Fusion benchmark (GPU): a chain of N elementwise ops, N = 1..30.

Rows: Futhark (futhark/chain.fut on the cuda backend: Futhark fuses the N maps into one kernel),
our hand-written fused kernel (kernels_cu/chain.cu `chain`, one launch), the same op launched N
times (`chain_step`), and eager CuPy / PyTorch (two kernels per op: multiply, add). Data stays
resident on the GPU throughout; pybridge writes into a preallocated output (``out=``), as CuPy's
pool, PyTorch's caching allocator and Futhark's free list reuse memory too. Two tables, both
medians after warm-up: wall time of call + device sync (what a Python caller waits for), and
device time between CUDA events on the primary context's legacy default stream (pybridge.cuda, CuPy
and PyTorch all launch there; Futhark runs in a context of its own, whose streams those events do
not see, so its device column is left empty).

    python benchmarks/bench_fusion.py [--sizes 1024 16777216] [--plot fusion.png]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from pybridge import bench

NS = (1, 2, 4, 8, 16, 30)
A = np.float32(1.0001)


def eager_chain(x, n, mul_add):
    for k in range(1, n + 1):
        x = mul_add(x, k)
    return x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 10, 1 << 24])
    ap.add_argument("--plot", default=os.path.join(os.environ.get("OUT", "."), "fusion.png"))
    ns = ap.parse_args()
    results: dict[tuple[str, int], list[float]] = {}
    device: dict[tuple[str, int], list[float]] = {}

    def record(name: str, size: int, fn, sync, own_context: bool = False) -> None:
        t = bench.time_host(fn, sync, warmup=3, repeat=30)
        results.setdefault((name, size), []).append(t.median_us)
        if own_context:  # events in the primary context do not see another context's streams
            device.setdefault((name, size), []).append(float("nan"))
        elif events:
            device.setdefault((name, size), []).append(bench.time_cuda_events(fn, None, warmup=3, repeat=30).median_us)

    fut = None
    try:
        import pybridge.futhark as pf

        fut = pf.load("chain", backend="cuda")
    except Exception as e:
        print(f"futhark cuda chain not available: {e}")
    try:
        import cupy as cp
    except ImportError:
        cp = None
    try:
        import torch
    except ImportError:
        torch = None
    try:
        from pybridge import cuda
        from pybridge.cuda import catalog
        import pycuda.driver as drv
    except Exception as e:
        catalog = None
        print(f"pybridge.cuda not available: {e}")
    events = catalog is not None  # CUDA events through PyCUDA, in pybridge.cuda's context

    for size in ns.sizes:
        x = np.random.default_rng(0).random(size, dtype=np.float32)
        hx = fut.types["[]f32"].new(x) if fut else None
        cx = cp.asarray(x) if cp is not None else None
        tx = torch.from_numpy(x).cuda() if torch is not None else None
        dx = cuda.to_device(x) if catalog else None
        dout = cuda.empty(size, np.float32) if catalog else None
        for n in NS:
            if fut:
                fn = fut.entry_points[f"chain{n}"]
                record("Futhark chainN (fused by Futhark)", size, lambda: fn(hx).free(), fut.sync, own_context=True)
            if catalog:
                sync = drv.Context.synchronize
                record("pybridge.cuda fused kernel", size, lambda: catalog.cuda_chain(dx, n, dout), sync)
                record("pybridge.cuda N launches", size, lambda: catalog.cuda_chain_unfused(dx, n, dout), sync)
            if cp is not None:
                record("CuPy eager (2 kernels/op)", size,
                       lambda: eager_chain(cx, n, lambda v, k: v * A + np.float32(k) * np.float32(0.001)),
                       cp.cuda.Device().synchronize)
            if torch is not None:
                record("PyTorch eager (2 kernels/op)", size,
                       lambda: eager_chain(tx, n, lambda v, k: v * 1.0001 + k * 0.001), torch.cuda.synchronize)

    names = sorted({k[0] for k in results})
    for table, what in ((results, "wall µs per call, incl. sync"), (device, "device µs per call, CUDA events")):
        for size in ns.sizes if table else ():
            print(f"\nchain of N elementwise ops, {size} f32 elements: median {what}")
            print(f"{'':34}" + "".join(f"{'N=' + str(n):>9}" for n in NS))
            for name in names:
                vals = table.get((name, size), [])
                print(f"{name:34}" + "".join(f"{v:9.1f}" for v in vals))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(ns.sizes), figsize=(6 * len(ns.sizes), 4), squeeze=False)
        for ax, size in zip(axes[0], ns.sizes):
            for name in names:
                ax.plot(NS, results.get((name, size), []), marker="o", label=name)
            ax.set(title=f"{size} elements", xlabel="ops in chain (N)", ylabel="µs per call", yscale="log")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(ns.plot, dpi=100)
        print(f"\nplot: {ns.plot}")
    except Exception as e:
        print(f"no plot: {e}")


if __name__ == "__main__":
    main()
