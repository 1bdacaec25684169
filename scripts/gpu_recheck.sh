#!/usr/bin/env bash
# One GPU, one call: the docs' GPU pages (c and multicore libraries built too, with the carried
# compiler) and scripts/gpu_callpath.sh (the call path's bench table, its differential test and the
# exchange tests), built and installed once. Carry .gpu-wheels, .carry-futhark, .carry-programs,
# build/futhark/cuda, build/reference/cuda. TOTAL (default 330) bounds the whole call.
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache PYBRIDGE_TEST_CACHE=/tmp/pb-cache
REAL_OUT=${OUT:-/tmp/recheck-out}; mkdir -p "$REAL_OUT"
source .gpu-wheels/install.sh
source scripts/carried-futhark.sh
echo "== build (at ${SECONDS}s)"
make cuda -j16 > /tmp/make-cuda.log 2>&1 || grep -E "error" /tmp/make-cuda.log | head
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true -j16 > /tmp/make-futhark-cuda.log 2>&1 || grep -E "rror" /tmp/make-futhark-cuda.log | head
for b in c multicore; do
  [ -n "${FUTHARK:-}" ] && { make futhark FUTHARK_BACKEND=$b FUTHARK="$FUTHARK" -j16 > /tmp/make-futhark-$b.log 2>&1 || grep -E "rror" /tmp/make-futhark-$b.log | head; }
done
echo "futhark libraries: c $(ls build/futhark/c/*.so 2>/dev/null | wc -l), multicore $(ls build/futhark/multicore/*.so 2>/dev/null | wc -l), cuda $(ls build/futhark/cuda/*.so 2>/dev/null | wc -l)"
python3 setup.py -q build_ext --inplace > /tmp/build_ext.log 2>&1 || tail -5 /tmp/build_ext.log
python3 -m pip install -q --no-build-isolation --no-deps . > /tmp/pip.log 2>&1 || tail -3 /tmp/pip.log
export PYBRIDGE_GPU_PREPARED=1
echo "== the docs' GPU pages (at ${SECONDS}s)"
mkdir -p "$REAL_OUT/docs"
OUT="$REAL_OUT/docs" SKIP_DEMO=1 GPU_TEST_FILES="tests/gpu/test_docs_gpu.py" GPU_TEST_TIMEOUT=120 bash scripts/gpu_check.sh 2>&1 | grep -v "^NVIDIA"
left=$(( ${TOTAL:-330} - SECONDS - 15 ))
echo "== scripts/gpu_callpath.sh, budget ${left}s (at ${SECONDS}s)"
mkdir -p "$REAL_OUT/callpath"
OUT="$REAL_OUT/callpath" BUDGET=$left GPU_TEST_FILES="tests/gpu/test_callpath_exchange.py tests/gpu/test_exchange_order.py" \
  timeout "$left" bash scripts/gpu_callpath.sh > "$REAL_OUT/callpath.txt" 2>&1
echo "gpu_callpath rc=$?"
grep -E "^\||rc=|passed|failed|FAILED|== " "$REAL_OUT/callpath.txt" | grep -v "^pybridge:" | tail -45
echo "== done (at ${SECONDS}s)"
