// Variants of kernels_cu/matmul.cu's kernel body for benchmarks/matmul_variants.py (one cubin):
// how far the k loop of a slice is unrolled, and the register cap (two blocks per SM or one).
#include "../kernels_cu/matmul.cu"

#define MM_VARIANT(name, unroll, min_blocks)                                                        \
    extern "C" __global__ void __launch_bounds__(MM_THREADS, min_blocks)                            \
    name(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int32_t m, \
         int32_t n, int32_t k) {                                                                    \
        matmul_body<unroll>(a, b, c, m, n, k);                                                      \
    }

MM_VARIANT(mm_u1_b2, 1, 2)
MM_VARIANT(mm_u2_b2, 2, 2)
MM_VARIANT(mm_u4_b2, 4, 2)
MM_VARIANT(mm_u8_b1, 8, 1)
MM_VARIANT(mm_u16_b2, 16, 2)
MM_VARIANT(mm_u4_b1, 4, 1)
MM_VARIANT(mm_u16_b1, 16, 1)
