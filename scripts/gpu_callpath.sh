#!/usr/bin/env bash
# The compiled call path on ONE GPU, one device call (about 7 minutes on an H100; each step's time
# limit is cut to what is left of BUDGET seconds, 500 by default):
#   1. the extension built in place (the benchmarks and tests below import this checkout's
#      pybridge), `pybridge info`'s call path line: which path every figure below is of;
#   2. `pybridge bench overhead --backend cuda` and `pybridge bench exchange`: pybridge and the bare
#      cffi call, the driver's and CuPy's part of an exchange, all in this run;
#   3. `pybridge bench programs --backend cuda` (and c) when .carry-programs is carried (its c
#      part made here with the carried compiler when only cuda's was carried);
#   4. the call path's table from those rows (`pybridge bench report --call-path`): every row with
#      the bare figure of the same run, the ratio or pybridge's own part, the target and the verdict;
#   5. the differential test on cuda (compiled against Python plans, one process), then the GPU
#      tests of the call path and the exchange.
# Carry .gpu-wheels, build/futhark/cuda and build/reference/cuda (the generated C of
# `make -k futhark FUTHARK_BACKEND=cuda` on the development machine), build/cuda; optionally
# .carry-programs (`for b in cuda c; do python3 -m pybridge bench programs --prepare .carry-programs --backend $b; done`),
# .carry-gen (`PYBRIDGE_GEN_PROFILE=cuda PYBRIDGE_GEN_SEED=1 python3 tests/test_generated_interfaces.py emit .carry-gen/gen-cuda cuda`)
# and .carry-futhark (scripts/prepare-device-carry.sh --futhark-only: tests/gpu/test_exchange_order.py
# builds its programs). Outputs in $OUT: the JSON of each benchmark, callpath-table.md, the logs.
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=${PYBRIDGE_CACHE:-/tmp/pb-cache}
export PYBRIDGE_TEST_CACHE=${PYBRIDGE_TEST_CACHE:-$PYBRIDGE_CACHE}
OUT=${OUT:-/tmp/callpath-out}
mkdir -p "$OUT"
BUDGET=${BUDGET:-500}
step() { echo "== $1 (at ${SECONDS}s)"; }
# limit WANTED: WANTED seconds, or what is left of the budget (at least 5)
limit() { local left=$((BUDGET - SECONDS)); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }

step "setup"
[ -n "${PYBRIDGE_GPU_PREPARED:-}" ] || source .gpu-wheels/install.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
source scripts/carried-futhark.sh
# The compiled path needs the interpreter's headers (no network here to install python3-dev).
if [ -n "${PYBRIDGE_GPU_PREPARED:-}" ]; then
  echo "built and installed by scripts/gpu_every_check.sh"
elif python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  python3 setup.py -q build_ext --inplace > "$OUT/build_ext.log" 2>&1 || { echo "build_ext failed:"; tail -5 "$OUT/build_ext.log"; }
else
  echo "NO Python.h for $(python3 --version): the compiled call path cannot be built here; every figure below is the Python path's"
fi
echo "call path: $(python3 -c 'from pybridge.futhark import callpath; print(callpath.DESCRIPTION)')"
python3 -m pybridge info 2>/dev/null | grep -E "^(pybridge|python|call path|GPU|CuPy|PyTorch) "
if [ ! -e build/reference/cuda/libprobe.so ] || [ ! -e build/futhark/cuda/libchain.so ]; then
  make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true -j16 > "$OUT/make-futhark.log" 2>&1 || grep -E "rror" "$OUT/make-futhark.log" | head -5
fi
[ -e build/cuda/libsaxpy.so ] || make cuda > "$OUT/make-cuda.log" 2>&1
ls build/reference/cuda/libprobe.so || echo "NO build/reference/cuda/libprobe.so: carry build/reference/cuda (make -k futhark FUTHARK_BACKEND=cuda)"

