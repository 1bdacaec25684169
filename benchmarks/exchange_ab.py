"""Exchange costs of two pybridge trees on the same GPU host, alternated (host-to-host spread on
the lent H100s is larger than the effects measured, so compare only within one run).

    git archive <old-commit> pybridge | tar x -C /tmp/old
    for i in 1 2 3; do
      PYTHONPATH=/tmp/old:$PYTHONPATH python3 benchmarks/exchange_ab.py before
      PYTHONPATH=.:$PYTHONPATH python3 benchmarks/exchange_ab.py after
    done

Needs the cuda probe library (make futhark FUTHARK_BACKEND=cuda), CuPy and PyTorch. Prints one
line per run: the label, then per path the minimum over 7 repeats of 5,000 calls, in µs.
"""

import sys
import timeit

import cupy as cp
import numpy as np
import torch

import pybridge.futhark as pf

lib = pf.load("build/reference/cuda/libprobe.so")
K = lib.types["[]f32"]
x = np.random.default_rng(0).random(1 << 20, dtype=np.float32)
h = K.new(x)
lib.sync()
cx, tx = cp.asarray(x), torch.as_tensor(x, device="cuda")
torch.cuda.synchronize()


def per_call_us(f, n: int = 5000) -> float:
    return min(timeit.repeat(f, number=n, repeat=7)) / n * 1e6


paths = {
    "h.__cuda_array_interface__": lambda: h.__cuda_array_interface__,
    "h.__dlpack__(stream=1) dropped": lambda: h.__dlpack__(stream=1),
    "from_cuda(cupy).free()": lambda: K.from_cuda(cx).free(),
    "from_cuda(torch).free()": lambda: K.from_cuda(tx).free(),
    "cupy.from_dlpack(h)": lambda: cp.from_dlpack(h),
    "torch.from_dlpack(h)": lambda: torch.from_dlpack(h),
}
print(sys.argv[1] if len(sys.argv) > 1 else "run", "  ".join(f"{k} {per_call_us(f):.2f}" for k, f in paths.items()), flush=True)
