#!/usr/bin/env bash
# GPU part 1 (the device machine starts bare): install, build, every GPU-marked test, the demo.
# Carry .gpu-wheels and build/ (build/ holds the C that `futhark cuda --library` generated where
# the compiler is; it is compiled here). Part 2 is scripts/gpu_bench.sh.
set -u
export PYTHONUNBUFFERED=1 PYBRIDGE_GPU_EXAMPLES=${PYBRIDGE_GPU_EXAMPLES:-20}
source .gpu-wheels/install.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "== make cuda fixtures"; make cuda fixtures 2>&1 | grep -E "error|warning|skipped" | head -20
echo "== futhark cuda libraries from carried generated C"
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true 2>&1 | grep -E "error|Error" | head
ls build/futhark/cuda/*.so build/reference/cuda/*.so build/fixtures/cuda/*.so 2>&1 | tr '\n' ' '; echo
python3 -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v WARN | tail -1
echo "== GPU tests"
timeout 400 python3 -m pytest -q -rs -p no:cacheprovider --timeout 300 -m gpu tests 2>&1 | tee $OUT/gpu_tests.log \
  | grep -vE "^SKIPPED.*(fixtures|reference|futhark)/(c|multicore)" | tail -45
echo "== pybridge demo (installed package, from /tmp)"; (cd /tmp && timeout 100 pybridge demo) 2>&1 | tail -30
