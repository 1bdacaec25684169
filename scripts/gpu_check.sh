#!/usr/bin/env bash
# GPU part 1 (the device machine starts bare): install, build, every GPU-marked test (one pytest
# process per file, so a crash in one cannot hide the others; the docs' GPU code blocks too), the demo. Carry .gpu-wheels and
# build/ (build/ holds the C that `futhark cuda --library` generated where the compiler is).
set -u
export PYTHONUNBUFFERED=1 PYBRIDGE_GPU_EXAMPLES=${PYBRIDGE_GPU_EXAMPLES:-20}
[ -n "${PYBRIDGE_GPU_PREPARED:-}" ] || source .gpu-wheels/install.sh
# The Futhark compiler, when carried (scripts/carried-futhark.sh).
source scripts/carried-futhark.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
# PYBRIDGE_GPU_PREPARED: scripts/gpu_every_check.sh built and installed once, before its parallel jobs.
if [ -z "${PYBRIDGE_GPU_PREPARED:-}" ]; then
  echo "== make cuda"; make cuda 2>&1 | grep -E "error|warning|skipped" | head -20
  echo "== futhark cuda libraries from carried generated C"
  make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true 2>&1 | grep -E "error|Error" | head
  ls build/futhark/cuda/*.so build/reference/cuda/*.so 2>&1 | wc -l
  python3 -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v WARN | tail -1
fi
echo "== GPU tests"
for f in ${GPU_TEST_FILES:-tests/gpu/test_futhark_cuda.py tests/test_futhark_api.py tests/test_futhark_c_api.py tests/test_futhark_programs.py tests/gpu/test_cuda_kernels.py tests/gpu/test_cuda_interop.py tests/gpu/test_cuda_compile.py tests/gpu/test_thin_path.py tests/gpu/test_docs_gpu.py}; do
  log=$OUT/$(basename $f .py).log
  timeout ${GPU_TEST_TIMEOUT:-150} python3 -m pytest -q -rfEs -p no:cacheprovider --timeout 120 -m gpu $f > $log 2>&1
  echo "$f: rc=$? $(tail -1 $log)"
  grep -E "^(FAILED|ERROR)|Segmentation|Fatal" $log | cut -c1-220 | head -12
done
[ -n "${SKIP_DEMO:-}" ] || { echo "== pybridge demo (installed package, from /tmp)"; (cd /tmp && timeout 100 pybridge demo) 2>&1 | tail -32; }
