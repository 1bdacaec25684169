"""Memory-bound kernels against the device-to-device copy: saxpy, sum, inclusive scan (float32).

Rows per size: ``copy`` (cuMemcpyDtoDAsync), pybridge's kernels through the checked Kernel path
(``catalog.cuda_*``) and through the C host launchers (``lib<mod>.so``), Futhark's programs on the
cuda backend (futhark/saxpy.fut, dot.fut's ``sum``, scan.fut's ``prefix_sum``), CuPy's ``sum`` and
``cumsum``. Bytes counted: each input read once, each output written once (copy 8n, saxpy 12n,
sum 4n, scan 8n); "% of copy" is GB/s over the copy's GB/s at the same size, in the same run.
Timing: see pybridge.bench.gpu (events with the host kept ahead; Futhark by wall clock).
Without a GPU, NumPy rows at small sizes (and a line saying why the GPU rows are skipped).

    python -m pybridge.bench.bandwidth [--sizes 24 26 28] [--repeat 15]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .common import show
from .gpu import (add_size_arguments, futhark_cuda, host_timing, main_for, mark_target, run_gpu_or_cpu, time_device,
                  with_share)

HELP = "saxpy, sum and scan against the device-to-device copy bandwidth (GB/s, % of copy)"

BYTES_PER_ELEMENT = {"copy": 8, "saxpy": 12, "sum": 4, "scan": 8}
DEFAULT_EXPONENTS = (24, 26, 28)
CPU_EXPONENTS = (20, 22)
SAXPY_A = 2.5
# The target: pybridge's saxpy, sum and scan at >= 90% of the copy's bandwidth, 2^24..2^28 elements.
TARGET_PCT = 90.0
TARGET_SIZES = (1 << 24, 1 << 28)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_size_arguments(parser, "element counts as powers of two", "LOG2N", DEFAULT_EXPONENTS, CPU_EXPONENTS, 15)


def _row(benchmark: str, impl: str, n: int, seconds: float, timer: str) -> dict[str, Any]:
    gbs = BYTES_PER_ELEMENT[benchmark] * n / seconds / 1e9
    return {"benchmark": f"bandwidth: {benchmark}", "op": benchmark, "impl": impl, "size": n,
            "median_us": seconds * 1e6, "GB/s": gbs,
            "% of copy": float("nan"), "timer": timer}


def _with_copy_share(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with_share(rows, "GB/s", lambda r: r["op"] == "copy", "% of copy")
    return mark_target(rows, "% of copy", TARGET_PCT, lambda r: r["op"] != "copy" and TARGET_SIZES[0] <= r["size"] <= TARGET_SIZES[1])


def _cpu_rows(exponents: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for e in exponents:
        n = 1 << e
        rng = np.random.default_rng(e)
        x = rng.random(n, dtype=np.float32)
        y = rng.random(n, dtype=np.float32)
        out = np.empty_like(x)
        a = np.float32(SAXPY_A)
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("copy", lambda: np.copyto(out, x)),
            ("saxpy", lambda: np.add(np.multiply(a, x, out=out), y, out=out)),
            ("sum", lambda: x.sum()),
            ("scan", lambda: np.cumsum(x, out=out)),
        ]
        for name, fn in cases:
            rows.append(_row(name, "NumPy (CPU)", n, host_timing(fn, None, repeat).median_s, "wall"))
    return _with_copy_share(rows)


def _futhark_cases(n: int, x: np.ndarray, y: np.ndarray) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(benchmark, call, sync) for Futhark's programs, inputs already on the device."""
    cases = []
    saxpy, dot, scan = futhark_cuda("saxpy"), futhark_cuda("dot"), futhark_cuda("scan")
    fx, fy = saxpy.types["[]f32"].new(x), saxpy.types["[]f32"].new(y)
    f = saxpy.entry_points["saxpy"]
    cases.append(("saxpy", lambda: f(SAXPY_A, fx, fy).free(), saxpy.sync))
    dx = dot.types["[]f32"].new(x)
    fsum = dot.entry_points["sum"]
    cases.append(("sum", lambda: fsum(dx), dot.sync))  # an f32 result: read back to the host
    sx = scan.types["[]f32"].new(x)
    fscan = scan.entry_points["prefix_sum"]
    cases.append(("scan", lambda: fscan(sx).free(), scan.sync))
    return cases


