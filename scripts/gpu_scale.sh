#!/usr/bin/env bash
# pybridge.dask over many GPUs in ONE device call on a machine of N GPUs (nvidia-h100-x2 / -x4 /
# nvidia-h200-x2 ...; N is what nvidia-smi -L finds): the topology, the build, the multi-GPU tests
# (those needing more GPUs than there are skip, saying so) and the one-GPU Dask tests, a clean-exit
# check of pybridge.cuda, then `pybridge bench scaling --gpus N --repeat 5` (rows B1-B4, sizes, B0,
# saxpy, transfers, most important first, each over 1..N GPUs; a target is judged only at the GPU
# counts it is set for and measured), which writes BENCHMARKS.md's multi-GPU section and the speedup
# plot, and last the size rows again on dask-cuda's LocalCUDACluster. The whole script keeps within
# TOTAL seconds (default 470: under 8 minutes): every step's timeout is what is left after the later
# steps' shares, and the bench gets --budget so it stops measuring in time to write what it has; if
# it is killed anyway, the section is rebuilt from the rows it streamed.
#
#   bash scripts/gpu_scale.sh            # everything
#   bash scripts/gpu_scale.sh --quick    # smoke: install, build, a few tests, the bench at tiny sizes
#
# Comes back in $OUT (10 files): topo.txt, summary.txt (every step's outcome, the targets table),
# multi-gpu.md (the section) and multi-gpu.json (its rows), rows.jsonl (each row as measured),
# scaling.png, scaling.json, size-dask-cuda.md and .json (the size rows on LocalCUDACluster), and
# logs.tar.gz (setup/build log, each test log, bench stdout/stderr).
# The section's first line names the machine, the date and the commit ($COMMIT, else git's).
#
# Prepared on the development machine first (never committed), from this checkout:
#   make -k futhark FUTHARK_BACKEND=cuda    # the C of build/futhark/cuda (dot, jacobi, matmul, saxpy, mandelbrot, ...)
#   make cuda                               # build/cuda: cubin, PTX, host launchers (optional: built here if missing)
#   DASK_CUDA_BINARY="cuda_core cuda_bindings" scripts/prepare-device-carry.sh --wheels-only
#   cp -r ../shared/gpu-wheels .gpu-wheels  # PyCUDA, cffi, ...
# Carry: .gpu-wheels .whl build/futhark/cuda (and build/cuda; .carry-futhark for the tests that build
# tests/programs/*.fut there).
set -u
QUICK=${1:-}
TOTAL=${TOTAL:-470}
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache
export NCCL_NVLS_ENABLE=0        # NVLink multicast off in this process and every worker it starts
export CUPY_TF32=0               # cuBLAS in float32 arithmetic, like pybridge's kernel
REAL_OUT=${OUT:-/tmp/gpu-scale-out}
LOGS=/tmp/gpu-scale-logs
rm -rf "$LOGS"; mkdir -p "$REAL_OUT" "$LOGS"
SUMMARY=$REAL_OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
step() { say "== $1 (at ${SECONDS}s of ${TOTAL}s)"; }
pack() { tar czf "$REAL_OUT/logs.tar.gz" -C /tmp gpu-scale-logs 2>/dev/null; }
trap pack EXIT
# Seconds a step may take: what is left, less the shares kept for the steps after it, capped.
cap() { local left=$(( TOTAL - SECONDS - $1 )); [ "$left" -gt "$2" ] && left=$2; [ "$left" -lt 10 ] && left=10; echo "$left"; }
# A test log's outcome: the last line, and the failures with their first error line.
outcome() {
  say "$1 rc=$2: $(tail -1 "$3" | cut -c1-200)"
  grep -E "^(FAILED|ERROR) |^SKIPPED" "$3" | cut -c1-250 | head -12 | tee -a "$SUMMARY"
  grep -E "^E  +[A-Za-z]*(Error|Exception|assert)" "$3" | cut -c1-250 | head -8 | tee -a "$SUMMARY"
  [ "$2" = 124 ] && say "  (timed out: the step's timeout, not a test's)"
}

step "topology"
nvidia-smi topo -m > "$REAL_OUT/topo.txt" 2>&1; cat "$REAL_OUT/topo.txt"
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader | tee -a "$SUMMARY"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU ")
[ "$NGPU" -gt 0 ] || NGPU=$(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())" 2>/dev/null || echo 0)
say "GPUs found: $NGPU"
[ "$NGPU" -gt 0 ] || { say "no GPU: nothing to scale over"; exit 1; }
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "not recorded")}  # the device copy's .git may be stale: $COMMIT first
LABEL="${NGPU}x ${GPU_NAME:-GPU} ($(nproc) CPUs), $(date -u '+%Y-%m-%d %H:%M') UTC, commit $COMMIT"
say "run: $LABEL"
NCPU=$(nproc)

