"""``pybridge demo``: every demo example on the best backend built (and the GPU), checked against
its NumPy reference with pybridge.testing's comparison (:mod:`pybridge.demo.examples`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..distribution import install_hint
from . import catalog, examples
from .examples import Example

__all__ = ["available_memory", "memory_estimate", "run_demo"]

#: Peak resident memory of ``pybridge demo`` over the bytes of an example's inputs and result: the
#: generators' float64 temporaries, Futhark's copies of inputs and result, the reference's result
#: and the check's arrays. Measured: saxpy at 2**25 elements peaked at 3.2 GB for 384 MB of inputs
#: and result (8.3x) on c; the estimate rounds that up.
MEMORY_FACTOR = 9
_PROBE_SIZE = 1024


def memory_estimate(ex: Example, size: int) -> int:
    """Bytes ``pybridge demo`` needs for ``ex`` at ``size``: inputs and reference result measured at
    a small size, scaled linearly (every example's data grows linearly with its size), times
    :data:`MEMORY_FACTOR`."""
    with np.errstate(all="ignore"):
        args = ex.inputs(_PROBE_SIZE)
        try:
            result = ex.reference(*args)
        except Exception:  # noqa: BLE001 - a reference that cannot run here: count the inputs only
            result = ()
    outs = result if isinstance(result, tuple) else (result,)
    per = sum(np.asarray(a).nbytes for a in args) + sum(
        np.asarray(o).nbytes for o in outs if isinstance(o, (np.ndarray, np.generic, int, float)))
    return int(per * MEMORY_FACTOR * max(size, _PROBE_SIZE) / _PROBE_SIZE)


def available_memory() -> int | None:
    """Bytes this process may still use: MemAvailable of /proc/meminfo, lowered by a cgroup v2
    limit; else the free physical pages (os.sysconf); None when unknown."""
    avail: int | None = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        limit = open("/sys/fs/cgroup/memory.max").read().strip()
        used = int(open("/sys/fs/cgroup/memory.current").read())
        if limit != "max":
            avail = min(avail, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(avail, 0)


def _gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


def _refuse_size(names: Sequence[str], size: int) -> str | None:
    """Why ``size`` cannot fit in memory for one of ``names``, or None."""
    avail = available_memory()
    if avail is None:
        return None
    for name in names:
        ex = examples.get(name)
        need = memory_estimate(ex, size)
        if need > avail:
            fits = int(size * avail / need)
            return (f"--size {size} needs about {_gib(need)} for {name} (its inputs and result, "
                    f"with the copies the demo makes), more than the {_gib(avail)} of memory available; "
                    f"the largest size that fits is about {fits}")
    return None


def _futhark_library(ex: Example) -> tuple[str, Any] | None:
    """(backend, (source, path)) of the example's library on the best backend built for it
    (backends.choose_backend: the rule pf.load and packaged modules follow), or None."""
    from ..backends import BACKENDS, choose_backend

    found = {b: f for b in BACKENDS if (f := examples.find_library(ex, b)) is not None}
    if not found:
        return None
    backend = choose_backend(found)
    return backend, found[backend]


def _run_futhark_example(ex: Example, libs: dict[Path, Any], size: int | None) -> tuple[str, str, str, str]:
    from .. import bench
    from .. import futhark as pf

    chosen = _futhark_library(ex)
    if chosen is None:
        return ("-", "not built", "-", "run `make` (it obtains the Futhark compiler) to build futhark/*.fut")
    backend, (src, path) = chosen
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
                return (where, "ok" if ok else "WRONG ERROR", "-", "raised as expected: " + str(e).splitlines()[0])
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
            return (where, "skipped", "-", f"PyCUDA not installed ({install_hint('cuda')})")
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


def _preload(names: Sequence[str], libs: dict[Path, Any]) -> None:
    """Load the examples' libraries before the table starts, so that the log lines of a first run
    (API-mode bindings compiled) come before it, not between its rows. A library that fails to
    load is left to its row, which reports why."""
    from .. import futhark as pf

    for name in names:
        chosen = _futhark_library(examples.get(name))
        if chosen is not None and chosen[1][1] not in libs:
            try:
                libs[chosen[1][1]] = pf.load(chosen[1][1])
            except Exception:  # noqa: BLE001 - reported by the example's row
                pass


def run_demo(names: Sequence[str], size: int | None, *, built: Mapping[str, Any]) -> int:
    """Run ``names`` (default: the demo examples) on the best backend built for each (and on the GPU
    when there is one); print a table; 0 when every result matched its reference."""
    from ..backends import gpu_present

    try:
        import pybridge.testing  # noqa: F401 - the comparison every check uses
    except ImportError as e:
        print(f"pybridge demo checks results with pybridge.testing, which needs hypothesis: "
              f"{install_hint('testing')} [{e}]")
        return 1
    gpu, why = gpu_present()
    names = list(names) or list(examples.DEMO_EXAMPLES)
    if size is not None:
        refusal = _refuse_size(names, size)
        if refusal:
            print(f"pybridge demo: error: {refusal}", file=sys.stderr)
            return 2
    libs: dict[Path, Any] = {}
    # Each row as soon as its example finishes: fixed widths, the header first.
    widths = (max(7, *(len(n) for n in names)), 30, 10, 18)
    header = ("example", "ran on", "result", "time/call (median)", "note")

    def show(row: Sequence[str]) -> None:
        cells = [str(c).ljust(w) for c, w in zip(row, widths)] + [str(row[4])]
        print("  ".join(cells).rstrip(), flush=True)

    bad = ran = 0
    try:
        _preload(names, libs)
        show(header)
        print("  ".join("-" * w for w in (*widths, 4)), flush=True)
        for name in names:
            ex = examples.get(name)
            r = _run_futhark_example(ex, libs, size)
            show((name, *r))
            bad += r[1] not in ("ok", "skipped", "not built")
            ran += r[1] not in ("skipped", "not built")
            if gpu:
                c = _run_cuda_example(ex, size)
                if c:
                    show(("", *c))
                    bad += c[1] not in ("ok", "skipped")
                    ran += c[1] != "skipped"
    finally:
        for lib in libs.values():
            lib.close()
    print("\nTimes: call + device sync, after warm-up, inputs resident (Futhark handles; device arrays "
          "for kernels_cu, writing into a reused out=).")
    if not any(k.startswith("futhark/") for k in built):
        print("\nNo Futhark library was built, so no Futhark example ran. `make` obtains the Futhark "
              "compiler (scripts/install-futhark.sh) and builds futhark/*.fut.")
    if not gpu:
        print(f"No GPU here ({why}): CUDA kernels and the cuda backend were not run. On a machine "
              f"with an NVIDIA GPU: `make cuda` and `{install_hint('cuda')}`.")
    if not ran:
        reason = "no Futhark library is built (run `make`)" + ("" if gpu else f" and there is no GPU ({why})")
        print(f"pybridge demo: nothing ran: {reason}", file=sys.stderr)
        return 1
    return 1 if bad else 0
