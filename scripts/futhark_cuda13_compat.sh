#!/usr/bin/env bash
# Futhark releases before 0.25.34 generate the CUDA 12 call `cuCtxCreate(&ctx, 0, dev)`; CUDA 13's
# cuda.h maps cuCtxCreate to cuCtxCreate_v4, which takes a CUctxCreateParams* second. When the CUDA
# headers are CUDA 13's, rewrite that one call in the generated C (NULL params = the old behaviour).
# Usage: futhark_cuda13_compat.sh CUDA_INCLUDE_DIR file.c...
set -eu
inc=$1; shift
grep -q 'define cuCtxCreate *cuCtxCreate_v4' "$inc/cuda.h" 2>/dev/null || exit 0
for f in "$@"; do
  sed -i 's/cuCtxCreate(&ctx->cu_ctx, 0, ctx->dev)/cuCtxCreate(\&ctx->cu_ctx, NULL, 0, ctx->dev)/' "$f"
done
