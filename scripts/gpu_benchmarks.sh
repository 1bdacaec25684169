#!/usr/bin/env bash
# GPU, one device call (under 10 minutes on an H100): every row of BENCHMARKS.md from one run.
#   1. `pybridge bench programs --backend cuda`, then `--backend c`: Futhark's own executable vs
#      pybridge on resident handles (and the bare cffi call), results checked equal;
#   2. `pybridge bench all`: entry points, launches, exchange, fusion, bandwidth, matmul;
#   3. `pybridge bench scaling --gpus 1 --rows saxpy`: pybridge.dask on one GPU, timed with a device sync after
#      `wait`, beside Dask + CuPy on the same graph and Dask alone;
#   4. the CUB comparisons (benchmarks/scan_vs_cub.cu, sum_vs_cub.cu), when their binaries are carried;
#   5. BENCHMARKS.md from the JSON of steps 1-3 by `pybridge bench report`, its hand-written notes
#      kept (a carried $PREP/programs-c.json stands in for step 1's c run when that made none).
#
# The GPU machine has no Futhark compiler and no network, so on the development machine first:
#   for b in cuda c; do python3 -m pybridge bench programs --prepare .carry-programs --backend $b; done
#   make -k futhark FUTHARK_BACKEND=cuda            # the C of build/futhark/cuda and build/reference/cuda
#   scripts/prepare-device-carry.sh --wheels-only   # .whl: dask, distributed and their needs (cp312)
#   mkdir -p .carry-cub && for b in scan sum; do nvcc -O3 -std=c++17 -arch=sm_90 -o .carry-cub/${b}_vs_cub benchmarks/${b}_vs_cub.cu; done
# Then the device call `bash scripts/gpu_benchmarks.sh`, carrying .gpu-wheels, .whl, build/futhark/cuda,
# build/reference/cuda, .carry-programs and .carry-cub (untracked; never commit them).
# Copy $OUT/BENCHMARKS.md and $OUT/benchmarks.png back into the repository.
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=${PYBRIDGE_CACHE:-/tmp/pb-cache} PYBRIDGE_TEST_CACHE=${PYBRIDGE_TEST_CACHE:-${PYBRIDGE_CACHE:-/tmp/pb-cache}}
source .gpu-wheels/install.sh
python3 -c "import distributed" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-site .whl/*.whl
OUT=${OUT:-.}
PREP=${PREP:-.carry-programs}
[ -d "$PREP/cuda" ] || { echo "no $PREP/cuda: run the --prepare command above on the development machine" >&2; exit 2; }
[ -e build/futhark/cuda/libchain.so ] || { make cuda >/dev/null 2>&1; make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true -j16 >/dev/null 2>&1; }
step() { echo "== $1 (at ${SECONDS}s)"; }
step "pybridge bench programs (cuda, prebuilt C from $PREP)"
timeout ${PROGRAMS_TIMEOUT:-200} python3 -m pybridge bench programs --backend cuda --prebuilt "$PREP" \
  --runs ${RUNS:-20} --json "$OUT/programs-cuda.json" 2>&1 | tail -45  # tail: head would close the pipe before the JSON is written
echo "rc=${PIPESTATUS[0]}"
if [ -d "$PREP/c" ]; then
  step "pybridge bench programs (c, prebuilt C from $PREP)"
  timeout ${PROGRAMS_C_TIMEOUT:-200} python3 -m pybridge bench programs --backend c --prebuilt "$PREP" \
    --runs ${RUNS:-20} --json "$OUT/programs-c.json" 2>&1 | tail -14
  echo "rc=${PIPESTATUS[0]}"
fi
step "pybridge bench all"
timeout ${BENCH_TIMEOUT:-240} python3 -m pybridge bench all --json "$OUT/all.json" 2>/dev/null | tail -60
echo "rc=${PIPESTATUS[0]}"
step "pybridge bench scaling --gpus 1"
timeout ${SCALING_TIMEOUT:-120} python3 -m pybridge bench scaling --gpus 1 --rows saxpy --repeat ${SCALING_REPEAT:-3} \
  --json "$OUT/scaling.json" 2>"$OUT/scaling.err" | tail -16
echo "rc=${PIPESTATUS[0]}"; tail -3 "$OUT/scaling.err"
for b in scan sum; do
  if [ -x ".carry-cub/${b}_vs_cub" ]; then
    step "benchmarks/${b}_vs_cub.cu"
    timeout 60 ".carry-cub/${b}_vs_cub" | tee "$OUT/${b}_vs_cub.txt"
  fi
done
inputs="$OUT/all.json"
c_json="$OUT/programs-c.json"; [ -e "$c_json" ] || c_json="$PREP/programs-c.json"
for j in "$OUT/programs-cuda.json" "$c_json" "$OUT/scaling.json"; do
  [ -e "$j" ] && inputs="$inputs $j"
done
python3 -m pybridge bench report $inputs --command "bash scripts/gpu_benchmarks.sh" --markdown BENCHMARKS.md --png "$OUT/benchmarks.png" > /dev/null
echo "report rc=$? from: $inputs (whole run ${SECONDS}s)"
cp BENCHMARKS.md "$OUT/BENCHMARKS.md"
