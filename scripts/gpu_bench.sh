#!/usr/bin/env bash
# GPU part 2: every benchmark through `pybridge bench all`, regenerating BENCHMARKS.md (run after
# gpu_check.sh on the same warm machine, or it builds first). Writes BENCHMARKS.md, benchmarks.png
# and the JSON under $OUT (copy BENCHMARKS.md and benchmarks.png back into the repository).
set -u
export PYTHONUNBUFFERED=1
source .gpu-wheels/install.sh
[ -e build/futhark/cuda/libchain.so ] || { make cuda >/dev/null 2>&1; make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true -j16 >/dev/null 2>&1; }
OUT=${OUT:-.}
timeout ${BENCH_TIMEOUT:-500} python3 -m pybridge bench all --json "$OUT/benchmarks.json" --png "$OUT/benchmarks.png" \
  --markdown BENCHMARKS.md 2>/dev/null | tail -80
cp BENCHMARKS.md "$OUT/BENCHMARKS.md"
