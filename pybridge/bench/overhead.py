"""``pybridge bench overhead``: the host cost of one call, against the floors beneath it.

Futhark (tests/reference/probe.fut, cuda backend where built and a GPU is present, else c):
``trivial : i32 -> i32`` through pybridge (default, abi and api modes), the bare cffi call,
futhark-ffi, and a C loop calling the same library (entry + sync, as pybridge's scalar call does);
``saxpy`` on resident handles (pybridge vs the bare cffi call, one sync per batch); ``chain30`` on a
resident array with a sync per call (pybridge vs the C loop).

CUDA (build/cuda/saxpy, a small n so that the host, not the GPU, sets the pace): pybridge's checked
Kernel call, its prepared form, the cffi host launcher (checked and prepared), PyCUDA's
``prepared_async_call``, CuPy's RawKernel on the same cubin, and C loops of ``cuLaunchKernel`` and of
``launch_saxpy``, plus CUDA graph replay. Each row: per-launch time over batches of back-to-back
launches with one context synchronisation per batch.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from ..cliargs import backend
from .cdriver import DriverUnavailable, run_driver
from .common import cuda_sync, gpu_status, optional, positive_int, probe_library, pycuda_status, row, skipped
from .timing import Progress, measure, measure_interleaved

HELP = "per-call host overhead: Futhark entry points and CUDA launches vs bare cffi, futhark-ffi, CuPy, C loops"

SAXPY = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"

# impl names used by the targets in report.py
FUT_DEFAULT, FUT_FFI, FUT_CFFI_ABI, FUT_CFFI_API, FUT_C = (
    "pybridge (default mode)", "futhark-ffi", "bare cffi (ABI)", "bare cffi (API)", "C loop")
K_CHECKED, K_PREPARED, K_PREPARED_RAW = "pybridge Kernel (checked)", "pybridge Kernel.prepare()", "pybridge prepared .raw()"
K_LAUNCH = "pybridge cuda.launch(s, cfg, k, ...) (checked)"
L_CHECKED, L_PREPARED = "cffi launcher (checked)", "cffi launcher .prepare()"
CUPY_RAW, PYCUDA_PREPARED = "CuPy RawKernel", "PyCUDA prepared_async_call"
C_LAUNCH, C_LAUNCHER, GRAPH = "C loop cuLaunchKernel", "C loop launch_saxpy", "CUDA graph replay (per kernel)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", type=backend(), default=None, help="Futhark backend (default: cuda with a GPU, else c)")
    p.add_argument("--calls", type=positive_int, default=None, help="calls per timed batch")
    p.add_argument("--n", type=positive_int, default=4096, help="CUDA saxpy length (small: host-bound)")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    quick = getattr(args, "quick", False)
    calls = args.calls or (300 if quick else 5000)
    repeat = 3 if quick else 9
    gpu, why = gpu_status()
    backend = args.backend or ("cuda" if gpu and probe_library("cuda") else "c")
    rows: list[dict[str, Any]] = []
    with Progress(2, "overhead", enabled=not quick) as bar:
        rows += futhark_rows(backend, calls, repeat, quick)
        bar.step("futhark")
        if gpu:
            rows += cuda_rows(args.n, calls, repeat)
        else:
            for impl in (K_CHECKED, K_LAUNCH, K_PREPARED, L_CHECKED, L_PREPARED, PYCUDA_PREPARED, CUPY_RAW, C_LAUNCH,
                         C_LAUNCHER, GRAPH):
                rows.append(skipped("cuda-launch", impl, why, args.n))
        bar.step("cuda")
    return rows


# ------------------------------------------------------------------ Futhark


def futhark_rows(backend: str, calls: int, repeat: int, quick: bool) -> list[dict[str, Any]]:
    import pybridge.futhark as pf

    b = f"futhark-call ({backend})"
    so = probe_library(backend)
    if so is None:
        return [skipped(b, "all", f"no probe library for {backend}: run `make futhark FUTHARK_BACKEND={backend}` in a checkout")]
    rows: list[dict[str, Any]] = []
    lib = pf.load(so)
    mode = getattr(lib, "mode", None) or "?"
    # Every scalar-call row is measured interleaved with the others (pybridge and the bare call in
    # turn): measured one after the other, a drift of the machine between rows read as pybridge's cost.
    fns: dict[str, tuple[Any, Any]] = {FUT_DEFAULT: (lambda: lib.trivial(1), None)}
    notes = {FUT_DEFAULT: f"lib.trivial(1), mode {mode}"}
    failed: dict[str, str] = {}
    for m in ("abi", "api"):
        try:
            other = pf.load(so, mode=m)
        except Exception as e:  # noqa: BLE001 - api mode needs a compiler and the header
            failed[f"pybridge ({m} mode)"] = f"{type(e).__name__}: {str(e)[:100]}"
            continue
        fns[f"pybridge ({m} mode)"] = (lambda o=other: o.trivial(1), None)
        raw_fn, ctx, out = other.lib.futhark_entry_trivial, other.context.ptr, other.ffi.new("int32_t *")
        sync_fn = other.lib.futhark_context_sync

        def bare(raw_fn: Any = raw_fn, ctx: Any = ctx, out: Any = out, sync_fn: Any = sync_fn) -> None:
            raw_fn(ctx, out, 1)
            sync_fn(ctx)

        bare_name = FUT_CFFI_ABI if m == "abi" else FUT_CFFI_API
        fns[bare_name] = (bare, None)
        notes[bare_name] = "entry + futhark_context_sync"
    timed = measure_interleaved(fns, calls=calls, repeat=repeat)
    for name in (FUT_DEFAULT, "pybridge (abi mode)", FUT_CFFI_ABI, "pybridge (api mode)", FUT_CFFI_API):
        if name in timed:
            rows.append(row(b, name, None, timed[name], **({"note": notes[name]} if name in notes else {})))
        elif name in failed:
            rows.append(skipped(b, name, failed[name]))
    rows.append(_futhark_ffi_row(b, so, calls, repeat))
    try:
        got = run_driver("futhark-scalar", so, calls)["ns_per_call"]
        rows.append(row(b, FUT_C, None, {"median_us": got[0], "min_us": got[1]}, note="entry + sync in C"))
    except (DriverUnavailable, KeyError, OSError) as e:
        rows.append(skipped(b, FUT_C, str(e)))

    # An array entry point on resident handles (one sync per batch) vs the bare cffi call.
    n = 1000 if quick else 100_000
    a = f"futhark-array-call ({backend})"
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    hx, hy = lib.types["[]f32"].new(x), lib.types["[]f32"].new(x)
    entry, free = lib.lib.futhark_entry_saxpy, lib.lib.futhark_free_f32_1d
    ctx, outp, px, py = lib.context.ptr, lib.ffi.new("struct futhark_f32_1d **"), hx.ptr, hy.ptr

    def bare_saxpy() -> None:
        entry(ctx, outp, 2.0, px, py)
        free(ctx, outp[0])

    timed = measure_interleaved({"pybridge lib.saxpy(a, hx, hy).free()": (lambda: lib.saxpy(2.0, hx, hy).free(), lib.sync),
                                 "bare cffi entry + free": (bare_saxpy, lib.sync)}, calls=calls // 5, repeat=repeat)
    rows += [row(a, name, n, t) for name, t in timed.items()]

    # chain30 with a sync per call: pybridge vs the same library from C.
    c = f"futhark-chain30 ({backend})"
    fn = lib.entry_points["chain30"]

    def chain() -> None:
        fn(hx).free()
        lib.sync()

    rows.append(row(c, "pybridge chain30(h).free(); sync()", n, measure(chain, calls=calls // 10, repeat=repeat)))
    try:
        got = run_driver("futhark-array", so, "chain30", calls // 10, n)["ns_per_call"]
        rows.append(row(c, FUT_C, n, {"median_us": got[0], "min_us": got[1]}, note="entry + free + sync in C"))
    except (DriverUnavailable, KeyError, OSError) as e:
        rows.append(skipped(c, FUT_C, str(e), n))
    hx.free()
    hy.free()
    lib.close()
    return rows


def _futhark_ffi_row(b: str, so: Any, calls: int, repeat: int) -> dict[str, Any]:
    import importlib.util
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    if importlib.util.find_spec("futhark_ffi") is None:
        return skipped(b, FUT_FFI, "futhark-ffi not installed (pip install futhark-ffi)")
    if not so.with_name("probe.c").exists():
        return skipped(b, FUT_FFI, "no generated probe.c (fixture library): futhark-ffi compiles the compiler's C")
    tmp = Path(tempfile.mkdtemp(prefix="ffi-baseline-"))
    for ext in ("c", "h", "json"):
        shutil.copy(so.with_name(f"probe.{ext}"), tmp)
    # `python -m futhark_ffi.build` does nothing in 0.16 (no __main__ guard): call main().
    code = "import sys; sys.argv=['build','probe']; import futhark_ffi.build as b; b.main()"
    from ..executables import child_env

    env = child_env()  # run in tmp (ours): python -c imports from there first
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if Path(cuda_home, "include", "cuda.h").exists():  # cuda backend: futhark-ffi's cffi build needs the headers
        env["CFLAGS"] = f"{env.get('CFLAGS', '')} -I{cuda_home}/include".strip()
        env["LDFLAGS"] = f"{env.get('LDFLAGS', '')} -L{cuda_home}/lib64 -L{cuda_home}/lib64/stubs".strip()
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return skipped(b, FUT_FFI, f"futhark-ffi build failed: {proc.stderr.strip()[-160:]}")
    sys.path.insert(0, str(tmp))
    try:
        from futhark_ffi import Futhark

        fut = Futhark(importlib.import_module("_probe"))
        return row(b, FUT_FFI, None, measure(lambda: fut.trivial(1), calls=calls, repeat=repeat), note="fut.trivial(1)")
    finally:
        sys.path.remove(str(tmp))


# ------------------------------------------------------------------ CUDA


def cuda_rows(n: int, calls: int, repeat: int) -> list[dict[str, Any]]:
    b = "cuda-launch"
    ok, why = pycuda_status()
    rows: list[dict[str, Any]] = []
    from ..paths import find_build_file

    cubin = find_build_file("cuda/saxpy.cubin")
    so = find_build_file("cuda/libsaxpy.so")
    if ok:
        from pybridge import cuda

        mod = cuda.load_module("saxpy")
        k = mod.kernel(SAXPY)
        rng = np.random.default_rng(0)
        x, y = cuda.to_device(rng.random(n, dtype=np.float32)), cuda.to_device(rng.random(n, dtype=np.float32))
        out = cuda.empty(n, np.float32)
        grid = cuda.grid_for(n, 256)
        sync = cuda_sync()
        rows.append(row(b, K_CHECKED, n, measure(lambda: k(2.0, x, y, out, n, grid=grid, block=256), sync,
                                                 calls=calls, repeat=repeat), note=k.launch_path))
        cfg = cuda.LaunchConfig(grid=grid, block=256)
        launch = cuda.launch
        rows.append(row(b, K_LAUNCH, n, measure(lambda: launch(None, cfg, k, 2.0, x, y, out, n), sync,
                                                calls=calls, repeat=repeat), note="positional: no keyword binding"))
        p = k.prepare(2.0, x, y, out, n, grid=grid, block=256)
        rows.append(row(b, K_PREPARED, n, measure(p, sync, calls=calls, repeat=repeat)))
        if p.raw is not None:
            rows.append(row(b, K_PREPARED_RAW, n, measure(p.raw, sync, calls=calls, repeat=repeat),
                            note="the C call alone, returns the CUDA code"))
        fn = k.function
        g3, b3, args = (grid, 1, 1), (256, 1, 1), (2.0, x.ptr, y.ptr, out.ptr, n)
        rows.append(row(b, PYCUDA_PREPARED, n, measure(lambda: fn.prepared_async_call(g3, b3, None, *args), sync,
                                                       calls=calls, repeat=repeat), note="packed values, no checks"))
        try:
            lnch = cuda.load_launchers("saxpy")
            f = lnch.launch_saxpy
            rows.append(row(b, L_CHECKED, n, measure(lambda: f(2.0, x, y, out, n), sync, calls=calls, repeat=repeat),
                            note=f"cffi {lnch.mode.split(' ')[0]} mode"))
            lp = f.prepare(2.0, x, y, out, n)
            rows.append(row(b, L_PREPARED, n, measure(lp, sync, calls=calls, repeat=repeat)))
        except Exception as e:  # noqa: BLE001
            rows.append(skipped(b, L_CHECKED, f"{type(e).__name__}: {e}", n))
        cp, cwhy = optional("cupy")
        if cp is not None and cubin is not None:
            f2 = cp.RawModule(path=str(cubin)).get_function("saxpy")
            cx, cy, cout = cp.asarray(x), cp.asarray(y), cp.empty(n, cp.float32)
            cargs = (np.float32(2.0), cx, cy, cout, np.int64(n))
            rows.append(row(b, CUPY_RAW, n, measure(lambda: f2((grid,), (256,), cargs), sync, calls=calls, repeat=repeat),
                            note="same cubin, numpy scalars"))
        else:
            rows.append(skipped(b, CUPY_RAW, cwhy or "no saxpy.cubin", n))
    else:
        for impl in (K_CHECKED, K_LAUNCH, K_PREPARED, L_CHECKED, L_PREPARED, PYCUDA_PREPARED, CUPY_RAW):
            rows.append(skipped(b, impl, why, n))
    try:
        if cubin is None:
            raise DriverUnavailable("no build/cuda/saxpy.cubin (make cuda)")
        got = run_driver("cuda-kernel", cubin, "saxpy", calls, n)
        rows.append(row(b, C_LAUNCH, n, {"median_us": got["ns_per_call"][0], "min_us": got["ns_per_call"][1]}))
        rows.append(row(b, GRAPH, n, {"median_us": got["graph_ns_per_kernel"][0],
                                      "min_us": got["graph_ns_per_kernel"][1]}, note=f"{calls} launches per graph"))
    except (DriverUnavailable, KeyError, OSError) as e:
        rows.append(skipped(b, C_LAUNCH, str(e), n))
    try:
        if so is None:
            raise DriverUnavailable("no build/cuda/libsaxpy.so (make cuda)")
        got = run_driver("cuda-launcher", so, "launch_saxpy", calls, n)["ns_per_call"]
        rows.append(row(b, C_LAUNCHER, n, {"median_us": got[0], "min_us": got[1]}))
    except (DriverUnavailable, KeyError, OSError) as e:
        rows.append(skipped(b, C_LAUNCHER, str(e), n))
    return rows
