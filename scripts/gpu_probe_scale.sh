#!/usr/bin/env bash
# EXPERIMENT (one call on nvidia-h100-x4): B0's task pieces on one GPU (compiled and Python call
# paths), then B1 and B0 over 1..N GPUs with Dask's default message batching and with it off.
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache NCCL_NVLS_ENABLE=0 CUPY_TF32=0
REAL_OUT=${OUT:-/tmp/probe-out}; mkdir -p "$REAL_OUT"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
echo "GPUs: $NGPU $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
{
  source .gpu-wheels/install.sh
  python3 -c "import distributed" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-site .whl/*.whl
  make -j16 -k FUTHARK_BACKEND=cuda FUTHARK=/bin/true build/futhark/cuda/libsaxpy.so build/futhark/cuda/libjacobi.so
  python3 setup.py -q build_ext --inplace
} > "$REAL_OUT/setup.log" 2>&1
export PYTHONPATH=$PWD:/tmp/gpu-site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'from pybridge.futhark import callpath; print("call path:", callpath.DESCRIPTION)'
echo "== tests (at ${SECONDS}s)"
timeout 150 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_dask_blocks_gpu.py tests/gpu/test_dask_gpu.py 2>&1 | tail -4
echo "== task costs (at ${SECONDS}s)"
CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -c "
import numpy as np, pybridge.dask as pbd
from pybridge.bench import scaling_tasks as t
e = pbd.entry('build/futhark/cuda/libsaxpy.so', 'saxpy', backend='cuda', unified_memory=0)
print('task_costs:', {k: round(v, 2) for k, v in t.task_costs(e, np.float32(2), 1024, True).items()})" 2>&1 | tail -2
for LL in "" client; do
  echo "== bench B1,B0 over $NGPU GPUs, PYBRIDGE_DASK_LOW_LATENCY='$LL' (at ${SECONDS}s)"
  PYBRIDGE_DASK_LOW_LATENCY=$LL timeout 175 python3 -m pybridge bench scaling --gpus "$NGPU" --rows B1,B0 --repeat 11 \
    --tasks 4,16,64,256 --rows-out "$REAL_OUT/rows-ll$LL.jsonl" --budget 130 > "$REAL_OUT/bench-ll$LL.out" 2> "$REAL_OUT/bench-ll$LL.err"
  echo "rc=$?"
  grep -E "^row:" "$REAL_OUT/bench-ll$LL.out" | grep -v direct | sed 's/{"benchmark": //' | cut -c1-150
done
echo "== done (at ${SECONDS}s)"
