#!/usr/bin/env bash
# Every one-GPU check in ONE device call on a machine of 4 GPUs (nvidia-h100-x4 / -h200-x4), one
# job per GPU at once, each job's time limited so the call ends by TOTAL seconds (560):
#   GPU 0: scripts/gpu_callpath.sh (the call path's benchmarks and table, its differential test and
#          GPU tests; alone on its GPU: the other jobs use other GPUs and other CPUs of 64);
#   GPU 1: scripts/gpu_lifecycle.sh (the lifecycle machine on cuda, 2,000 sequences);
#   GPU 2 and 3: scripts/gpu_check.sh over the GPU test files, split in two, and the generated
#          interfaces' cuda profile.
# The build (make cuda, the Futhark cuda libraries from the carried C, the call path extension in
# place, pip install) happens once first; the jobs skip theirs (PYBRIDGE_GPU_PREPARED=1).
# Prepare and carry as the three scripts say: .gpu-wheels, build/futhark/cuda, build/reference/cuda,
# build/cuda, .carry-gen (lifecycle/ and gen-cuda/), .carry-programs, .carry-futhark.
# Comes back in $OUT (3 files): callpath-table.md, lifecycle-cuda.json, every-check-logs.tar.gz (every log and JSON).
set -u
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYBRIDGE_CACHE=/tmp/pb-cache PYBRIDGE_TEST_CACHE=/tmp/pb-cache
REAL_OUT=${OUT:-/tmp/every-check-out}
LOGS=/tmp/every-check-logs
rm -rf "$LOGS"; mkdir -p "$REAL_OUT" "$LOGS"
source .gpu-wheels/install.sh
source scripts/carried-futhark.sh
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
n=$(nvidia-smi -L | wc -l)
[ "$n" -ge 4 ] || { echo "needs 4 GPUs, found $n"; exit 1; }
echo "== build once (at ${SECONDS}s)"
make cuda -j16 > "$LOGS/make-cuda.log" 2>&1 || grep -E "error" "$LOGS/make-cuda.log" | head
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true -j16 > "$LOGS/make-futhark.log" 2>&1 || grep -E "rror" "$LOGS/make-futhark.log" | head
# the c and multicore libraries too: docs pages load a program on them beside cuda (the carried compiler builds them)
for b in c multicore; do
  [ -n "${FUTHARK:-}" ] && { make futhark FUTHARK_BACKEND=$b FUTHARK="$FUTHARK" -j16 > "$LOGS/make-futhark-$b.log" 2>&1 || grep -E "rror" "$LOGS/make-futhark-$b.log" | head; }
  echo "futhark $b libraries: $(ls build/futhark/$b/*.so 2>/dev/null | wc -l)"
done
echo "futhark cuda libraries: $(ls build/futhark/cuda/*.so build/reference/cuda/*.so 2>/dev/null | wc -l)"
python3 setup.py -q build_ext --inplace > "$LOGS/build_ext.log" 2>&1 || { echo "build_ext failed:"; tail -5 "$LOGS/build_ext.log"; }
python3 -m pip install -q --no-build-isolation --no-deps . > "$LOGS/pip.log" 2>&1 || tail -3 "$LOGS/pip.log"
echo "call path: $(python3 -c 'from pybridge.futhark import callpath; print(callpath.DESCRIPTION)')"
export PYBRIDGE_GPU_PREPARED=1
# Every job ends by TOTAL (default 560 s) less a few seconds for packing the logs.
limit=$(( ${TOTAL:-560} - SECONDS - 10 )); [ "$limit" -gt 60 ] || limit=60
echo "== four jobs, each limited to ${limit}s (at ${SECONDS}s)"
(CUDA_VISIBLE_DEVICES=0 OUT="$LOGS/callpath" BUDGET=$((limit - 10)) \
   GPU_TEST_FILES="tests/gpu/test_callpath_exchange.py tests/gpu/test_exchange_order.py" \
   bash scripts/gpu_callpath.sh > "$LOGS/job-callpath.txt" 2>&1
 echo "== scripts/gpu_first_library.py (the overhead bench's default-mode row, load and measuring order)" >> "$LOGS/job-callpath.txt"
 CUDA_VISIBLE_DEVICES=0 timeout 60 python3 scripts/gpu_first_library.py >> "$LOGS/job-callpath.txt" 2>&1) &
(mkdir -p "$LOGS/lifecycle" && CUDA_VISIBLE_DEVICES=1 OUT="$LOGS/lifecycle" JOBS=${LIFECYCLE_JOBS:-12} LIMIT=$((limit - 10)) BATCH_TIMEOUT=$((limit - 40)) \
   bash scripts/gpu_lifecycle.sh > "$LOGS/job-lifecycle.txt" 2>&1) &
(mkdir -p "$LOGS/tests-a" && CUDA_VISIBLE_DEVICES=2 OUT="$LOGS/tests-a" SKIP_DEMO=1 GPU_TEST_TIMEOUT=200 \
   GPU_TEST_FILES="tests/gpu/test_futhark_cuda.py tests/gpu/test_cuda_kernels.py tests/gpu/test_cuda_interop.py tests/gpu/test_cuda_compile.py tests/gpu/test_thin_path.py tests/gpu/test_convert_gpu.py tests/gpu/test_package_cuda.py tests/gpu/test_cuda_exit.py" \
   timeout "$limit" bash scripts/gpu_check.sh > "$LOGS/job-tests-a.txt" 2>&1) &
(mkdir -p "$LOGS/tests-b" && export CUDA_VISIBLE_DEVICES=3 OUT="$LOGS/tests-b" GPU_TEST_TIMEOUT=200 \
   GPU_TEST_FILES="tests/test_reliability3.py tests/test_threads.py tests/test_futhark_api.py tests/test_futhark_c_api.py tests/test_futhark_programs.py tests/test_wrap_sizes.py tests/test_manifest_header.py tests/gpu/test_docs_gpu.py" \
   && timeout "$limit" bash scripts/gpu_check.sh > "$LOGS/job-tests-b.txt" 2>&1) &
# The generated interfaces' cuda profile beside them (its own job: compiling the API bindings takes
# over a minute, which after the tests-b files ran past the limit).
(if [ -d .carry-gen/gen-cuda ]; then
   CUDA_VISIBLE_DEVICES=3 PYBRIDGE_GEN_PREBUILT=$PWD/.carry-gen/gen-cuda PYBRIDGE_GEN_PROFILE=cuda PYBRIDGE_GEN_BACKENDS=cuda \
     timeout "$limit" python3 -m pytest -q -p no:cacheprovider tests/test_generated_interfaces.py -k round_trip > "$LOGS/gen-cuda.log" 2>&1
   echo "generated interfaces, cuda profile: rc=$? $(tail -1 "$LOGS/gen-cuda.log")" > "$LOGS/job-gen-cuda.txt"
 fi) &
wait
echo "== done (at ${SECONDS}s)"
for j in lifecycle tests-a tests-b gen-cuda callpath; do echo "---- $j"; cat "$LOGS/job-$j.txt"; done
cp "$LOGS/callpath/callpath-table.md" "$LOGS/lifecycle/lifecycle-cuda.json" "$REAL_OUT/" 2>/dev/null
tar czf "$REAL_OUT/every-check-logs.tar.gz" -C /tmp every-check-logs
