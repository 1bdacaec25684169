// The elementwise chain of the fusion benchmark (futhark/chain.fut and the reference probe):
//
//     op k x = x * 1.0001f + (float)k * 0.001f
//
// chain(x, out, n, nops)      applies op 1, op 2, ..., op nops to every element in ONE kernel;
// chain_step(x, out, n, k)    applies op k alone (the unfused version: one kernel per op).
//
// Every multiply and add is rounded on its own (__fmul_rn/__fadd_rn: no FMA contraction), so the
// fused result equals the unfused one and NumPy's float32, step by step, exactly:
//     for k in 1..nops: x = x * np.float32(1.0001) + np.float32(k) * np.float32(0.001)
// The constants are written in hex so they are the exact float32 values np.float32(1.0001) and
// np.float32(0.001) (0x1.00068ep+0 and 0x1.0624dep-10); (float)k is exact for |k| < 2^24.
#include "common.cuh"

__device__ __forceinline__ float chain_op(float x, int32_t k) {
    return __fadd_rn(__fmul_rn(x, 0x1.00068ep+0f), __fmul_rn(static_cast<float>(k), 0x1.0624dep-10f));
}

extern "C" __global__ void chain(const float* x, float* out, int64_t n,
                                 int32_t nops) {
    const int64_t stride = pb_grid_stride();
    for (int64_t i = pb_global_index(); i < n; i += stride) {
        float v = x[i];
        for (int32_t k = 1; k <= nops; ++k) v = chain_op(v, k);
        out[i] = v;
    }
}

// Both kernels work in place (x == out): each element is read, then written, by the same thread.
extern "C" __global__ void chain_step(const float* x, float* out, int64_t n, int32_t k) {
    const int64_t stride = pb_grid_stride();
    for (int64_t i = pb_global_index(); i < n; i += stride) {
        out[i] = chain_op(x[i], k);
    }
}

PB_DEFINE_ERROR_HELPERS

extern "C" int launch_chain(const float* x /*[n]*/, float* out /*[n]*/, int64_t n, int32_t nops, void* stream) {
    if (n < 0 || nops < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (n == 0) return static_cast<int>(cudaSuccess);
    const int block = 256;
    chain<<<pb_grid_stride_blocks(n, block), block, 0, PB_STREAM(stream)>>>(x, out, n, nops);
    return static_cast<int>(cudaGetLastError());
}

extern "C" int launch_chain_step(const float* x /*[n]*/, float* out /*[n]*/, int64_t n, int32_t k, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (n == 0) return static_cast<int>(cudaSuccess);
    const int block = 256;
    chain_step<<<pb_grid_stride_blocks(n, block), block, 0, PB_STREAM(stream)>>>(x, out, n, k);
    return static_cast<int>(cudaGetLastError());
}
