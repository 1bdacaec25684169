#!/usr/bin/env bash
# Issue 32 in ONE device call on nvidia-h100-x4 (4 H100s, NVLink): the topology, the multi-GPU tests,
# then `pybridge bench scaling --gpus N` (rows B0-B4, sizes, transfers), which writes BENCHMARKS.md's
# multi-GPU section and the speedup plot. Well under 9 minutes; every step has its own timeout.
#
#   bash scripts/gpu_scale.sh            # everything
#   bash scripts/gpu_scale.sh --quick    # smoke: install, build, two tests, the bench at tiny sizes
#
# Comes back in $OUT (at most 8 files): topo.txt, multi-gpu.md (the section) and multi-gpu.json (its
# rows), scaling.png, scaling.json, summary.txt and logs.tar.gz (setup, tests, bench stdout/stderr).
#
# Prepared on the development machine first (never committed), from this checkout:
#   make -k futhark FUTHARK_BACKEND=cuda    # the C of build/futhark/cuda (jacobi, matmul, saxpy, mandelbrot, ...)
#   DASK_CUDA_BINARY="cuda_core cuda_bindings" scripts/prepare-device-carry.sh --wheels-only
#       # .whl: dask, distributed; .whl/dask-cuda: dask-cuda and its needs (cuda-core and cuda-bindings
#       # too, for a machine without them: the LocalCUDACluster test says if they are missing)
#   cp -r ../shared/gpu-wheels .gpu-wheels  # PyCUDA, cffi, ...
# Carry: .gpu-wheels .whl build/futhark/cuda (and build/cuda, if `make cuda` ran here, to skip nvcc there).
set -u
QUICK=${1:-}
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache
export NCCL_NVLS_ENABLE=0        # NVLink multicast off in this process and every worker it starts
export CUPY_TF32=0               # cuBLAS in float32 arithmetic, like pybridge's kernel
REAL_OUT=${OUT:-/tmp/gpu-scale-out}
LOGS=/tmp/gpu-scale-logs
mkdir -p "$REAL_OUT" "$LOGS"
SUMMARY=$REAL_OUT/summary.txt
say() { echo "$*" | tee -a "$SUMMARY"; }
step() { say "== $1 (at ${SECONDS}s)"; }
pack() { tar czf "$REAL_OUT/logs.tar.gz" -C /tmp gpu-scale-logs 2>/dev/null; }
trap pack EXIT

step "topology"
nvidia-smi topo -m > "$REAL_OUT/topo.txt" 2>&1; cat "$REAL_OUT/topo.txt"
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader | tee -a "$SUMMARY"
NGPU=$(nvidia-smi -L | wc -l)

step "install (carried wheels, no network)"
{
  source .gpu-wheels/install.sh
  python3 -c "import distributed" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
    --target /tmp/gpu-site .whl/*.whl
  # dask-cuda and its pure-Python needs (.whl/dask-cuda); its binary ones (cuda-core) must be on the
  # machine already or carried with them (prepare-device-carry.sh's DASK_CUDA_BINARY)
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
for m in ("numpy", "cupy", "cupy.cuda.nccl", "dask", "distributed", "pycuda", "dask_cuda", "pynvml", "matplotlib"):
    try:
        mod = importlib.import_module(m)
        extra = f" nccl available={mod.available}" if m == "cupy.cuda.nccl" else ""
        print(f"  {m}: {getattr(mod, '__version__', 'ok')}{extra}")
    except Exception as e:
        print(f"  {m}: NOT importable ({type(e).__name__}: {str(e)[:150]})")
EOF

step "build: Futhark cuda libraries from the carried C, pybridge's matmul launcher"
{
  timeout 100 make -j16 FUTHARK_BACKEND=cuda FUTHARK=/bin/true \
    build/futhark/cuda/libjacobi.so build/futhark/cuda/libmatmul.so build/futhark/cuda/libsaxpy.so \
    build/futhark/cuda/libmandelbrot.so &
  [ -e build/cuda/libmatmul.so ] || timeout 100 make -j4 build/cuda/libmatmul.so build/cuda/libmatmul.launchers.json &
  wait
} >> "$LOGS/setup.log" 2>&1
ls build/futhark/cuda/lib{jacobi,matmul,saxpy,mandelbrot}.so build/cuda/libmatmul.so 2>&1 | tee -a "$SUMMARY"

step "dask-cuda's CPU pins on this machine"
timeout 30 python3 -c "
import pybridge.dask as pbd
for g, why in pbd.cpu_affinity_report().items():
    print(f'  GPU {g}: {why or \"satisfiable: every CPU near it may be used here\"}')
" 2>&1 | tail -8 | tee -a "$SUMMARY"

step "multi-GPU tests ($NGPU GPUs)"
if [ "$QUICK" = "--quick" ]; then SEL=(-k "nccl_exchange or blocks_are_made"); else SEL=(); fi
timeout 150 python3 -m pytest -q -rfEs -p no:cacheprovider -s "${SEL[@]}" tests/gpu/test_dask_multigpu.py > "$LOGS/test_dask_multigpu.log" 2>&1
say "tests rc=$? $(tail -1 "$LOGS/test_dask_multigpu.log")"
grep -E "^(FAILED|ERROR|SKIPPED)|dask-cuda CPU pin|^worker " "$LOGS/test_dask_multigpu.log" | cut -c1-300 | head -20 | tee -a "$SUMMARY"
if [ "$QUICK" != "--quick" ]; then
  timeout 80 python3 -m pytest -q -rfEs -p no:cacheprovider tests/gpu/test_dask_gpu.py > "$LOGS/test_dask_gpu.log" 2>&1
  say "one-GPU dask tests rc=$? $(tail -1 "$LOGS/test_dask_gpu.log")"
fi

step "pybridge bench scaling --gpus $NGPU"
BENCH=(--gpus "$NGPU" --json "$REAL_OUT/scaling.json" --section "$REAL_OUT/multi-gpu.md" --plot "$REAL_OUT/scaling.png"
       --topology "$REAL_OUT/topo.txt")
[ "$QUICK" = "--quick" ] && BENCH+=(--quick)
timeout 200 python3 -m pybridge bench scaling "${BENCH[@]}" > "$LOGS/bench.out" 2> "$LOGS/bench.err"
say "bench rc=$?"
grep -E "^scaling:" "$LOGS/bench.out" | tee -a "$SUMMARY"
[ -e "$REAL_OUT/multi-gpu.md" ] && sed -n '/\*\*Targets/,/^$/p;/\*\*Targets/,/^\*\*Topology/p' "$REAL_OUT/multi-gpu.md" | head -40 | tee -a "$SUMMARY"
tail -5 "$LOGS/bench.err" | cut -c1-300
[ -e "$REAL_OUT/scaling.png" ] || say "no plot here (matplotlib missing?): draw it from the rows with
  python -m pybridge.bench.scaling_report multi-gpu.json --section multi-gpu.md --plot scaling.png"
say "whole run ${SECONDS}s"
