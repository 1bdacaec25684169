// C = A * B in f32, row-major: A is m x k, B is k x n, C is m x n; any m, n, k >= 0.
//
// Shared-memory tiling with register blocking: a block of 256 threads computes a 64 x 64 tile of C,
// stepping through k in slices of 16. Each slice of A (64 x 16) and B (16 x 64) is staged in shared
// memory (zeros outside the matrices, so edges need no special case), then each thread accumulates a
// 4 x 4 sub-tile: rows ty + 16*i and columns tx + 16*j, i, j in 0..3 (strided, so a warp reads
// consecutive B columns and broadcast A values, without bank conflicts).
// Each c[r][c] is a sequential fmaf chain over k in ascending order: |err| <= k * u * sum |a||b|.
// Launch: blockDim = (256, 1, 1), gridDim = (ceil(n / 64), ceil(m / 64), 1). c must not overlap a or b.
#include "common.cuh"

#define MM_BM 64
#define MM_BN 64
#define MM_BK 16
#define MM_THREADS 256
#define MM_TM 4  // rows of C per thread
#define MM_TN 4  // columns of C per thread

extern "C" __global__ void __launch_bounds__(MM_THREADS)
matmul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int32_t m,
       int32_t n, int32_t k) {
    // As is stored transposed (As[kk][row]) so the compute loop reads rows of it; +1 column of
    // padding spreads the transposing stores over the banks.
    __shared__ float As[MM_BK][MM_BM + 1];
    __shared__ float Bs[MM_BK][MM_BN];

    const int tid = threadIdx.x;
    const int tx = tid % 16;  // column group
    const int ty = tid / 16;  // row group
    const int64_t row0 = static_cast<int64_t>(blockIdx.y) * MM_BM;
    const int64_t col0 = static_cast<int64_t>(blockIdx.x) * MM_BN;

    float acc[MM_TM][MM_TN];
#pragma unroll
    for (int i = 0; i < MM_TM; ++i)
#pragma unroll
        for (int j = 0; j < MM_TN; ++j) acc[i][j] = 0.0f;

    for (int64_t k0 = 0; k0 < k; k0 += MM_BK) {
        // A slice: 64 rows x 16 columns = 1024 values, 4 per thread; consecutive threads read
        // consecutive columns of one row.
#pragma unroll
        for (int l = 0; l < (MM_BM * MM_BK) / MM_THREADS; ++l) {
            const int e = tid + l * MM_THREADS;
            const int r = e / MM_BK;
            const int kk = e % MM_BK;
            const int64_t gr = row0 + r;
            const int64_t gk = k0 + kk;
            As[kk][r] = (gr < m && gk < k) ? a[gr * k + gk] : 0.0f;
        }
        // B slice: 16 rows x 64 columns; consecutive threads read consecutive columns.
#pragma unroll
        for (int l = 0; l < (MM_BK * MM_BN) / MM_THREADS; ++l) {
            const int e = tid + l * MM_THREADS;
            const int kk = e / MM_BN;
            const int cc = e % MM_BN;
            const int64_t gk = k0 + kk;
            const int64_t gc = col0 + cc;
            Bs[kk][cc] = (gk < k && gc < n) ? b[gk * n + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < MM_BK; ++kk) {
            float av[MM_TM];
            float bv[MM_TN];
#pragma unroll
            for (int i = 0; i < MM_TM; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < MM_TN; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < MM_TM; ++i)
#pragma unroll
                for (int j = 0; j < MM_TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();  // the slice is consumed before the next one overwrites it
    }

#pragma unroll
    for (int i = 0; i < MM_TM; ++i) {
        const int64_t gr = row0 + ty + 16 * i;
        if (gr >= m) continue;
#pragma unroll
        for (int j = 0; j < MM_TN; ++j) {
            const int64_t gc = col0 + tx + 16 * j;
            if (gc < n) c[gr * n + gc] = acc[i][j];
        }
    }
}

PB_DEFINE_ERROR_HELPERS

extern "C" int launch_matmul(const float* a, const float* b, float* c, int32_t m, int32_t n,
                             int32_t k, void* stream) {
    if (m < 0 || n < 0 || k < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (m == 0 || n == 0) return static_cast<int>(cudaSuccess);  // C is empty
    const unsigned int gx = static_cast<unsigned int>((static_cast<int64_t>(n) + MM_BN - 1) / MM_BN);
    const unsigned int gy = static_cast<unsigned int>((static_cast<int64_t>(m) + MM_BM - 1) / MM_BM);
    if (gy > 65535) return static_cast<int>(cudaErrorInvalidConfiguration);  // m > 4,194,240
    matmul<<<dim3(gx, gy, 1), MM_THREADS, 0, PB_STREAM(stream)>>>(a, b, c, m, n, k);
    return static_cast<int>(cudaGetLastError());
}
