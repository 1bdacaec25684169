#!/usr/bin/env bash
# pybridge.dask on every GPU of the device machine (nvidia-h200-x2: two): the GPU tests, then the
# scaling benchmark over 1..N GPUs. Carry .gpu-wheels (PyCUDA, cffi), .whl (dask, distributed and
# their needs the machine lacks: scripts/prepare-device-carry.sh --wheels-only makes it on the
# development machine) and build/ holding the C that `futhark cuda --library` generated
# (`make -k futhark FUTHARK_BACKEND=cuda` where the compiler is; the link step may fail there).
set -u
export PYTHONUNBUFFERED=1
source .gpu-wheels/install.sh
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/gpu-site .whl/*.whl || exit 1
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
make cuda 2>&1 | grep -E "error" | head
make futhark FUTHARK_BACKEND=cuda FUTHARK=/bin/true 2>&1 | grep -E "error|Error" | head
ls build/futhark/cuda/lib*.so | wc -l
echo "== GPU tests"
timeout 200 python3 -m pytest -q -rfEs -p no:cacheprovider -m gpu tests/gpu/test_dask_gpu.py > $OUT/test_dask_gpu.log 2>&1
echo "rc=$? $(tail -1 $OUT/test_dask_gpu.log)"; grep -E "^(FAILED|ERROR)" $OUT/test_dask_gpu.log | cut -c1-240 | head
echo "== scaling over $(nvidia-smi -L | wc -l) GPUs"
timeout 330 python3 -m pybridge bench scaling --gpus "$(nvidia-smi -L | wc -l)" --repeat 5 --json $OUT/scaling_gpu.json 2> $OUT/scaling_gpu.err
