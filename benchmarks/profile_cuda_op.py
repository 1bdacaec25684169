"""Where the time of one pybridge.cuda catalog call goes (host side), with cProfile.

    python benchmarks/profile_cuda_op.py
"""
import cProfile
import pstats
import time

import numpy as np
import pycuda.driver as drv

from pybridge import cuda
from pybridge.cuda import catalog

x = cuda.to_device(np.ones(1 << 16, np.float32))
out = cuda.empty(1 << 16, np.float32)
k = catalog.get_kernel("saxpy")
for f in (lambda: catalog.cuda_saxpy(2.0, x, x), lambda: catalog.cuda_saxpy(2.0, x, x, out),
          lambda: k(2.0, x, x, out, 1 << 16, config=catalog.grid_stride_config(1 << 16))):
    for _ in range(20):
        f()
    drv.Context.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        f()
    drv.Context.synchronize()
    print(f"{(time.perf_counter() - t) / 2000 * 1e6:.1f} us per call")
pr = cProfile.Profile()
pr.enable()
for _ in range(2000):
    catalog.cuda_saxpy(2.0, x, x)
drv.Context.synchronize()
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(14)
