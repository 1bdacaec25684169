// Deterministic f32 sum in two passes, without float atomics:
//
//   sum_partial  a fixed grid of P blocks (P depends on n only, never on the device or timing);
//                thread t of block b adds x[b*B + t], x[b*B + t + P*B], ... in that order, the
//                block combines its threads with a fixed shuffle tree, writes partials[b];
//   sum_final    one block adds partials[0..P) the same way and writes out[0].
//
// Same input and same n => same additions in the same order => the same bits, run after run.
// Accuracy: every element goes through at most n-1 roundings, so |err| <= (n-1) * u * sum|x|
// (u = 2^-24), the classical bound for any summation order.
// Both kernels need blockDim.x to be a multiple of 32 (full warps for the shuffles), at most 1024.
#include "common.cuh"

// Number of per-block partial sums the launcher uses for n elements (and so the scratch size).
#define SUM_BLOCK 256
#define SUM_MAX_PARTIALS 1024

// Sum over the block; the result is valid in thread 0. Uses 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int nwarps = (blockDim.x + 31) >> 5;
    v = pb_warp_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = (lane < nwarps) ? warp_sums[lane] : 0.0f;
        v = pb_warp_sum(v);
    }
    return v;
}

extern "C" __global__ void sum_partial(const float* __restrict__ x, float* __restrict__ partials,
                                       int64_t n) {
    float acc = 0.0f;
    const int64_t stride = pb_grid_stride();
    for (int64_t i = pb_global_index(); i < n; i += stride) acc = __fadd_rn(acc, x[i]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Launch with exactly one block. num_partials == 0 writes 0 (the sum of nothing).
extern "C" __global__ void sum_final(const float* __restrict__ partials, float* __restrict__ out,
                                     int64_t num_partials) {
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < num_partials; i += blockDim.x) acc = __fadd_rn(acc, partials[i]);
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[0] = acc;
}

PB_DEFINE_ERROR_HELPERS

// Partial sums used for n elements: one per block of SUM_BLOCK, at most SUM_MAX_PARTIALS.
extern "C" int64_t sum_num_partials(int64_t n) {
    if (n <= 0) return 0;
    int64_t p = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    return p < SUM_MAX_PARTIALS ? p : SUM_MAX_PARTIALS;
}

// scratch: at least sum_num_partials(n) floats (SUM_MAX_PARTIALS always suffices).
extern "C" int launch_sum(const float* x, float* out, int64_t n, float* scratch, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t p = sum_num_partials(n);
    if (p > 0) {
        sum_partial<<<static_cast<unsigned int>(p), SUM_BLOCK, 0, PB_STREAM(stream)>>>(x, scratch, n);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return static_cast<int>(err);
    }
    sum_final<<<1, SUM_BLOCK, 0, PB_STREAM(stream)>>>(scratch, out, p);
    return static_cast<int>(cudaGetLastError());
}
