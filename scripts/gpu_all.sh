#!/usr/bin/env bash
# Every GPU check in one device call: scripts/gpu_check.sh over all GPU test files (one pytest per
# file), the generated-interface test's cuda profile (programs emitted where the compiler is:
#   PYBRIDGE_GEN_PROFILE=cuda PYBRIDGE_GEN_SEED=1 python tests/test_generated_interfaces.py emit .carry-gen/gen-cuda cuda)
# and the demo. Carry .gpu-wheels, build/futhark/cuda, build/reference/cuda (make -k futhark
# FUTHARK_BACKEND=cuda) and .carry-gen. The per-file logs come back packed in $OUT/gpu-logs.tar.gz
# (the device tool returns at most 8 files).
set -u
REAL_OUT=${OUT:-/tmp}
export OUT=/tmp/gpu-logs CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache PYBRIDGE_TEST_CACHE=/tmp/pb-cache PYTHONUNBUFFERED=1
mkdir -p "$OUT"
source .gpu-wheels/install.sh  # PyCUDA, cffi for the commands below (gpu_check.sh sources it for itself)
GPU_TEST_FILES=${GPU_TEST_FILES:-"tests/gpu/test_futhark_cuda.py tests/gpu/test_cuda_kernels.py tests/gpu/test_cuda_interop.py tests/gpu/test_cuda_compile.py tests/gpu/test_thin_path.py tests/gpu/test_convert_gpu.py tests/test_threads.py tests/test_futhark_api.py tests/test_futhark_c_api.py tests/test_futhark_programs.py tests/test_wrap_sizes.py tests/test_manifest_header.py tests/test_reliability3.py tests/gpu/test_package_cuda.py"} \
  bash scripts/gpu_check.sh
if [ -d .carry-gen/gen-cuda ]; then
  echo "== generated interfaces, cuda profile"
  PYBRIDGE_GEN_PREBUILT=$PWD/.carry-gen/gen-cuda PYBRIDGE_GEN_PROFILE=cuda PYBRIDGE_GEN_BACKENDS=cuda \
    timeout ${GEN_TIMEOUT:-240} python3 -m pytest -q -s -p no:cacheprovider tests/test_generated_interfaces.py -k round_trip > "$OUT/gen-cuda.log" 2>&1
  echo "rc=$? $(tail -1 "$OUT/gen-cuda.log")"
  grep -E "^(FAILED|ERROR)|Segmentation|Fatal|entry points" "$OUT/gen-cuda.log" | cut -c1-220 | head -12
fi
if [ -d .carry-gen/gen-cuda ]; then
  echo "== compiled vs Python call path, cuda (generated program 0, lifecycle machine on the probe)"
  python3 -c "from pybridge.futhark import callpath; print('call path:', callpath.DESCRIPTION)"
  PYBRIDGE_GEN_PREBUILT=$PWD/.carry-gen/gen-cuda PYBRIDGE_GEN_PROFILE=cuda \
    timeout ${CALLPATH_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider -rs tests/test_call_path_differential.py -k cuda > "$OUT/callpath-cuda.log" 2>&1
  echo "rc=$? $(tail -1 "$OUT/callpath-cuda.log")"
  grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/callpath-cuda.log" | cut -c1-220 | head -8
fi
if [ -d .carry-gen/aliasing ] && [ -z "${SKIP_LIFECYCLE:-}" ]; then
  echo "== lifecycle machine on cuda (aliasing program, crash-detecting runner)"
  python3 -c "from pybridge.futhark.build import compile_library as c; c('.carry-gen/aliasing/aliasing.c', 'cuda', '.carry-gen/aliasing/libaliasing.so')" \
    && timeout ${LIFECYCLE_TIMEOUT:-180} python3 -m pybridge.testing.lifecycle_run --backend cuda \
      --sequences ${LIFECYCLE_SEQUENCES:-1000} --batch 250 --timeout $((${LIFECYCLE_TIMEOUT:-180} - 20)) .carry-gen/aliasing/libaliasing.so > "$OUT/lifecycle-cuda.log" 2>&1
  echo "rc=$?"; tail -4 "$OUT/lifecycle-cuda.log"
fi
tar czf "$REAL_OUT/gpu-logs.tar.gz" -C /tmp gpu-logs
