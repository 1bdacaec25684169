"""Times the variants of benchmarks/matmul_variants.cu (a cubin built from kernels_cu/matmul.cu's
kernel body) against cuBLAS SGEMM (CuPy, float32), with each variant's error against a float64
product, to choose kernels_cu/matmul.cu's MM_KK_UNROLL and register cap. Needs a GPU, PyCUDA, CuPy.

    nvcc -O3 -std=c++17 -arch=sm_90 -cubin -o build/cuda/matmul_variants.cubin benchmarks/matmul_variants.cu
    python benchmarks/matmul_variants.py build/cuda/matmul_variants.cubin [--sizes 4096 8192]
"""

from __future__ import annotations

import argparse

import numpy as np

from pybridge import cuda
from pybridge.bench.gpu import format_rows, time_device

VARIANTS = ("mm_u1_b2", "mm_u2_b2", "mm_u16_b2", "mm_u8_b1", "mm_u16_b1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cubin")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 8192])
    args = ap.parse_args()
    import cupy as cp
    from pybridge.cuda.context import pycuda_driver

    cuda.ensure_context()
    drv = pycuda_driver()
    mod = drv.module_from_file(args.cubin)
    rows = []
    for n in args.sizes:
        rng = np.random.default_rng(n)
        a = cp.asarray(rng.uniform(-1, 1, (n, n)).astype(np.float32))
        b = cp.asarray(rng.uniform(-1, 1, (n, n)).astype(np.float32))
        c = cp.empty((n, n), cp.float32)
        ref = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
        ref_norm = float(cp.linalg.norm(ref))
        flop = 2.0 * n**3
        t = time_device(lambda: cp.matmul(a, b, out=c), inner=2, repeat=7, warmup=1).median_s
        cublas = flop / t / 1e12
        rows.append({"size": n, "variant": "cuBLAS SGEMM", "TFLOP/s": cublas, "% of cuBLAS": 100.0,
                     "rel err": float(cp.linalg.norm(c.astype(cp.float64) - ref)) / ref_norm})
        grid = ((n + 127) // 128, (n + 127) // 128)
        for name in VARIANTS:
            f = mod.get_function(name)
            args_ = (np.uintp(a.data.ptr), np.uintp(b.data.ptr), np.uintp(c.data.ptr), np.int32(n), np.int32(n), np.int32(n))
            c.fill(np.nan)
            t = time_device(lambda: f(*args_, block=(256, 1, 1), grid=grid), inner=2, repeat=7, warmup=1).median_s
            tf = flop / t / 1e12
            rows.append({"size": n, "variant": name, "TFLOP/s": tf, "% of cuBLAS": 100.0 * tf / cublas,
                         "rel err": float(cp.linalg.norm(c.astype(cp.float64) - ref)) / ref_norm,
                         "regs": f.num_regs, "local B": f.local_size_bytes})
        del a, b, c, ref
    print(format_rows(rows))


if __name__ == "__main__":
    main()
