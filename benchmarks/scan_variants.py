"""Times benchmarks/scan_variants.cu (kernels_cu/scan.cu's body with different look-back widths and register caps)
against the device-to-device copy, with the error against a float64 cumsum. Needs PyCUDA, CuPy.

    nvcc -O3 -std=c++17 -arch=sm_90 -cubin -o build/cuda/scan_variants.cubin benchmarks/scan_variants.cu
    python benchmarks/scan_variants.py build/cuda/scan_variants.cubin
"""

from __future__ import annotations

import sys

import numpy as np

from pybridge import cuda
from pybridge.bench.gpu import format_rows, time_device
from pybridge.demo import catalog


# Kernels of scan_variants.cu: scan_l<look-back words per lane>_i<items per thread>_b<min blocks>[...].
VARIANTS = ("scan_l1_i16_b8", "scan_l4_i16_b8", "scan_l1_i16_b8_static", "scan_l1_i16_b8_sleep",
            "scan_l1_i32_b6", "scan_l1_i32_b5", "scan_l1_i32_b6_static", "scan_l1_i24_b5")


def items_of(name: str) -> int:
    return int(name.split("_")[2][1:])


def main() -> None:
    import cupy as cp
    from pybridge.cuda.context import pycuda_driver

    cuda.ensure_context()
    drv = pycuda_driver()
    mod = drv.module_from_file(sys.argv[1])
    rows = []
    for e in (24, 26, 28):
        n = 1 << e
        x = cp.asarray(np.random.default_rng(e).uniform(-1, 1, n).astype(np.float32))
        out = cp.empty(n, cp.float32)
        status = cp.zeros(catalog.scan_num_tiles(n) + 1, cp.uint64)  # the smallest tile: most words
        t = time_device(lambda: drv.memcpy_dtod_async(out.data.ptr, x.data.ptr, 4 * n, None), repeat=9).median_s
        copy = 8 * n / t / 1e9
        rows.append({"size": n, "variant": "copy", "GB/s": copy, "% of copy": 100.0})
        ref = cp.cumsum(x.astype(cp.float64))
        for name in VARIANTS:
            f = mod.get_function(name)
            tiles = -(-n // (catalog.SCAN_BLOCK * items_of(name)))
            args = (np.uintp(x.data.ptr), np.uintp(out.data.ptr), np.int64(n), np.uintp(status.data.ptr))

            def once(f=f, args=args, tiles=tiles) -> None:
                status.fill(0)
                f(*args, block=(catalog.SCAN_BLOCK, 1, 1), grid=(tiles, 1))

            out.fill(np.nan)
            t = time_device(once, repeat=9).median_s
            err = float(cp.max(cp.abs(out.astype(cp.float64) - ref)))
            rows.append({"size": n, "variant": name, "GB/s": 8 * n / t / 1e9, "% of copy": 800 * n / t / 1e9 / copy,
                         "max abs err": err, "regs": f.num_regs, "local B": f.local_size_bytes})
        del x, out, status, ref
    print(format_rows(rows))


if __name__ == "__main__":
    main()
