// C = A * B in f32, row-major: A is m x k, B is k x n, C is m x n; any m, n, k >= 0. Plain float32
// FMAs (no tensor cores, no TF32).
//
// A block of MM_THREADS (256) threads computes a MM_BM x MM_BN (128 x 128) tile of C, stepping
// through k in slices of MM_BK (16):
//   * two shared-memory buffers per matrix (double buffering, one barrier per slice): the copies of
//     slice s+1 are issued before the arithmetic on slice s. The B slice (16 x 128) goes straight
//     to shared memory with cp.async; the A slice (128 x 16) is stored transposed (As[kk][row]), so
//     it goes through registers, written to shared memory after the arithmetic;
//   * global accesses are 16 bytes wide when the rows allow it (k % 4 == 0 for A, n % 4 == 0 for B,
//     16-byte aligned bases), else element by element; zeros outside the matrices (cp.async
//     zero-fill), so edge tiles need no other special case;
//   * each thread accumulates an 8 x 8 sub-tile in registers: rows 4*ty + i and 64 + 4*ty + i,
//     columns 4*tx + j and 64 + 4*tx + j (i, j in 0..3), read from shared memory as float4s. A warp
//     is 4 ty x 8 tx, so its B reads cover 128 contiguous bytes and its A reads are broadcasts.
//   * blocks are visited in groups of MM_GROUP rows of tiles, so blocks running together share
//     panels of A and B in L2.
// Each c[r][c] is a sequential fmaf chain over k in ascending order: |err| <= k * u * sum |a||b|.
// Launch: blockDim = (256, 1, 1), gridDim = (ceil(n / 128), ceil(m / 128), 1). c must not overlap a or b.
#include "common.cuh"

#define MM_BM 128
#define MM_BN 128
#define MM_BK 16
#define MM_THREADS 256
#define MM_GROUP 8  // rows of tiles per L2 group

// Loads of one k-slice, held in registers between the global read and the shared-memory store.
struct MmStage {
    float4 a[2];
};

// Four consecutive elements of a row, zeros past `limit` (the row length) or for a row outside the
// matrix; one 16-byte load when `vec` (aligned rows) and the four are inside.
__device__ __forceinline__ float4 mm_load4(const float* __restrict__ p, int col, int limit,
                                           bool row_ok, bool vec) {
    if (!row_ok) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (vec && col + 3 < limit) return __ldg(reinterpret_cast<const float4*>(p));
    return make_float4(col < limit ? __ldg(p) : 0.0f, col + 1 < limit ? __ldg(p + 1) : 0.0f,
                       col + 2 < limit ? __ldg(p + 2) : 0.0f, col + 3 < limit ? __ldg(p + 3) : 0.0f);
}

// Asynchronous global -> shared copies (cp.async, sm_80+): `bytes` of the source are copied and the
// rest of the destination is zero-filled (bytes == 0: zeros, nothing is read).
__device__ __forceinline__ void mm_cp_async16(float* dst, const float* src, int bytes) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mm_cp_async4(float* dst, const float* src, int bytes) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mm_cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

