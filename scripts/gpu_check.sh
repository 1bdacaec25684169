#!/usr/bin/env bash
# Everything GPU in one call (the device machine starts bare): install, build, GPU tests, demo,
# benchmarks. Run from the repo root with .gpu-wheels and build/ carried (build/ holds the C that
# `futhark cuda --library` generated where the compiler is; it is compiled here).
set -u
export PYTHONUNBUFFERED=1
source .gpu-wheels/install.sh
python3 -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "== make cuda fixtures"; make cuda fixtures 2>&1 | grep -E "error|warning|skipped" | head -20
echo "== futhark cuda libraries from carried generated C"
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true 2>&1 | grep -E "error|Error" | head
ls build/futhark/cuda/*.so build/reference/cuda/*.so build/fixtures/cuda/*.so 2>&1 | tr '\n' ' '; echo
echo "== GPU tests"
timeout 420 python3 -m pytest -q -rs -p no:cacheprovider --timeout 300 -m gpu tests 2>&1 | tee $OUT/gpu_tests.log | grep -vE "^SKIPPED.*(fixtures|reference)/(c|multicore)" | tail -40
echo "== pybridge demo"; (cd /tmp && timeout 120 pybridge demo) 2>&1 | tail -30
echo "== fusion benchmark"; timeout 150 python3 benchmarks/bench_fusion.py 2>&1 | tail -22
echo "== call overhead (cuda)"; timeout 60 python3 benchmarks/bench_call_overhead.py --backend cuda --calls 5000 2>&1 | tail -10
