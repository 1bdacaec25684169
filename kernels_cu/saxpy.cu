// saxpy: out[i] = a * x[i] + y[i]  (f32).
//
// The product and the sum are rounded separately (__fmul_rn, __fadd_rn) instead of one FMA, so the
// result equals NumPy's float32 `np.float32(a) * x + y` exactly, bit for bit.
//
// Memory-bound (12 bytes per element): when x, y and out are 16-byte aligned the kernel moves
// float4s, SAXPY_UNROLL of them per thread and array in flight before the first use, in a
// grid-stride loop over groups of blockDim.x * SAXPY_UNROLL vectors; the last n % 4 elements (and
// every element when a pointer is misaligned) take the scalar loop. Correct for any grid and block;
// launch_saxpy (and pybridge/demo/catalog.saxpy_config) pick ceil(n / SAXPY_BLOCK_ELEMS) blocks of SAXPY_BLOCK.
#include "common.cuh"

#define SAXPY_BLOCK 256
#define SAXPY_UNROLL 4
#define SAXPY_BLOCK_ELEMS (SAXPY_BLOCK * SAXPY_UNROLL * 4)  // elements one block covers per pass

__device__ __forceinline__ float4 saxpy4(float a, float4 x, float4 y) {
    return make_float4(__fadd_rn(__fmul_rn(a, x.x), y.x), __fadd_rn(__fmul_rn(a, x.y), y.y),
                       __fadd_rn(__fmul_rn(a, x.z), y.z), __fadd_rn(__fmul_rn(a, x.w), y.w));
}

// No __restrict__: out may alias x or y (in place); each element is read, then written, by one thread.
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int64_t n) {
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    const int64_t nvec = aligned ? n / 4 : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    float4* out4 = reinterpret_cast<float4*>(out);
    const int64_t group = static_cast<int64_t>(blockDim.x) * SAXPY_UNROLL;
    for (int64_t base = blockIdx.x * group + threadIdx.x; base < nvec; base += gridDim.x * group) {
        float4 xv[SAXPY_UNROLL], yv[SAXPY_UNROLL];
#pragma unroll
        for (int u = 0; u < SAXPY_UNROLL; ++u) {
            const int64_t i = base + u * static_cast<int64_t>(blockDim.x);
            if (i < nvec) {
                xv[u] = x4[i];
                yv[u] = y4[i];
            }
        }
#pragma unroll
        for (int u = 0; u < SAXPY_UNROLL; ++u) {
            const int64_t i = base + u * static_cast<int64_t>(blockDim.x);
            if (i < nvec) out4[i] = saxpy4(a, xv[u], yv[u]);
        }
    }
    const int64_t stride = pb_grid_stride();
    for (int64_t i = nvec * 4 + pb_global_index(); i < n; i += stride) {
        out[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
    }
}

PB_DEFINE_ERROR_HELPERS

// Blocks launch_saxpy uses: one pass over the data, at least 1, at most 2^31 - 1.
static inline unsigned int saxpy_blocks(int64_t n) {
    int64_t blocks = (n + SAXPY_BLOCK_ELEMS - 1) / SAXPY_BLOCK_ELEMS;
    if (blocks < 1) blocks = 1;
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    return static_cast<unsigned int>(blocks);
}

// Sizes in /*[...]*/: the launcher's declaration for pybridge (make writes it to libsaxpy.launchers.json).
extern "C" int launch_saxpy(float a, const float* x /*[n]*/, const float* y /*[n]*/, float* out /*[n]*/,
                            int64_t n, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (n == 0) return static_cast<int>(cudaSuccess);
    saxpy<<<saxpy_blocks(n), SAXPY_BLOCK, 0, PB_STREAM(stream)>>>(a, x, y, out, n);
    return static_cast<int>(cudaGetLastError());
}
