// saxpy: out[i] = a * x[i] + y[i]  (f32).
//
// The product and the sum are rounded separately (__fmul_rn, __fadd_rn) instead of one FMA, so the
// result equals NumPy's float32 `np.float32(a) * x + y` exactly, bit for bit.
#include "common.cuh"

// No __restrict__: out may alias x or y (in place); each element is read, then written, by one thread.
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int64_t n) {
    const int64_t stride = pb_grid_stride();
    for (int64_t i = pb_global_index(); i < n; i += stride) {
        out[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
    }
}

PB_DEFINE_ERROR_HELPERS

extern "C" int launch_saxpy(float a, const float* x, const float* y, float* out, int64_t n,
                            void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (n == 0) return static_cast<int>(cudaSuccess);
    const int block = 256;
    saxpy<<<pb_grid_stride_blocks(n, block), block, 0, PB_STREAM(stream)>>>(a, x, y, out, n);
    return static_cast<int>(cudaGetLastError());
}
