#!/usr/bin/env bash
# The lifecycle machine, its Ctrl-C rule on, on cuda: 2,000 sequences over aliasing,
# composed (records, sums, arrays of both), histogram, probe (a consuming entry) and types, batches
# of 100 in child processes with the Hypothesis seeds 1..20, each batch limited (one that hangs ends
# with every thread's stack in the summary's crash entry).
#
# The Futhark compiler is not on the GPU machine: on the development machine first run
#   bash scripts/gpu_lifecycle.sh emit
# which writes .carry-gen/lifecycle/cuda/ (each program's .fut, and the C, header and manifest that
# `futhark cuda --library` generates, hardened by csource.py; untracked, never committed, carried
# as part of the working tree). Then on the GPU machine (carry .gpu-wheels):
#   bash scripts/gpu_lifecycle.sh
# It prints the runner's summary (sequences, steps, interrupted_calls, interrupts_landed, crashes,
# failures) and leaves the full JSON in $OUT/lifecycle-cuda.json. SEQ, BATCH, JOBS, SEED,
# BATCH_TIMEOUT and LIMIT change the run.
set -u
DIR=.carry-gen/lifecycle/cuda
PROGRAMS="tests/programs/aliasing.fut tests/programs/composed.fut futhark/histogram.fut tests/reference/probe.fut tests/reference/types.fut"

if [ "${1:-}" = emit ]; then
  FUTHARK=$(realpath "${FUTHARK:-.tools/bin/futhark}")
  mkdir -p "$DIR"
  for p in $PROGRAMS; do
    n=$(basename "$p" .fut)
    cp "$p" "$DIR/" && (cd "$DIR" && "$FUTHARK" cuda --library "$n.fut") && python3 pybridge/futhark/csource.py "$DIR/$n.c" \
      || { echo "emit $n failed"; exit 1; }
  done
  exit 0
fi

OUT=${OUT:-/tmp}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache PYTHONUNBUFFERED=1
[ -n "${PYBRIDGE_GPU_PREPARED:-}" ] || source .gpu-wheels/install.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
[ -n "${PYBRIDGE_GPU_PREPARED:-}" ] || python3 -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v WARN | tail -1
libs=""
for p in $PROGRAMS; do
  n=$(basename "$p" .fut)
  python3 -c "from pybridge.futhark.build import compile_library as c; c('$DIR/$n.c', 'cuda', '$DIR/lib$n.so')" \
    || { echo "compile $n failed"; exit 1; }
  libs="$libs $DIR/lib$n.so"
done
start=$SECONDS
# --timeout below LIMIT: a batch that hangs ends itself with its stacks before the outer timeout.
timeout "${LIMIT:-570}" python3 -m pybridge.testing.lifecycle_run --backend cuda --sequences "${SEQ:-2000}" \
  --batch "${BATCH:-100}" --jobs "${JOBS:-4}" --seed "${SEED:-1}" --timeout "${BATCH_TIMEOUT:-480}" $libs \
  > "$OUT/lifecycle-cuda.json" 2> "$OUT/lifecycle-cuda.stderr"
echo "lifecycle cuda: rc=$? in $((SECONDS - start)) s"
python3 - "$OUT/lifecycle-cuda.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print({k: d[k] if not isinstance(d[k], list) else len(d[k]) for k in
       ("seed", "sequences", "steps", "interrupted_calls", "interrupts_landed", "batches", "jobs", "crashes", "failures")})
for entry in d["crashes"] + d["failures"]:
    print("seed", entry.get("seed"), "status", entry["status"], "\n", entry["output"][-2000:])
PY
