#!/usr/bin/env bash
# Issue 12's long checks in one device call: the lifecycle machine's full profile (10,000 sequences
# per backend, crash-detecting runner, batches in parallel child processes on the host's cores) on
# c, multicore and cuda, beside the long thread stress on cuda (PYBRIDGE_STRESS=long).
# Carry .gpu-wheels, build/futhark/cuda, build/reference/cuda and .carry-gen, where
# .carry-gen/rel/<backend>/ holds the generated, csource-hardened C of tests/programs/aliasing.fut
# and futhark/histogram.fut with each .fut beside it (the compiler is not on the GPU machine).
# Logs come back packed in $OUT/reliability-logs.tar.gz.
set -u
REAL_OUT=${OUT:-/tmp}
LOGS=/tmp/reliability-logs
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache PYBRIDGE_TEST_CACHE=/tmp/pb-cache PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
source .gpu-wheels/install.sh
nproc; nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python3 -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v WARN | tail -1
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true 2>&1 | grep -E "error|Error" | head
for b in c multicore cuda; do
  for p in aliasing histogram; do
    python3 -c "from pybridge.futhark.build import compile_library as c; c('.carry-gen/rel/$b/$p.c', '$b', '.carry-gen/rel/$b/lib$p.so')" || echo "compile $b/$p failed"
  done
done
echo "== lowest / -1 on cuda (host code guarded by csource; kernels computed on the GPU)"
python3 -c "from pybridge.futhark.build import compile_library as c; c('.carry-gen/rel/cuda/division.c', 'cuda', '.carry-gen/rel/cuda/libdivision.so')" && python3 - <<'PY'
import numpy as np, pybridge.futhark as pf
with pf.load(".carry-gen/rel/cuda/libdivision.so", backend="cuda") as lib:
    print("div32", [int(v) for v in lib.div32(np.int32(-2**31), np.int32(-1))])
    print("div64", [int(v) for v in lib.div64(np.int64(-2**63), np.int64(-1))])
    print("div32s", lib.div32s(np.array([-2**31, 7, -7], np.int32), np.array([-1, -1, 2], np.int32)).numpy().tolist())
PY
SEQ=${LIFECYCLE_SEQUENCES:-10000}
LIMIT=${LIFECYCLE_TIMEOUT:-500}
lifecycle() {  # backend jobs
  local start=$SECONDS
  timeout $LIMIT python3 -m pybridge.testing.lifecycle_run --backend $1 --sequences $SEQ --batch ${BATCH:-250} --jobs $2 --timeout $((LIMIT - 30)) \
    .carry-gen/rel/$1/libaliasing.so .carry-gen/rel/$1/libhistogram.so > "$LOGS/lifecycle-$1.log" 2>&1
  echo "lifecycle $1: rc=$? in $((SECONDS - start)) s: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] if not isinstance(d[k], list) else len(d[k]) for k in ('sequences','steps','batches','jobs','crashes','failures')})" "$LOGS/lifecycle-$1.log" 2>&1 | tail -1)"
}
lifecycle c ${JOBS_C:-5} &
lifecycle multicore ${JOBS_MC:-4} &
lifecycle cuda ${JOBS_CUDA:-3} &
if [ -z "${SKIP_STRESS:-}" ]; then
  start=$SECONDS
  PYBRIDGE_STRESS=long timeout $LIMIT python3 -m pytest -q -s -rfEs -p no:cacheprovider --timeout 400 -m gpu -k cuda tests/test_threads.py > "$LOGS/threads-long-cuda.log" 2>&1
  echo "threads long cuda: rc=$? in $((SECONDS - start)) s: $(tail -1 "$LOGS/threads-long-cuda.log")"
  grep -E "^stress|^(FAILED|ERROR)|Segmentation|Fatal" "$LOGS/threads-long-cuda.log" | cut -c1-300 | head
fi
wait
tar czf "$REAL_OUT/reliability-logs.tar.gz" -C /tmp reliability-logs
