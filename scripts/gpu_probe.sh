#!/usr/bin/env bash
# First look at the GPU machine: environment, real Futhark cuda output (C generated here by
# `futhark cuda --library`, compiled there), pybridge.futhark on it with CuPy and PyTorch.
set -u
export PYTHONUNBUFFERED=1
source .gpu-wheels/install.sh
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
python3 -c "import sys, numpy, cffi; print(sys.version.split()[0], 'numpy', numpy.__version__, 'cffi', cffi.__version__)"
python3 -c "import pycuda.driver as d; d.init(); print('pycuda', d.get_version(), d.Device(0).name())"
python3 -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"
for d in build/futhark/cuda build/reference/cuda; do
  for c in $d/*.c; do n=$(basename "$c" .c)
    gcc -O3 -fPIC -shared -I"$CUDA_HOME/include" -o "$d/lib$n.so" "$c" -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcuda -lcudart -lnvrtc -lm || echo "BUILD FAIL $n"
  done
done
ls build/reference/cuda
timeout 400 python3 -m pytest -q -rs -x --timeout 120 tests/gpu/test_futhark_cuda.py 2>&1 | tee $OUT/probe.log | tail -40
timeout 300 python3 -m pytest -q -rs --timeout 120 tests/test_futhark_api.py -k "cuda" 2>&1 | tail -15