step "pybridge bench overhead --backend cuda"
timeout "$(limit 150)" python3 -m pybridge bench overhead --backend cuda --calls ${CALLS:-3000} --json "$OUT/overhead.json" > "$OUT/overhead.txt" 2>&1
echo "rc=$?"; grep -E "futhark-(array-)?call" "$OUT/overhead.txt" | head -16
step "pybridge bench exchange"
timeout "$(limit 120)" python3 -m pybridge bench exchange --json "$OUT/exchange.json" > "$OUT/exchange.txt" 2>&1
echo "rc=$?"; grep -E "pybridge side|reference" "$OUT/exchange.txt" | head -24
inputs="$OUT/overhead.json $OUT/exchange.json"
if [ -d .carry-programs/cuda ]; then
  step "pybridge bench programs --backend cuda (prebuilt C from .carry-programs)"
  timeout "$(limit 220)" python3 -m pybridge bench programs --backend cuda --prebuilt .carry-programs --runs ${RUNS:-10} \
    --json "$OUT/programs-cuda.json" > "$OUT/programs-cuda.txt" 2>&1
  echo "rc=$?"; grep -E "summary" "$OUT/programs-cuda.txt" | head -8
  inputs="$inputs $OUT/programs-cuda.json"
else
  echo "no .carry-programs/cuda: the real-program rows are not measured (see the header for the --prepare command)"
fi
if [ ! -d .carry-programs/c ] && [ -n "${FUTHARK:-}" ] && [ -d .carry-programs ] && [ $((BUDGET - SECONDS)) -gt 200 ]; then
  step "the c programs' C made here (pybridge bench programs --prepare, the carried compiler)"
  timeout "$(limit 60)" python3 -m pybridge bench programs --prepare .carry-programs --backend c > "$OUT/prepare-c.txt" 2>&1
  echo "rc=$?"
fi
if [ -d .carry-programs/c ] && [ $((BUDGET - SECONDS)) -gt 170 ]; then
  step "pybridge bench programs --backend c (prebuilt C from .carry-programs)"
  timeout "$(limit 150)" python3 -m pybridge bench programs --backend c --prebuilt .carry-programs --runs ${RUNS:-10} \
    --json "$OUT/programs-c.json" > "$OUT/programs-c.txt" 2>&1
  echo "rc=$?"
  inputs="$inputs $OUT/programs-c.json"
fi

step "the call path's table (this run; the call path: $(python3 -c 'from pybridge.futhark import callpath; print(callpath.DESCRIPTION)'))"
existing=""
for j in $inputs; do [ -s "$j" ] && existing="$existing $j"; done
# shellcheck disable=SC2086
python3 -m pybridge bench report $existing --call-path | tee "$OUT/callpath-table.md"

step "differential test on cuda (compiled vs Python plans)"
gen=""; [ -d .carry-gen/gen-cuda ] && gen="PYBRIDGE_GEN_PREBUILT=$PWD/.carry-gen/gen-cuda PYBRIDGE_GEN_PROFILE=cuda"
env $gen timeout "$(limit 150)" python3 -m pytest -q -rs -p no:cacheprovider tests/test_call_path_differential.py -k cuda \
  > "$OUT/differential-cuda.log" 2>&1
echo "rc=$? $(tail -1 "$OUT/differential-cuda.log")"; grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/differential-cuda.log" | cut -c1-220 | head -6

step "GPU tests of the call path and the exchange"
for f in ${GPU_TEST_FILES:-tests/gpu/test_callpath_exchange.py tests/gpu/test_thin_path.py tests/gpu/test_exchange_order.py tests/gpu/test_cuda_interop.py tests/gpu/test_futhark_cuda.py}; do
  left=$((BUDGET - SECONDS))
  if [ "$left" -lt 15 ]; then echo "$f: NOT RUN (the budget of ${BUDGET}s is spent)"; continue; fi
  log="$OUT/$(basename "$f" .py).log"
  timeout "$(limit 120)" python3 -m pytest -q -rfEs -p no:cacheprovider -m gpu "$f" > "$log" 2>&1
  echo "$f: rc=$? $(tail -1 "$log")"
  grep -E "^(FAILED|ERROR)|Segmentation|Fatal" "$log" | cut -c1-220 | head -8
done
echo "== done in ${SECONDS}s; outputs in $OUT"
