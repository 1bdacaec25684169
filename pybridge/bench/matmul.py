"""float32 matrix product against cuBLAS: pybridge's kernels_cu/matmul.cu, Futhark's
futhark/matmul.fut (cuda backend), cuBLAS SGEMM through CuPy (float32 arithmetic, TF32 off) and
cuBLAS with TF32 tensor cores (through PyTorch with ``allow_tf32``, for reference).

Square n x n x n products; TFLOP/s counts 2 n^3 operations; "% of cuBLAS" is over cuBLAS SGEMM at
the same size, in the same run. "rel err" is ||C - C_ref||_F / ||C_ref||_F against a float64
product of the same float32 inputs (CuPy DGEMM): ~1e-7..1e-6 for float32 arithmetic, ~1e-4 for
TF32, so it also shows which rows really ran in float32. Inputs uniform in [-1, 1), fresh per size.
Timing: see pybridge.bench.gpu (events; Futhark by wall clock). Without a GPU: NumPy rows.

    python -m pybridge.bench.matmul [--sizes 2048 4096 8192] [--repeat 10]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .common import show
from .gpu import (add_size_arguments, futhark_cuda, host_timing, main_for, mark_target, run_gpu_or_cpu, time_device,
                  with_share)

HELP = "float32 matmul: pybridge kernel, Futhark, cuBLAS SGEMM (no TF32) and TF32 (TFLOP/s, % of cuBLAS)"

DEFAULT_SIZES = (2048, 4096, 8192)
CPU_SIZES = (256, 512)
SGEMM = "cuBLAS SGEMM (CuPy)"
# The target: pybridge's float32 matmul at >= 75% of cuBLAS SGEMM, sizes 2048..8192.
TARGET_PCT = 75.0
TARGET_SIZES = (2048, 8192)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_size_arguments(parser, "matrix sizes", "N", DEFAULT_SIZES, CPU_SIZES, 10)


def _row(impl: str, n: int, seconds: float, timer: str, err: float = float("nan")) -> dict[str, Any]:
    return {"benchmark": "matmul", "impl": impl, "size": n, "median_us": seconds * 1e6,
            "TFLOP/s": 2.0 * n**3 / seconds / 1e12, "% of cuBLAS": float("nan"), "rel err": err, "timer": timer}


def _with_cublas_share(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with_share(rows, "TFLOP/s", lambda r: r["impl"] == SGEMM, "% of cuBLAS")
    return mark_target(rows, "% of cuBLAS", TARGET_PCT, lambda r: TARGET_SIZES[0] <= r["size"] <= TARGET_SIZES[1])


def _cpu_rows(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        c = np.empty((n, n), np.float32)
        t = host_timing(lambda: np.matmul(a, b, out=c), None, repeat)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        rows.append(_row("NumPy (CPU)", n, t.median_s, "wall", float(np.linalg.norm(c - ref) / np.linalg.norm(ref))))
    return rows


def _tf32_matmul() -> Callable[[Any, Any, Any], Any] | None:
    """out = a @ b on TF32 tensor cores (PyTorch, allow_tf32), or None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None

    def mm(a: Any, b: Any, out: Any) -> Any:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return torch.matmul(a, b, out=out)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev

    return mm


def _gpu_rows(sizes: list[int], repeat: int, futhark: bool) -> list[dict[str, Any]]:
    os.environ.setdefault("CUPY_TF32", "0")  # cuBLAS in float32 arithmetic (CuPy's default too)
    from pybridge import cuda
    from pybridge.demo import catalog

    try:
        import cupy as cp
    except ImportError:
        cp = None
        show("CuPy not installed: the cuBLAS rows and the error column are skipped")
    tf32 = _tf32_matmul()
    if tf32 is None:
        show("PyTorch not installed: the cuBLAS TF32 row is skipped")
    lib = cuda.load_launchers("matmul")
    rows: list[dict[str, Any]] = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        # The output starts as NaN: an element the kernel skips shows in the error column.
        da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.to_device(np.full((n, n), np.nan, np.float32))
        ref = None
        if cp is not None:
            ref = cp.matmul(cp.asarray(a, cp.float64), cp.asarray(b, cp.float64))
            ref_norm = float(cp.linalg.norm(ref))

        def rel_err(c: Any) -> float:
            if ref is None:
                return float("nan")
            return float(cp.linalg.norm(cp.asarray(c).astype(cp.float64) - ref)) / ref_norm

        def ev(impl: str, fn: Callable[[], Any], out: Any) -> None:
            t = time_device(fn, inner=2, repeat=repeat, warmup=1)
            rows.append(_row(impl, n, t.median_s, "events", rel_err(out)))

        if cp is not None:
            ca, cb, cc = cp.asarray(a), cp.asarray(b), cp.empty((n, n), cp.float32)
            ev(SGEMM, lambda: cp.matmul(ca, cb, out=cc), cc)
            if tf32 is not None:
                import torch

                ta, tb = torch.as_tensor(ca, device="cuda"), torch.as_tensor(cb, device="cuda")
                tc = torch.empty((n, n), dtype=torch.float32, device="cuda")
                ev("cuBLAS TF32 (PyTorch)", lambda: tf32(ta, tb, tc), cp.asarray(tc))
                del ta, tb, tc
            del ca, cb, cc
        ev("pybridge Kernel", lambda: catalog.cuda_matmul(da, db, out=dc), dc)
        ev("pybridge launcher", lambda: lib.launch_matmul(da, db, dc, n, n, n), dc)
        if futhark:
            try:
                fut = futhark_cuda("matmul")
                fa, fb = fut.types["[][]f32"].new(a), fut.types["[][]f32"].new(b)
                f = fut.entry_points["matmul"]
                t = host_timing(lambda: f(fa, fb).free(), fut.sync, max(3, repeat // 3))
                out = f(fa, fb)
                c = out.numpy()
                out.free()
                rows.append(_row("Futhark cuda", n, t.median_s, "wall", rel_err(cp.asarray(c) if cp is not None else c)))
                del fa, fb
            except Exception as err:  # noqa: BLE001 - a missing build skips the row, with the reason
                show(f"Futhark row skipped at {n}: {err}")
        del da, db, dc, ref
    return _with_cublas_share(rows)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    return run_gpu_or_cpu(args, _gpu_rows, _cpu_rows, DEFAULT_SIZES, CPU_SIZES)


COLUMNS = ("benchmark", "size", "impl", "median_us", "TFLOP/s", "% of cuBLAS", "rel err", "timer")


def main(argv: list[str] | None = None) -> None:
    main_for(sys.modules[__name__], COLUMNS, lambda r: r["size"], argv)


if __name__ == "__main__":
    main()