// The kernel body; KK_UNROLL is how far the loop over a slice's 16 k values is unrolled (a full
// unroll lets the compiler hoist shared-memory reads but, capped at 128 registers for two blocks per
// SM, it spills; benchmarks/matmul_variants.cu times the choices).
template <int KK_UNROLL>
__device__ __forceinline__ void matmul_body(const float* __restrict__ a, const float* __restrict__ b,
                                            float* __restrict__ c, int32_t m, int32_t n, int32_t k) {
    __shared__ __align__(16) float As[2][MM_BK][MM_BM];
    __shared__ __align__(16) float Bs[2][MM_BK][MM_BN];

    // Grouped tile order (pid -> tile row, tile column).
    const int gx = gridDim.x;
    const int gy = gridDim.y;
    const int pid = blockIdx.y * gx + blockIdx.x;
    const int group_tiles = MM_GROUP * gx;
    const int first_row = (pid / group_tiles) * MM_GROUP;
    const int group_rows = min(gy - first_row, MM_GROUP);
    const int tile_row = first_row + (pid % group_tiles) % group_rows;
    const int tile_col = (pid % group_tiles) / group_rows;
    const int64_t row0 = static_cast<int64_t>(tile_row) * MM_BM;
    const int64_t col0 = static_cast<int64_t>(tile_col) * MM_BN;

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int tx = (warp & 1) * 8 + (lane & 7);  // 0..15: column group
    const int ty = (warp >> 1) * 4 + (lane >> 3);  // 0..15: row group

    const bool vec_a = (k % 4 == 0) && (reinterpret_cast<uintptr_t>(a) & 15) == 0;
    const bool vec_b = (n % 4 == 0) && (reinterpret_cast<uintptr_t>(b) & 15) == 0;

    // Loader roles. A: float4 f = tid + 256*j is row f % 128, columns 4*(f / 128) .. +3 of the
    // slice (a warp covers 32 rows: its transposing stores hit 32 consecutive words). B: row
    // f / 32, columns 4*(f % 32) .. +3 (a warp reads 512 contiguous bytes).
    const int a_row = tid % MM_BM;
    const int a_q = tid / MM_BM;  // 0 or 1; j = 1 adds 2
    const int b_row = tid / 32;  // 0..7; j = 1 adds 8
    const int b_col = 4 * (tid % 32);

    // Source pointers advance one slice per step (A: 16 columns, B: 16 rows), with the column and
    // row they stand at for the bounds checks.
    const bool a_row_ok = row0 + a_row < m;
    const float* a_src = a + (a_row_ok ? (row0 + a_row) * k : 0) + 4 * a_q;
    int a_col = 4 * a_q;  // j = 1: + 8
    const int64_t b_col_g = col0 + b_col;
    const float* b_src = b + static_cast<int64_t>(b_row) * n + b_col_g;
    int b_k = b_row;  // j = 1: + 8
    const int64_t b_8rows = 8 * static_cast<int64_t>(n);
    auto load = [&](MmStage& st) {
        st.a[0] = mm_load4(a_src, a_col, k, a_row_ok, vec_a);
        st.a[1] = mm_load4(a_src + 8, a_col + 8, k, a_row_ok, vec_a);
        a_src += MM_BK;
        a_col += MM_BK;
    };
    // B goes straight to shared memory (cp.async, no registers held across the arithmetic).
    auto copy_b = [&](int buf) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float* dst = &Bs[buf][b_row + 8 * j][b_col];
            const bool row_ok = b_k + 8 * j < k;
            const float* src = b_src + (j ? b_8rows : 0);
            if (vec_b) {
                const bool ok = row_ok && b_col_g < n;  // n % 4 == 0: the 4 columns are all in or all out
                mm_cp_async16(dst, ok ? src : b, ok ? 16 : 0);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const bool ok = row_ok && b_col_g + e < n;
                    mm_cp_async4(dst + e, ok ? src + e : b, ok ? 4 : 0);
                }
            }
        }
        b_src += MM_BK * static_cast<int64_t>(n);
        b_k += MM_BK;
    };
    auto store = [&](int buf, const MmStage& st) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int kk = 4 * (a_q + 2 * j);
            As[buf][kk][a_row] = st.a[j].x;
            As[buf][kk + 1][a_row] = st.a[j].y;
            As[buf][kk + 2][a_row] = st.a[j].z;
            As[buf][kk + 3][a_row] = st.a[j].w;
        }
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int slices = (k + MM_BK - 1) / MM_BK;
    MmStage stage;
    if (slices > 0) {
        copy_b(0);
        load(stage);
        store(0, stage);
        mm_cp_async_wait_all();
        __syncthreads();
    }
    for (int s = 0; s < slices; ++s) {
        const int buf = s & 1;
        const bool more = s + 1 < slices;
        if (more) {
            copy_b(buf ^ 1);  // the other buffer was last read before the previous barrier
            load(stage);
        }
#pragma unroll KK_UNROLL
        for (int kk = 0; kk < MM_BK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][4 * ty]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][64 + 4 * ty]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][4 * tx]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][64 + 4 * tx]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (more) {
            store(buf ^ 1, stage);
            mm_cp_async_wait_all();
        }
        __syncthreads();
    }

    const bool vec_c = (n % 4 == 0) && (reinterpret_cast<uintptr_t>(c) & 15) == 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int64_t gr = row0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + (i - 4));
        if (gr >= m) continue;
        float* crow = c + gr * n;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t gc = col0 + 64 * h + 4 * tx;
            const float* v = &acc[i][4 * h];
            if (vec_c && gc + 3 < n) {
                *reinterpret_cast<float4*>(crow + gc) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (gc + j < n) crow[gc + j] = v[j];
            }
        }
    }
}

// Chosen from benchmarks/matmul_variants.cu on the H100 (benchmarks/kernels-notes.md): the k loop
// fully unrolled and no 2-blocks-per-SM register cap (153 registers, no spills, one block per SM)
// ran as fast as any variant (78% of cuBLAS at 8192); capped at 128 registers it spills.
#ifndef MM_KK_UNROLL
#define MM_KK_UNROLL 16
#endif
#ifndef MM_MIN_BLOCKS
#define MM_MIN_BLOCKS 1
#endif

extern "C" __global__ void __launch_bounds__(MM_THREADS, MM_MIN_BLOCKS)
matmul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c, int32_t m,
       int32_t n, int32_t k) {
    matmul_body<MM_KK_UNROLL>(a, b, c, m, n, k);
}

PB_DEFINE_ERROR_HELPERS

extern "C" int launch_matmul(const float* a /*[m*k]*/, const float* b /*[k*n]*/, float* c /*[m*n]*/, int32_t m, int32_t n,
                             int32_t k, void* stream) {
    if (m < 0 || n < 0 || k < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (m == 0 || n == 0) return static_cast<int>(cudaSuccess);  // C is empty
    const unsigned int gx = static_cast<unsigned int>((static_cast<int64_t>(n) + MM_BN - 1) / MM_BN);
    const unsigned int gy = static_cast<unsigned int>((static_cast<int64_t>(m) + MM_BM - 1) / MM_BM);
    if (gy > 65535) return static_cast<int>(cudaErrorInvalidConfiguration);  // m > 8,388,480
    if (static_cast<int64_t>(gx) * gy > 0x7fffffff) return static_cast<int>(cudaErrorInvalidConfiguration);
    matmul<<<dim3(gx, gy, 1), MM_THREADS, 0, PB_STREAM(stream)>>>(a, b, c, m, n, k);
    return static_cast<int>(cudaGetLastError());
}
