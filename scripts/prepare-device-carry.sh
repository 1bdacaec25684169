#!/usr/bin/env bash
# Make, on a development machine with network, the third-party files the GPU machine needs carried
# (it has Python 3.12, CUDA, CuPy and PyTorch, but no network and no Futhark compiler). None of them
# is committed (.gitignore): they are other projects' binaries, made again by this script.
#
#   scripts/prepare-device-carry.sh [--wheels-only | --futhark-only] [--no-dask-cuda]
#
#   .whl/*.whl                  dask, distributed and what they need, as cp312 manylinux x86_64 wheels.
#                               scripts/gpu_dask.sh, gpu_exchange.sh and gpu_benchmarks.sh install them:
#                               pip install --no-index --no-deps --target /tmp/gpu-site .whl/*.whl
#   .whl/dask-cuda/*.whl        dask-cuda (LocalCUDACluster) and its pure-Python needs (rapids-dask-dependency,
#                               nvidia-ml-py, cuda-pathfinder, ...), resolved together with the dask above
#                               (dask-cuda pins dask's version). Install them beside .whl/*.whl where
#                               LocalCUDACluster is used. Not carried: its binary needs (cuda-core, pandas,
#                               numpy; numba with llvmlite for older dask-cuda: 60 MB, and a device call carries
#                               64 MiB in all), which the script lists and the GPU machine must have unless
#                               DASK_CUDA_BINARY names them (DASK_CUDA_BINARY="cuda_core pandas" carries those
#                               two), and the dashboard's bokeh with its needs (rapids-dask-dependency asks for
#                               it; nothing here serves the dashboard). rapids-dask-dependency's .pth file acts
#                               only in a site folder: site.addsitedir('/tmp/gpu-site'), not PYTHONPATH.
#   .carry-futhark/futhark.tar.xz   the Futhark compiler found here (scripts/install-futhark.sh --find-only),
#                               as bin/futhark (+ futhark/root, the Debian package set install-futhark.sh unpacks);
#                               scripts/gpu_check.sh unpacks it into /tmp/futhark-tools.
#
# Variables: PYTHON (default python3) runs pip; DASK_CUDA (default 'dask-cuda>=25.10') is the requirement;
# DASK_CUDA_BINARY: binary wheels of dask-cuda's needs to carry too (names as in the wheel files).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DASK_CUDA=${DASK_CUDA:-dask-cuda>=25.10}
WHEELS=yes FUTHARK=yes WITH_DASK_CUDA=yes
for arg in "$@"; do
  case "$arg" in
    --wheels-only) FUTHARK= ;;
    --futhark-only) WHEELS= ;;
    --no-dask-cuda) WITH_DASK_CUDA= ;;
    *) echo "prepare-device-carry: unknown argument '$arg' (expected --wheels-only, --futhark-only or --no-dask-cuda)" >&2; exit 2 ;;
  esac
done
say() { echo "prepare-device-carry: $*" >&2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The GPU machine's interpreter: CPython 3.12 on manylinux x86_64; binary wheels only (it cannot build).
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_28_x86_64)
# What rapids-dask-dependency pulls in for distributed's dashboard, which no GPU script serves.
DASHBOARD='^(bokeh|narwhals|xyzservices|contourpy|pillow)-'

if [ -n "$WHEELS" ]; then
  base=(dask distributed)
  if [ -n "$WITH_DASK_CUDA" ]; then
    # Resolved together, so dask and distributed are the versions dask-cuda's rapids-dask-dependency pins.
    if "$PYTHON" -m pip download -q "${TARGET[@]}" -d "$work/all" "${base[@]}" "$DASK_CUDA" >&2; then
      pins=()
      for w in "$work"/all/dask-[0-9]*.whl "$work"/all/distributed-[0-9]*.whl; do
        n=$(basename "$w"); pins+=("${n%%-*}==$(echo "$n" | cut -d- -f2)")
      done
      base=("${pins[@]}")
    else
      say "dask-cuda ($DASK_CUDA) did not download; carrying dask and distributed alone"
      WITH_DASK_CUDA=
    fi
  fi
  "$PYTHON" -m pip download -q "${TARGET[@]}" -d "$work/dask" "${base[@]}" >&2
  rm -rf .whl.new && mkdir -p .whl.new
  cp "$work"/dask/*.whl .whl.new/
  if [ -n "$WITH_DASK_CUDA" ]; then
    mkdir -p .whl.new/dask-cuda
    left=()
    for w in "$work"/all/*.whl; do
      n=$(basename "$w")
      [ -e ".whl.new/$n" ] && continue                                   # dask's part, above
      [[ "$n" =~ $DASHBOARD ]] && continue
      abi=$(echo "${n%.whl}" | rev | cut -d- -f2 | rev)                  # name-version-python-abi-platform
      if [ "$abi" = none ] || [[ " ${DASK_CUDA_BINARY:-} " == *" ${n%%-*} "* ]]; then cp "$w" .whl.new/dask-cuda/
      else left+=("${n%%-*}"); fi
    done
    say "dask-cuda's binary needs, not carried (the GPU machine must have them): ${left[*]:-none}"
  fi
  rm -rf .whl && mv .whl.new .whl
  say "wrote .whl ($(du -sh .whl | cut -f1)): $(cd .whl && find . -name '*.whl' | sed 's|^\./||' | sort | tr '\n' ' ')"
fi

if [ -n "$FUTHARK" ]; then
  fut=$(bash scripts/install-futhark.sh --find-only | tail -n1) \
    || { say "no Futhark compiler here: run make or pybridge install-futhark first"; exit 1; }
  tools=$(cd "$(dirname "$fut")/.." && pwd)
  mkdir -p .carry-futhark
  if [ -d "$tools/futhark/root" ] && [ "$(basename "$(dirname "$fut")")" = bin ]; then
    tar cJf .carry-futhark/futhark.tar.xz.new -C "$tools" futhark bin/futhark  # install-futhark.sh's layout
  elif [ "$(head -c 4 "$fut" | od -An -c | tr -d ' ')" = '177ELF' ]; then
    mkdir -p "$work/futhark/bin" && cp "$fut" "$work/futhark/bin/futhark"    # a release binary (static)
    tar cJf .carry-futhark/futhark.tar.xz.new -C "$work/futhark" bin/futhark
  else
    say "$fut is neither install-futhark.sh's wrapper nor a compiler binary; set FUTHARK to the official release's bin/futhark"
    exit 1
  fi
  mv .carry-futhark/futhark.tar.xz.new .carry-futhark/futhark.tar.xz
  say "wrote .carry-futhark/futhark.tar.xz ($(du -h .carry-futhark/futhark.tar.xz | cut -f1)) from $fut ($("$fut" --version | head -n1))"
fi
