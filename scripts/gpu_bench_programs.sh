#!/usr/bin/env bash
# GPU, one device call (about 6-8 minutes on an H100): issue 23's programs comparison on cuda
# (`pybridge bench programs`: Futhark's own executable vs pybridge on resident handles, results
# checked equal), then `pybridge bench all`, then BENCHMARKS.md from both JSON files (and the
# c-backend programs JSON made on the development machine, when carried) by `pybridge bench report`.
#
# The GPU machine has no Futhark compiler, so the C is generated first, on the development machine:
#   FUTHARK=.tools/bin/futhark python3 -m pybridge bench programs --prepare .carry-programs --backend cuda
#   FUTHARK=.tools/bin/futhark nice python3 -m pybridge bench programs --backend c --json .carry-programs/programs-c.json
# Then the device call: bash scripts/gpu_bench_programs.sh, carrying .gpu-wheels, build/futhark/cuda,
# build/reference/cuda, build/cuda and .carry-programs (untracked: it travels unless ignored; do not
# commit it). Copy $OUT/BENCHMARKS.md (and benchmarks.png) back into the repository.
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=${PYBRIDGE_CACHE:-/tmp/pb-cache}
source .gpu-wheels/install.sh
OUT=${OUT:-.}
PREP=${PREP:-.carry-programs}
[ -d "$PREP/cuda" ] || { echo "no $PREP/cuda: run the --prepare command above on the development machine" >&2; exit 2; }
[ -e build/futhark/cuda/libchain.so ] || { make cuda >/dev/null 2>&1; make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true -j16 >/dev/null 2>&1; }
echo "== pybridge bench programs (cuda, prebuilt C from $PREP)"
timeout ${PROGRAMS_TIMEOUT:-240} python3 -m pybridge bench programs --backend cuda --prebuilt "$PREP" \
  --runs ${RUNS:-20} --json "$OUT/programs-cuda.json" 2>&1 | tail -60  # tail: head would close the pipe before the JSON is written
echo "rc=${PIPESTATUS[0]}"
echo "== pybridge bench all"
timeout ${BENCH_TIMEOUT:-240} python3 -m pybridge bench all --json "$OUT/all.json" 2>/dev/null | tail -60
echo "rc=${PIPESTATUS[0]}"
inputs="$OUT/all.json"
[ -e "$OUT/programs-cuda.json" ] && inputs="$inputs $OUT/programs-cuda.json"
[ -e "$PREP/programs-c.json" ] && inputs="$inputs $PREP/programs-c.json"
python3 -m pybridge bench report $inputs --markdown BENCHMARKS.md --png "$OUT/benchmarks.png" > /dev/null
echo "report rc=$? from: $inputs"
cp BENCHMARKS.md "$OUT/BENCHMARKS.md"
