// Shared helpers for pybridge's CUDA kernels (kernels_cu/*.cu).
//
// Conventions every module follows:
//  * kernels are `extern "C" __global__` so PyCUDA finds them by their plain name;
//  * element indices are 64-bit (int64_t) so arrays past 2^31 elements work;
//  * host launchers are `extern "C" int launch_*(..., void* stream)`: they take device pointers,
//    pick the launch configuration themselves, and return the cudaError_t as an int (0 = success);
//  * float arithmetic that must match NumPy bit for bit uses __fmul_rn/__fadd_rn, which nvcc never
//    contracts into an FMA (a plain `a*b+c` may become one fused, differently rounded operation).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#define PB_FULL_MASK 0xffffffffu

// Host side: the stream arrives as an opaque pointer (a CUstream / cudaStream_t handle, or NULL for
// the legacy default stream).
#define PB_STREAM(s) (static_cast<cudaStream_t>(s))

// Grid-stride loops: a grid of at most this many blocks keeps every SM busy on an H100
// (132 SMs x 2048 threads = 1056 blocks of 256) while bounding the launch size.
#define PB_MAX_GRID_STRIDE_BLOCKS 4096

// Blocks for a grid-stride kernel over n elements; never 0 (a 0-block launch is an error).
static inline unsigned int pb_grid_stride_blocks(int64_t n, int block) {
    int64_t blocks = (n + block - 1) / block;
    if (blocks < 1) blocks = 1;
    if (blocks > PB_MAX_GRID_STRIDE_BLOCKS) blocks = PB_MAX_GRID_STRIDE_BLOCKS;
    return static_cast<unsigned int>(blocks);
}

// First index and stride of a 1-D grid-stride loop, computed in 64 bits.
__device__ __forceinline__ int64_t pb_global_index() {
    return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t pb_grid_stride() {
    return static_cast<int64_t>(blockDim.x) * gridDim.x;
}

// Sum over the 32 lanes of a warp; the result is valid in lane 0. The shuffle tree has a fixed
// shape, so the same inputs always give the same bits. Needs a full warp (blockDim.x % 32 == 0).
__device__ __forceinline__ float pb_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = __fadd_rn(v, __shfl_down_sync(PB_FULL_MASK, v, offset));
    }
    return v;
}

// Inclusive prefix sum over the 32 lanes of a warp (Hillis-Steele with shuffles).
__device__ __forceinline__ float pb_warp_inclusive_scan(float v) {
    const int lane = threadIdx.x & 31;
    for (int offset = 1; offset < 32; offset <<= 1) {
        const float up = __shfl_up_sync(PB_FULL_MASK, v, offset);
        if (lane >= offset) v = __fadd_rn(v, up);
    }
    return v;
}

// Error string helpers exported from every host-launcher library, so Python can explain a
// non-zero return code without linking cudart itself.
#define PB_DEFINE_ERROR_HELPERS                                                  \
    extern "C" const char* pybridge_error_string(int code) {                    \
        return cudaGetErrorString(static_cast<cudaError_t>(code));              \
    }                                                                           \
    extern "C" const char* pybridge_error_name(int code) {                      \
        return cudaGetErrorName(static_cast<cudaError_t>(code));                \
    }
