"""``pybridge bench fusion``: a chain of N elementwise ops, N = 1..30 (the fusion curve).

Rows: Futhark (futhark/chain.fut: Futhark fuses the N maps into one kernel), the hand-fused kernel
(kernels_cu/chain.cu ``chain``, one launch), the same op launched N times (``chain_step``), and
eager CuPy / PyTorch (two kernels per op). Data stays resident; pybridge writes into a reused
``out=``. Each row: wall time of call + device sync (what a Python caller waits for) and, in the
primary context, device time between CUDA events (Futhark runs in a context of its own, whose
streams those events do not see: no device time for it). Without a GPU: the Futhark rows on the
c backend.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from .common import gpu_status, optional, positive_int, pycuda_status, row, skipped
from .timing import Progress, summarize, time_cuda_events, time_host

HELP = "fusion curve: a chain of N elementwise ops, Futhark vs hand-fused/unfused kernels vs CuPy/PyTorch eager"

NS = (1, 2, 4, 8, 16, 30)
A = np.float32(1.0001)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=positive_int, nargs="+", default=None, help="elements (default 1024 and 2^24)")


def _eager(x: Any, n: int, mul_add: Any) -> Any:
    for k in range(1, n + 1):
        x = mul_add(x, k)
    return x


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import pybridge.futhark as pf

    quick = getattr(args, "quick", False)
    gpu, why = gpu_status()
    sizes = args.sizes or ([1024] if quick else [1 << 10, 1 << 24])
    ns = (1, 30) if quick else NS
    warmup, repeat = (2, 5) if quick else (3, 30)
    rows: list[dict[str, Any]] = []
    backend = "cuda" if gpu else "c"
    try:
        fut = pf.load("chain", backend=backend)
    except Exception as e:  # noqa: BLE001
        fut = None
        rows.append(skipped("fusion", f"Futhark chainN ({backend})", f"{type(e).__name__}: {str(e)[:120]}"))
    cp = torch = catalog = None
    if gpu:
        cp, _ = optional("cupy")
        torch, _ = optional("torch")
        ok, pwhy = pycuda_status()
        if ok:
            from pybridge import cuda
            from pybridge.demo import catalog
            from .common import cuda_sync
        else:
            rows.append(skipped("fusion", "pybridge.cuda", pwhy))
    else:
        rows.append(skipped("fusion", "pybridge.cuda / CuPy / PyTorch", why))

    def record(name: str, size: int, n: int, fn: Any, sync: Any, events: bool) -> None:
        t = time_host(fn, sync, warmup=warmup, repeat=repeat)
        extra: dict[str, Any] = {}
        if events:
            extra["device_us"] = time_cuda_events(fn, None, warmup=warmup, repeat=repeat).median_us
        rows.append(row("fusion", name, size, {"median_us": t.median_us, "min_us": t.min_s * 1e6}, ops=n, **extra))

    steps = len(sizes) * len(ns)
    with Progress(steps, "fusion", enabled=not quick) as bar:
        for size in sizes:
            x = np.random.default_rng(0).random(size, dtype=np.float32)
            hx = fut.types["[]f32"].new(x) if fut else None
            cx = cp.asarray(x) if cp is not None else None
            tx = torch.from_numpy(x).cuda() if torch is not None else None
            dx = cuda.to_device(x) if catalog else None
            dout = cuda.empty(size, np.float32) if catalog else None
            sync = cuda_sync() if catalog else None
            for n in ns:
                if fut:
                    fn = fut.entry_points[f"chain{n}"]
                    record(f"Futhark chainN ({backend}, fused by Futhark)", size, n, lambda: fn(hx).free(), fut.sync, False)
                if catalog:
                    record("pybridge.cuda fused kernel", size, n, lambda: catalog.cuda_chain(dx, n, dout), sync, True)
                    record("pybridge.cuda N launches", size, n, lambda: catalog.cuda_chain_unfused(dx, n, dout), sync, True)
                if cp is not None:
                    record("CuPy eager (2 kernels/op)", size, n,
                           lambda: _eager(cx, n, lambda v, k: v * A + np.float32(k) * np.float32(0.001)),
                           cp.cuda.Device().synchronize, catalog is not None)
                if torch is not None:
                    record("PyTorch eager (2 kernels/op)", size, n,
                           lambda: _eager(tx, n, lambda v, k: v * 1.0001 + k * 0.001), torch.cuda.synchronize,
                           catalog is not None)
                bar.step(f"{size} N={n}")
            if hx is not None:
                hx.free()
    if fut:
        fut.close()
    return rows


__all__ = ["HELP", "add_arguments", "run", "summarize"]
