#!/usr/bin/env bash
# Issue 23 on the GPU machine, one device call: exchanges ordered on the device
# (tests/gpu/test_exchange_order.py and the interop tests), pybridge.dask on one GPU (tests), then
# `pybridge bench exchange` and `pybridge bench scaling --gpus 1` (Dask timed with a device sync
# after wait, beside Dask + CuPy on the same graph). Carry .gpu-wheels, .whl and .carry-futhark (made
# on the development machine by scripts/prepare-device-carry.sh: dask, distributed and their needs as
# cp312 wheels; the Futhark compiler), build/futhark/cuda, build/reference/cuda (make -k futhark
# FUTHARK_BACKEND=cuda).
# Then `pybridge bench overhead` (cuda entry points against their floors; SKIP_OVERHEAD=1 skips it).
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=${PYBRIDGE_CACHE:-/tmp/pb-cache} PYBRIDGE_TEST_CACHE=${PYBRIDGE_TEST_CACHE:-${PYBRIDGE_CACHE:-/tmp/pb-cache}}
OUT=${OUT:-/tmp}
source .gpu-wheels/install.sh
python3 -c "import distributed" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-site .whl/*.whl
GPU_TEST_FILES=${GPU_TEST_FILES:-"tests/gpu/test_exchange_order.py tests/gpu/test_futhark_cuda.py tests/gpu/test_cuda_interop.py tests/gpu/test_convert_gpu.py tests/test_futhark_api.py tests/gpu/test_dask_gpu.py"} \
  SKIP_DEMO=1 GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-200} bash scripts/gpu_check.sh
echo "== pybridge bench exchange"
timeout ${EXCHANGE_TIMEOUT:-150} python3 -m pybridge bench exchange --json "$OUT/exchange.json" 2>/dev/null | tail -32
echo "== pybridge bench scaling --gpus 1"
timeout ${SCALING_TIMEOUT:-240} python3 -m pybridge bench scaling --gpus 1 --rows saxpy --repeat ${SCALING_REPEAT:-5} --json "$OUT/scaling.json" 2>"$OUT/scaling.err" | tail -24
echo "rc=${PIPESTATUS[0]}"; tail -3 "$OUT/scaling.err"
if [ -z "${SKIP_OVERHEAD:-}" ]; then
  echo "== pybridge bench overhead (cuda entry points, chain30, launches)"
  timeout ${OVERHEAD_TIMEOUT:-150} python3 -m pybridge bench overhead --json "$OUT/overhead.json" 2>/dev/null | tail -40
fi
