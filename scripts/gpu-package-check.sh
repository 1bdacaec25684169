#!/usr/bin/env bash
# Check `pybridge package` with the cuda backend on a GPU machine (tests/gpu/test_package_cuda.py).
#
#   scripts/gpu-package-check.sh generate   # here, where Futhark is: C for c, multicore and cuda
#                                           # into build/package-gpu/<backend>/shipdemo.{c,h,json}
#   scripts/gpu-package-check.sh test       # on the GPU machine (carry build/package-gpu): package
#                                           # with --generated, then use the wheel with no cc/futhark
#
# The GPU machine needs the CUDA toolkit (nvcc, cuda.h, nvrtc.h; CUDA_HOME if not /usr/local/cuda),
# a C compiler, numpy and cffi (.gpu-wheels/install.sh). `generate` also downloads the wheels of
# `wheel` (the wheel writer) and `setuptools` (cffi's compiler driver) into $OUT/wheels, which `test`
# installs into /tmp/package-site: the GPU machine cannot download. Futhark is not needed there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${PYBRIDGE_PACKAGE_GENERATED:-build/package-gpu}
PYTHON=${PYTHON:-python3}

case "${1:-}" in
  generate)
    FUTHARK=${FUTHARK:-$(scripts/install-futhark.sh 2>/dev/null | tail -n1)}
    for b in c multicore cuda; do
      mkdir -p "$OUT/$b"
      "$FUTHARK" "$b" --library -o "$OUT/$b/shipdemo" tests/package/shipdemo.fut
    done
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/wheels" wheel setuptools
    echo "wrote $OUT/{c,multicore,cuda}/shipdemo.{c,h,json} and $OUT/wheels; carry $OUT to the GPU machine"
    ;;
  test)
    if ls "$OUT"/wheels/*.whl >/dev/null 2>&1; then
      "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/package-site "$OUT"/wheels/*.whl
      export PYTHONPATH=/tmp/package-site${PYTHONPATH:+:$PYTHONPATH}
    fi
    PYBRIDGE_PACKAGE_GENERATED=$OUT "$PYTHON" -m pytest -rs -q tests/gpu/test_package_cuda.py
    ;;
  *)
    echo "usage: $0 generate|test" >&2
    exit 2
    ;;
esac
