"""Strong and weak scaling of Futhark entry points over 1..N Dask workers (one per GPU where there
are GPUs), against one device without Dask.

- bandwidth-bound: ``saxpy`` (futhark/saxpy.fut), blocks of the two vectors;
- compute-bound: ``matmul`` (futhark/matmul.fut), row blocks of A times the whole B.

Strong scaling keeps the problem fixed (``--saxpy-size``, ``--matmul-size``) and adds workers; weak
scaling grows it with the workers (that size per worker). Each Dask figure is the median wall time
of ``wait(client.persist(result))`` with the inputs already persisted on the workers (CuPy blocks on
GPUs, NumPy on CPUs): the time to compute a distributed result that stays distributed, as the next
step of a pipeline would use it. "direct" is the same entry point called in this process on one
device, inputs already in Futhark (handles), timed as call + sync. ``speedup_vs_direct`` is the
direct time of the same work (weak: the direct time at the per-worker size, times the workers)
over the Dask time; ``efficiency`` is that speedup per worker (1 = perfect scaling).

    pybridge bench scaling --workers 1,2 --backend c          # CPU workers
    pybridge bench scaling --gpus 2 --json scaling.json       # one worker per GPU, cuda backend
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..cliargs import backend, positive_int, positive_int_list
from .timing import time_host

HELP = "strong and weak scaling over 1..N Dask workers / GPUs (saxpy, matmul) vs one device without Dask"

_ROOT = Path(__file__).resolve().parents[2]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=positive_int_list, default="1,2", help="worker counts on CPU, comma-separated (default 1,2)")
    p.add_argument("--gpus", type=positive_int, default=0, help="GPUs to scale over (1..N, one worker each; cuda backend)")
    p.add_argument("--backend", type=backend(), default=None, help="Futhark backend (default: cuda with --gpus, else c)")
    p.add_argument("--saxpy-size", type=positive_int, default=None, help="elements (default 2**22 CPU, 2**28 GPU)")
    p.add_argument("--matmul-size", type=positive_int, default=None, help="n of n-by-n matrices (default 384 CPU, 8192 GPU)")
    p.add_argument("--chunks-per-worker", type=positive_int, default=4, help="Dask chunks per worker (default 4)")
    p.add_argument("--repeat", type=positive_int, default=5, help="timed runs per point (median reported; default 5)")


def _library(prog: str, backend: str) -> str:
    from ..paths import find_build_file

    built = find_build_file(f"futhark/{backend}/lib{prog}.so")
    return str(built) if built is not None else str(_ROOT / "futhark" / f"{prog}.fut")


def _direct(prog: str, backend: str, inputs: list[Any], repeat: int) -> float:
    """Median seconds of one call + sync on one device, inputs already Futhark handles."""
    import pybridge.futhark as pf

    with pf.load(_library(prog, backend), backend=backend) as lib:
        fn = lib.entry_points[prog]
        args = [lib.types[p.type].new(a) if p.type.startswith("[") else a for p, a in zip(fn.info.inputs, inputs)]
        t = time_host(lambda: fn(*args), lib.sync, warmup=1, repeat=repeat)
    return t.median_s


def _device_sync() -> None:
    """On a worker: wait for the GPU (a Dask result is ready when its device work is done)."""
    import sys as _sys

    cupy = _sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.runtime.deviceSynchronize()


def _persisted(client: Any, whole: list[Any]) -> list[Any]:
    """Whole array arguments put on the workers once (pbd.scatter), as a pipeline keeps them: a
    graph that embeds one ships it from the client at every run (256 MB for matmul 8192)."""
    import pybridge.dask as pbd

    return [pbd.scatter(client, w) if getattr(w, "ndim", 0) > 0 else w for w in whole]


def _timed_persist(client: Any, make: Any, repeat: int, gpu: bool) -> float:
    """Median seconds of ``wait(client.persist(make()))``, plus a device sync on the workers when on
    GPUs; the first run (context creation, kernel loading) is not timed."""
    from distributed import wait

    samples = []
    for i in range(repeat + 1):
        out = make()
        t0 = time.perf_counter()
        res = client.persist(out)
        wait(res)
        if gpu:
            client.run(_device_sync)
        if i:
            samples.append(time.perf_counter() - t0)
        del res
    return float(np.median(samples))


def _graphs(kind: str, backend: str, args: list[Any]) -> dict[str, Any]:
    """impl -> a function making the graph: pybridge's, the same graph with CuPy / NumPy doing the
    block's work, and the same blocks passed through (Dask's own cost: the floor)."""
    import dask
    import dask.array as da

    import pybridge.dask as pbd

    ref = pbd.entry(_library(kind, backend), kind, backend=backend)
    chunked = next(a for a in args if hasattr(a, "chunks"))
    plain = [dask.delayed(a.future) if isinstance(a, pbd.Whole) else a for a in args]
    if kind == "saxpy":
        peer = lambda: da.map_blocks(lambda a, x, y: a * x + y, *plain, dtype=np.float32, name=_fresh("peer"))  # noqa: E731
    else:
        peer = lambda: da.map_blocks(lambda a, b: a @ b, *plain, dtype=np.float32, name=_fresh("peer"))  # noqa: E731
    # a fresh key name per run: the same keys again could find the last run's results still held
    return {
        "pybridge": lambda: pbd.map_blocks(ref, *args, name=_fresh("pybridge")),
        "peer": peer,
        "floor": lambda: chunked.map_blocks(lambda b: b, dtype=chunked.dtype, name=_fresh("floor")),
    }


def _fresh(prefix: str) -> str:
    import uuid

    return f"{prefix}-{uuid.uuid4().hex}"


def _dask(client: Any, kind: str, backend: str, chunked: list[Any], whole: list[Any], order: list[str], repeat: int,
          gpu: bool) -> dict[str, float]:
    """Median seconds per graph (see :func:`_graphs`), inputs persisted on the workers beforehand."""
    from distributed import wait

    ins = client.persist(chunked)
    wait(ins)
    whole = _persisted(client, whole)
    it_c, it_w = iter(ins), iter(whole)
    args = [next(it_c) if k == "c" else next(it_w) for k in order]
    return {impl: _timed_persist(client, make, repeat, gpu) for impl, make in _graphs(kind, backend, args).items()}


def _direct_inputs(kind: str, n: int) -> list[Any]:
    rng = np.random.default_rng(0)
    if kind == "saxpy":
        return [np.float32(2.0), rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)]
    return [rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)]


def _problem(kind: str, n: int, nchunks: int, gpu: bool) -> tuple[list[Any], list[Any], list[str]]:
    """(chunked dask inputs, made on the workers; whole inputs; argument order, 'c'hunked or 'w'hole)."""
    import dask.array as da

    import pybridge.dask as pbd

    rng = da.random.default_rng(0)
    if kind == "saxpy":
        step = -(-n // nchunks)
        xs = [rng.standard_normal(n, chunks=step, dtype=np.float32) for _ in range(2)]
        return [pbd.to_device(x) for x in xs] if gpu else xs, [np.float32(2.0)], ["w", "c", "c"]
    a = rng.standard_normal((n, n), chunks=(-(-n // nchunks), n), dtype=np.float32)
    b: Any = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    if gpu:
        import cupy

        a, b = pbd.to_device(a), cupy.asarray(b)
    return [a], [b], ["c", "w"]


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from distributed import Client

    import pybridge.dask as pbd

    gpu = args.gpus > 0
    backend = args.backend or ("cuda" if gpu else "c")
    counts = list(range(1, args.gpus + 1)) if gpu else [int(w) for w in str(args.workers).split(",")]
    quick = getattr(args, "quick", False)  # pybridge bench's common flag: small sizes, few repeats
    sizes = {
        "saxpy": args.saxpy_size or (2**16 if quick else 2**28 if gpu else 2**22),
        "matmul": args.matmul_size or (64 if quick else 8192 if gpu else 384),
    }
    if quick:
        args.repeat = min(args.repeat, 2)
    rows: list[dict[str, Any]] = []
    for kind in ("saxpy", "matmul"):
        n = sizes[kind]
        direct = _direct(kind, backend, _direct_inputs(kind, n), args.repeat)
        rows.append({"benchmark": f"{kind} strong", "impl": "direct (no Dask, 1 device)", "size": n,
                     "median_us": direct * 1e6, "workers": 1, "backend": backend})
        for w in counts:
            cluster = pbd.local_cluster(devices=list(range(w))) if gpu else pbd.local_cluster(n_workers=w)
            with cluster, Client(cluster) as client:
                for mode, size in (("strong", n), ("weak", n * w if kind == "saxpy" else int(round(n * w ** (1 / 3))))):
                    chunked, whole, order = _problem(kind, size, w * args.chunks_per_worker, gpu)
                    times = _dask(client, kind, backend, chunked, whole, order, args.repeat, gpu)
                    # The same work on one device without Dask: the direct time (strong), w times it (weak).
                    one_device = direct if mode == "strong" else direct * w
                    unit = f"{'GPU' if gpu else 'worker'}{'s' if w > 1 else ''}"
                    peer = "Dask + CuPy" if gpu else "Dask + NumPy"
                    for impl, label in (("pybridge", f"dask {w} {unit}"), ("peer", f"{peer}, same graph, {w} {unit}"),
                                        ("floor", f"Dask alone (blocks passed through), {w} {unit}")):
                        t = times[impl]
                        rows.append({
                            "benchmark": f"{kind} {mode}", "impl": label, "size": size, "median_us": t * 1e6,
                            "workers": w, "backend": backend,
                            "speedup_vs_direct": one_device / t, "efficiency": one_device / t / w,
                        })
    return rows


if __name__ == "__main__":
    from .cli import main

    sys.exit(main(["scaling", *sys.argv[1:]]))
