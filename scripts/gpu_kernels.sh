#!/usr/bin/env bash
# Issue 14 on the device machine, in one call: build, the kernels' property tests, the matmul
# variants, then `python -m pybridge.bench.bandwidth` and `... .matmul`; the tables are printed last.
# Source .gpu-wheels/install.sh first (PyCUDA, cffi); carry build/futhark/cuda/*.c generated where
# the Futhark compiler is (`make -k futhark FUTHARK_BACKEND=cuda`), as scripts/gpu_check.sh does.
set -u
export PYTHONUNBUFFERED=1 PYBRIDGE_GPU_EXAMPLES=${PYBRIDGE_GPU_EXAMPLES:-20}
OUT=${OUT:-/tmp/gpu-kernels-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used --format=csv,noheader
echo "== build"
make cuda 2>&1 | grep -E "error|warning" | head -20
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true 2>&1 | grep -E "rror" | head
python3 -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v WARN | tail -1
nvcc -O3 -std=c++17 -arch=sm_90 -cubin -o build/cuda/matmul_variants.cubin benchmarks/matmul_variants.cu 2>&1 | head
nvcc -O3 -std=c++17 -arch=sm_90 -cubin -o build/cuda/scan_variants.cubin benchmarks/scan_variants.cu 2>&1 | head
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== tests/gpu/test_cuda_kernels.py"
  timeout ${GPU_TEST_TIMEOUT:-170} python3 -m pytest -q -rfEs -p no:cacheprovider --timeout 120 -m gpu \
    tests/gpu/test_cuda_kernels.py ${PYTEST_ARGS:-} > "$OUT/test_cuda_kernels.log" 2>&1
  echo "rc=$? $(tail -1 "$OUT/test_cuda_kernels.log")"
  grep -E "^(FAILED|ERROR)|Segmentation|Fatal" "$OUT/test_cuda_kernels.log" | cut -c1-300 | head -12
fi
if [ -z "${SKIP_VARIANTS:-}" ]; then
  if [ -z "${SKIP_MATMUL:-}" ]; then
    echo "== matmul variants"
    timeout 90 python3 benchmarks/matmul_variants.py build/cuda/matmul_variants.cubin > "$OUT/matmul_variants.txt" 2>&1
    echo "rc=$?"
  fi
  echo "== scan variants"
  timeout 60 python3 benchmarks/scan_variants.py build/cuda/scan_variants.cubin > "$OUT/scan_variants.txt" 2>&1
  echo "rc=$?"
fi
echo "== python -m pybridge.bench.bandwidth"
timeout 120 python3 -m pybridge.bench.bandwidth > "$OUT/bandwidth.txt" 2>&1; echo "rc=$?"
if [ -z "${SKIP_MATMUL:-}" ]; then  # SKIP_MATMUL=1: the bandwidth kernels only
  echo "== python -m pybridge.bench.matmul"
  timeout 120 python3 -m pybridge.bench.matmul > "$OUT/matmul.txt" 2>&1; echo "rc=$?"
fi
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
for f in matmul_variants scan_variants bandwidth matmul; do [ -f "$OUT/$f.txt" ] && { echo "== $f"; tail -40 "$OUT/$f.txt"; }; done
