#!/usr/bin/env bash
# GPU part 2: benchmarks (run after gpu_check.sh on the same warm machine, or it rebuilds first).
set -u
export PYTHONUNBUFFERED=1
source .gpu-wheels/install.sh
[ -e build/futhark/cuda/libchain.so ] || { make cuda fixtures >/dev/null 2>&1; make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true >/dev/null 2>&1; }
echo "== fusion benchmark"; timeout 300 python3 benchmarks/bench_fusion.py 2>&1 | tail -40
echo "== call overhead (cuda backend)"; timeout 120 python3 benchmarks/bench_call_overhead.py --backend cuda --calls 5000 --n 1000000 2>&1 | tail -12
echo "== checked launch overhead (pybridge.cuda, real PyCUDA)"; timeout 120 python3 benchmarks/bench_launch_overhead.py --gpu --calls 2000 --repeat 7 2>&1 | tail -16
echo "== same, through PyCUDA's prepared_async_call"; PYBRIDGE_CUDA_LAUNCH=prepared timeout 120 python3 benchmarks/bench_launch_overhead.py --gpu --calls 2000 --repeat 5 2>&1 | tail -14
