"""``pybridge demo``: every demo example on the best backend built (and the GPU), checked against
its NumPy reference with pybridge.testing's comparison (:mod:`pybridge.demo.examples`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import catalog, examples
from .examples import Example

__all__ = ["run_demo"]


def _run_futhark_example(ex: Example, libs: dict[Path, Any], size: int | None,
                         backends: Sequence[str]) -> tuple[str, str, str, str]:
    from .. import bench
    from .. import futhark as pf

    for backend in backends:
        found = examples.find_library(ex, backend)
        if found:
            break
    else:
        return ("-", "not built", "-", "run `make` (it obtains the Futhark compiler) to build futhark/*.fut")
    src, path = found
    where = f"{src.kind}:{src.library}/{backend}"
    try:
        lib = libs.get(path) or libs.setdefault(path, pf.load(path))
        fn = lib.entry_points[src.entry]
        args = ex.inputs(size)
        if ex.make_bad_inputs is not None:  # the example demonstrates an error
            bad = ex.make_bad_inputs(np.random.default_rng(0), 4)
            try:
                fn(*bad)
                return (where, "NO ERROR", "-", "expected a Futhark program error")
            except pf.ProgramError as e:
                ok = ex.error_substring is None or ex.error_substring in str(e)
                return (where, "ok" if ok else "WRONG ERROR", "-", str(e).splitlines()[0])
        # Keep inputs in Futhark between calls (the fast path), then time call + sync.
        handles = [lib.types[p.type].new(a) if p.type.startswith("[") else a for p, a in zip(fn.info.inputs, args)]
        result = fn(*handles)
        check = ex.check(args, result, source=src)
        t = bench.time_host(lambda: fn(*handles), lib.sync, warmup=2, repeat=10)
        return (where, "ok" if check.ok else "MISMATCH", str(t), "" if check.ok else check.message[:60])
    except Exception as e:  # the demo reports, it does not crash
        return (where, "ERROR", "-", f"{type(e).__name__}: {str(e).splitlines()[0][:70]}")


def _cuda_call(ex: Example, args: tuple[Any, ...]) -> tuple[Any, Any]:
    """(callable ``run(out)`` running the example's kernels on device-resident inputs, writing into
    ``out`` or a new array when None; result converter). The catalog's operations take the
    example's logical inputs (see examples.py)."""
    from .. import cuda

    dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    op = ex.cuda_op
    get = lambda r: r.get()  # noqa: E731
    if op == "saxpy":
        return (lambda out: catalog.cuda_saxpy(*dev, out)), get
    if op == "sum":
        return (lambda out: catalog.cuda_sum(dev[0], out)), (lambda r: r.get()[0])
    if op == "scan":
        return (lambda out: catalog.cuda_scan(dev[0], out)), get
    if op == "matmul":
        return (lambda out: catalog.cuda_matmul(dev[0], dev[1], out)), get
    if op == "histogram":
        nbins, xs = dev
        return (lambda out: catalog.cuda_histogram(xs, int(nbins), out)), get
    if op == "mandelbrot":
        return (lambda out: catalog.cuda_mandelbrot(*dev, out=out)), get
    if op == "chain":
        nops = int(ex.params["nops"])
        return (lambda out: catalog.cuda_chain(dev[0], nops, out)), get
    raise KeyError(f"no CUDA operation {op!r}")


def _run_cuda_example(ex: Example, size: int | None) -> tuple[str, str, str, str] | None:
    if not ex.cuda_op:
        return None
    where = f"kernels_cu:{ex.cuda_op}"
    try:
        from .. import bench, cuda

        if not cuda.have_pycuda():
            return (where, "skipped", "-", "PyCUDA not installed (pip install 'pybridge[cuda]')")
        import pycuda.driver as drv

        args = ex.inputs(size)
        run, convert = _cuda_call(ex, args)
        result = run(None)
        check = ex.check(args, convert(result))
        # Timed writing into that result: data and outputs stay on the device, as they should in
        # a loop (an allocation per call costs a cuMemAlloc and a synchronising cuMemFree).
        t = bench.time_host(lambda: run(result), drv.Context.synchronize, warmup=2, repeat=10)
        return (where, "ok" if check.ok else "MISMATCH", str(t), "" if check.ok else check.message[:60])
    except Exception as e:  # the demo reports, it does not crash
        return (where, "ERROR", "-", f"{type(e).__name__}: {str(e).splitlines()[0][:70]}")


def run_demo(names: Sequence[str], size: int | None, *, best_backends: Sequence[str],
             built: Mapping[str, Any]) -> int:
    """Run ``names`` (default: the demo examples) on the first of ``best_backends`` built, and on
    the GPU when there is one; print a table; 0 when every result matched its reference."""
    from ..futhark.library import _gpu_present

    try:
        import pybridge.testing  # noqa: F401 - the comparison every check uses
    except ImportError as e:
        print(f"pybridge demo checks results with pybridge.testing, which needs hypothesis: "
              f"pip install 'pybridge[testing]' [{e}]")
        return 1
    gpu, why = _gpu_present()
    names = list(names) or list(examples.DEMO_EXAMPLES)
    libs: dict[Path, Any] = {}
    rows = [("example", "ran on", "result", "time/call (median)", "note")]
    bad = 0
    for name in names:
        ex = examples.get(name)
        r = _run_futhark_example(ex, libs, size, best_backends)
        rows.append((name, *r))
        bad += r[1] not in ("ok", "skipped", "not built")
        if gpu:
            c = _run_cuda_example(ex, size)
            if c:
                rows.append(("", *c))
                bad += c[1] not in ("ok", "skipped")
    for lib in libs.values():
        lib.close()
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("\nTimes: call + device sync, after warm-up, inputs resident (Futhark handles; device arrays "
          "for kernels_cu, writing into a reused out=).")
    if not any(k.startswith("futhark/") for k in built):
        print("\nNo Futhark library was built, so no Futhark example ran. `make` obtains the Futhark "
              "compiler (scripts/install-futhark.sh) and builds futhark/*.fut.")
    if not gpu:
        print(f"No GPU here ({why}): CUDA kernels and the cuda backend were not run. On a machine "
              "with an NVIDIA GPU: `make cuda` and `pip install 'pybridge[cuda]'`.")
    return 1 if bad else 0