step "install (carried wheels, no network)"
{
  source .gpu-wheels/install.sh
  source scripts/carried-futhark.sh   # when .carry-futhark is carried: tests that build a .fut for cuda run
  python3 -c "import distributed" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/gpu-site .whl/*.whl
  if ! PYTHONPATH=/tmp/gpu-site python3 -c "import dask_cuda" 2>/dev/null; then
    if ls .whl/dask-cuda/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpu-site .whl/dask-cuda/*.whl
    else
      echo "no .whl/dask-cuda carried: the LocalCUDACluster test skips"
    fi
  fi
} > "$LOGS/setup.log" 2>&1
export PYTHONPATH=$PWD:/tmp/gpu-site${PYTHONPATH:+:$PYTHONPATH}
python3 - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import importlib
for m in ("numpy", "cupy", "cupy.cuda.nccl", "dask", "distributed", "pycuda", "dask_cuda", "pynvml", "matplotlib", "pytest_timeout"):
    try:
        mod = importlib.import_module(m)
        extra = ""
        if m == "cupy.cuda.nccl":
            extra = f" available={mod.available} runtime={mod.get_version() if mod.available else '-'}"
        print(f"  {m}: {getattr(mod, '__version__', 'ok')}{extra}")
    except Exception as e:
        print(f"  {m}: NOT importable ({type(e).__name__}: {str(e)[:150]})")
EOF
PT_TIMEOUT=()
python3 -c "import pytest_timeout" 2>/dev/null && PT_TIMEOUT=(--timeout=120)   # one hung test cannot eat its step

step "build: every carried Futhark cuda library, pybridge's CUDA kernels (make -j$NCPU)"
{
  FUT_LIBS=$(for c in build/futhark/cuda/*.c; do [ -e "$c" ] && echo "build/futhark/cuda/lib$(basename "$c" .c).so"; done)
  # FUTHARK=/bin/true: the carried generated C is hardened and compiled (no Futhark compiler here)
  [ -n "$FUT_LIBS" ] && timeout "$(cap 350 150)" make -j"$NCPU" -k FUTHARK_BACKEND=cuda FUTHARK=/bin/true $FUT_LIBS &
  # the kernels the tests and the bench launch (saxpy, matmul's host launcher, ...): carried ones are
  # taken as they are (touched: the checkout's sources look newer), only what is missing is compiled
  [ -d build/cuda ] && find build/cuda -type f -exec touch {} +
  MISSING=$(make -s -n cuda 2>/dev/null | grep -c nvcc)
  echo "kernel outputs to compile: $MISSING"
  [ "$MISSING" -gt 0 ] && timeout "$(cap 350 150)" make -j"$NCPU" -k cuda &
  # the compiled call path, as `pip install .` builds it (without it every task takes the Python path)
  python3 setup.py -q build_ext --inplace
  wait
} >> "$LOGS/setup.log" 2>&1
say "call path: $(python3 -c 'from pybridge.futhark import callpath; print(callpath.DESCRIPTION)' 2>&1 | tail -1)"
say "futhark cuda libraries: $(ls build/futhark/cuda/lib*.so 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
say "cuda kernels: $(ls build/cuda/*.cubin build/cuda/lib*.so 2>/dev/null | xargs -n1 basename 2>/dev/null | tr '\n' ' ')"
for need in build/futhark/cuda/libjacobi.so build/futhark/cuda/libsaxpy.so build/futhark/cuda/libmatmul.so \
            build/futhark/cuda/libmandelbrot.so build/futhark/cuda/libdot.so build/cuda/saxpy.cubin build/cuda/libmatmul.so; do
  [ -e "$need" ] || say "  MISSING $need (see setup.log in logs.tar.gz)"
done

step "dask-cuda's CPU pins on this machine"
timeout 30 python3 -c "
import pybridge.dask as pbd
for g, why in pbd.cpu_affinity_report().items():
    print(f'  GPU {g}: {why or \"satisfiable: every CPU near it may be used here\"}')
" 2>&1 | tail -8 | tee -a "$SUMMARY"

step "pybridge.cuda processes exit cleanly (status 0: no PyCUDA abort at thread or process end)"
timeout "$(cap 320 90)" python3 -m pytest -q -rfEs -p no:cacheprovider "${PT_TIMEOUT[@]}" tests/gpu/test_cuda_exit.py \
  > "$LOGS/test_cuda_exit.log" 2>&1
outcome "exit tests" $? "$LOGS/test_cuda_exit.log"

step "multi-GPU tests ($NGPU GPUs)"
if [ "$QUICK" = "--quick" ]; then SEL=(-k "nccl_exchange or blocks_are_made or never_answers"); else SEL=(); fi
timeout "$(cap 240 190)" python3 -m pytest -q -rfEs -p no:cacheprovider -s "${PT_TIMEOUT[@]}" "${SEL[@]}" \
  tests/gpu/test_dask_multigpu.py > "$LOGS/test_dask_multigpu.log" 2>&1
outcome "multi-GPU tests" $? "$LOGS/test_dask_multigpu.log"
grep -E "dask-cuda CPU pin|^worker " "$LOGS/test_dask_multigpu.log" | cut -c1-200 | head -8 | tee -a "$SUMMARY"

if [ "$QUICK" != "--quick" ]; then
  step "one-GPU Dask tests (every GPU, one worker each)"
  timeout "$(cap 180 130)" python3 -m pytest -q -rfEs -p no:cacheprovider "${PT_TIMEOUT[@]}" tests/gpu/test_dask_gpu.py tests/gpu/test_dask_blocks_gpu.py \
    > "$LOGS/test_dask_gpu.log" 2>&1
  outcome "one-GPU Dask tests" $? "$LOGS/test_dask_gpu.log"
fi

step "the docs' GPU pages that use Dask (tests/gpu/test_docs_gpu.py; the one-GPU check carries no Dask)"
timeout "$(cap 150 60)" python3 -m pytest -q -rfEs -p no:cacheprovider "${PT_TIMEOUT[@]}" tests/gpu/test_docs_gpu.py -k "dask or scale" \
  > "$LOGS/test_docs_gpu.log" 2>&1
outcome "docs' Dask GPU pages" $? "$LOGS/test_docs_gpu.log"

DASK_CUDA_SHARE=0
# SKIP_DASK_CUDA=1: leave out the size rows on dask-cuda's cluster (their time goes to the bench)
[ "$QUICK" != "--quick" ] && [ -z "${SKIP_DASK_CUDA:-}" ] && python3 -c "import dask_cuda" 2>/dev/null && DASK_CUDA_SHARE=80
step "pybridge bench scaling --gpus $NGPU"
BUDGET=$(( TOTAL - SECONDS - 50 - DASK_CUDA_SHARE ))   # the bench stops starting measurements then, and writes its section
[ "$BUDGET" -lt 60 ] && BUDGET=60
say "bench budget ${BUDGET}s"
BENCH=(--gpus "$NGPU" --repeat 5 --json "$REAL_OUT/scaling.json" --section "$REAL_OUT/multi-gpu.md" --plot "$REAL_OUT/scaling.png"
       --topology "$REAL_OUT/topo.txt" --rows-out "$REAL_OUT/rows.jsonl" --budget "$BUDGET" --label "$LABEL")
[ "$QUICK" = "--quick" ] && BENCH+=(--quick)
timeout -k 10 $(( BUDGET + 35 )) python3 -m pybridge bench scaling "${BENCH[@]}" > "$LOGS/bench.out" 2> "$LOGS/bench.err"
RC=$?
say "bench rc=$RC"
grep -E "^scaling:" "$LOGS/bench.out" | tee -a "$SUMMARY"
if [ ! -s "$REAL_OUT/multi-gpu.md" ] && [ -s "$REAL_OUT/rows.jsonl" ]; then
  say "the bench wrote no section (rc=$RC): rebuilt from the rows it streamed"
  timeout 60 python3 -m pybridge.bench.scaling_report "$REAL_OUT/rows.jsonl" --section "$REAL_OUT/multi-gpu.md" \
    --plot "$REAL_OUT/scaling.png" 2>&1 | tail -3 | tee -a "$SUMMARY"
fi
[ -e "$REAL_OUT/multi-gpu.md" ] && sed -n '/^\*\*Targets/,/^!\[\|^\*\*Topology/p' "$REAL_OUT/multi-gpu.md" | head -45 | tee -a "$SUMMARY"
grep -E "skipped" "$REAL_OUT/rows.jsonl" 2>/dev/null | cut -c1-300 | tee -a "$SUMMARY"
say "bench stderr, errors: $(grep -cE "Traceback|Error" "$LOGS/bench.err") lines; PyCUDA aborts: $(grep -c "PyCUDA ERROR" "$LOGS/bench.err"); workers killed by a signal: $(grep -c "killed by signal" "$LOGS/bench.err")"
grep -E "Traceback|Error|killed by signal" "$LOGS/bench.err" | sort | uniq -c | sort -rn | head -8 | cut -c1-250 | tee -a "$SUMMARY"
[ -e "$REAL_OUT/scaling.png" ] || say "no plot here (matplotlib missing?): draw it from the rows with
  python -m pybridge.bench.scaling_report multi-gpu.json --section multi-gpu.md --plot scaling.png"

if [ "$DASK_CUDA_SHARE" -gt 0 ]; then
  step "size rows on dask-cuda's LocalCUDACluster ($NGPU GPUs)"
  BUDGET=$(( TOTAL - SECONDS - 25 )); [ "$BUDGET" -lt 30 ] && BUDGET=30
  timeout -k 10 $(( BUDGET + 20 )) python3 -m pybridge bench scaling --gpus "$NGPU" --cluster dask-cuda --rows size \
    --section "$REAL_OUT/size-dask-cuda.md" --rows-out "$LOGS/rows-dask-cuda.jsonl" --budget "$BUDGET" --label "$LABEL" \
    > "$LOGS/bench-dask-cuda.out" 2> "$LOGS/bench-dask-cuda.err"
  say "dask-cuda size rows rc=$?"
  grep -E "^\| size|skipped" "$REAL_OUT/size-dask-cuda.md" 2>/dev/null | cut -c1-300 | tee -a "$SUMMARY"
fi
say "whole run ${SECONDS}s"