def _gpu_rows(exponents: list[int], repeat: int, futhark: bool) -> list[dict[str, Any]]:
    from pybridge import cuda
    from pybridge.demo import catalog
    from pybridge.cuda.context import pycuda_driver

    drv = pycuda_driver()
    try:
        import cupy as cp
    except ImportError:
        cp = None
        show("CuPy not installed: its rows are skipped")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    saxpy_lib, sum_lib, scan_lib = (cuda.load_launchers(m) for m in ("saxpy", "reduce", "scan"))
    for e in exponents:
        n = 1 << e
        rng = np.random.default_rng(e)
        x = rng.uniform(-1, 1, n).astype(np.float32)
        y = rng.uniform(-1, 1, n).astype(np.float32)
        dx, dy, dout = cuda.to_device(x), cuda.to_device(y), cuda.empty(n, np.float32)
        d1 = cuda.empty(1, np.float32)
        partials = cuda.zeros(catalog.sum_scratch_floats(n), np.float32)  # sum_single's counter: 0
        scratch = cuda.empty(catalog.scan_scratch_floats(n), np.float32)

        def ev(benchmark: str, impl: str, fn: Callable[[], Any]) -> None:
            rows.append(_row(benchmark, impl, n, time_device(fn, repeat=repeat).median_s, "events"))

        ev("copy", "cuMemcpyDtoD", lambda: drv.memcpy_dtod_async(dout.ptr, dx.ptr, 4 * n, None))
        ev("saxpy", "pybridge Kernel", lambda: catalog.cuda_saxpy(SAXPY_A, dx, dy, out=dout))
        ev("saxpy", "pybridge launcher", lambda: saxpy_lib.launch_saxpy(SAXPY_A, dx, dy, dout, n))
        ev("sum", "pybridge Kernel", lambda: catalog.cuda_sum(dx, out=d1))
        ev("sum", "pybridge launcher", lambda: sum_lib.launch_sum(dx, d1, n, partials))
        ev("scan", "pybridge Kernel", lambda: catalog.cuda_scan(dx, out=dout))
        ev("scan", "pybridge launcher", lambda: scan_lib.launch_scan(dx, dout, n, scratch))
        if cp is not None:
            cx = cp.asarray(x)
            ev("sum", "CuPy sum", lambda: cx.sum())
            ev("scan", "CuPy cumsum", lambda: cp.cumsum(cx))
            del cx
        if futhark:
            try:
                for benchmark, fn, sync in _futhark_cases(n, x, y):
                    t = host_timing(fn, sync, repeat)
                    rows.append(_row(benchmark, "Futhark cuda", n, t.median_s, "wall"))
            except Exception as err:  # noqa: BLE001 - a missing build skips the rows, with the reason
                notes.append(f"Futhark rows skipped at 2^{e}: {err}")
        drv.Context.synchronize()
        del dx, dy, dout
    for note in dict.fromkeys(notes):
        show(note)
    return _with_copy_share(rows)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    return run_gpu_or_cpu(args, _gpu_rows, _cpu_rows, DEFAULT_EXPONENTS, CPU_EXPONENTS)


COLUMNS = ("benchmark", "size", "impl", "median_us", "GB/s", "% of copy", "timer")


def main(argv: list[str] | None = None) -> None:
    main_for(sys.modules[__name__], COLUMNS, lambda r: (list(BYTES_PER_ELEMENT).index(r["op"]), r["size"]), argv)


if __name__ == "__main__":
    main()
