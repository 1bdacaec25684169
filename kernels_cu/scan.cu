// Inclusive prefix sum of f32 (out[i] = x[0] + ... + x[i]) for any n, in three kernels:
//
//   scan_blocks      grid of ceil(n / SCAN_TILE) blocks; block b scans its tile of SCAN_TILE
//                    elements into out and writes the tile's total to block_sums[b];
//   scan_block_sums  ONE block scans block_sums in place, chunk after chunk with a running carry,
//                    so any number of tiles works (2^26 elements = 32768 tiles = 8 chunks);
//   scan_add         block b (b >= 1) adds block_sums[b-1] to every element of tile b.
//
// Within a tile each thread scans SCAN_ITEMS consecutive elements sequentially, the per-thread
// totals are scanned with warp shuffles, and the results are combined; the order of additions is
// fixed, so results are deterministic. Each prefix goes through O(SCAN_ITEMS + log2(SCAN_BLOCK) +
// number of chunks) roundings, well inside the bound |err_i| <= (i+1) * u * sum_{j<=i} |x_j|.
// In place (x == out) works: a tile is read completely into shared memory before it is written.
// All three kernels need blockDim.x == SCAN_BLOCK.
#include "common.cuh"

#define SCAN_BLOCK 256
#define SCAN_ITEMS 8
#define SCAN_TILE (SCAN_BLOCK * SCAN_ITEMS)
// One padding word every 32 avoids the 8-way bank conflicts of thread t reading words 8t..8t+7.
#define SCAN_PAD(i) ((i) + ((i) >> 5))
#define SCAN_SHARED_WORDS SCAN_PAD(SCAN_TILE)

// Inclusive scan of the SCAN_TILE floats in `tile` (padded layout), in place, plus `carry`.
// Ends with __syncthreads(), so the caller may read any tile element afterwards.
__device__ void scan_tile_inplace(float* tile, float carry) {
    __shared__ float warp_totals[SCAN_BLOCK / 32];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;

    // 1. Each thread scans its SCAN_ITEMS consecutive elements.
    float vals[SCAN_ITEMS];
    float run = 0.0f;
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) {
        run = __fadd_rn(run, tile[SCAN_PAD(tid * SCAN_ITEMS + j)]);
        vals[j] = run;
    }

    // 2. Exclusive scan of the per-thread totals across the block.
    const float incl = pb_warp_inclusive_scan(run);
    float excl = __shfl_up_sync(PB_FULL_MASK, incl, 1);  // exclusive within the warp
    if (lane == 0) excl = 0.0f;
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        float w = (lane < SCAN_BLOCK / 32) ? warp_totals[lane] : 0.0f;
        w = pb_warp_inclusive_scan(w);
        if (lane < SCAN_BLOCK / 32) warp_totals[lane] = w;
    }
    __syncthreads();
    const float before_warp = (warp > 0) ? warp_totals[warp - 1] : 0.0f;
    const float offset = __fadd_rn(carry, __fadd_rn(before_warp, excl));

    // 3. Write back: every element read in step 1 by this thread, so no other thread races us.
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) tile[SCAN_PAD(tid * SCAN_ITEMS + j)] = __fadd_rn(offset, vals[j]);
    __syncthreads();
}

// Coalesced load of SCAN_TILE elements starting at `base` (zeros past n) into the padded tile.
__device__ __forceinline__ void load_tile(float* tile, const float* x, int64_t base, int64_t n) {
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) {
        const int idx = j * SCAN_BLOCK + threadIdx.x;
        const int64_t g = base + idx;
        tile[SCAN_PAD(idx)] = (g < n) ? x[g] : 0.0f;
    }
    __syncthreads();
}

__device__ __forceinline__ void store_tile(const float* tile, float* out, int64_t base, int64_t n) {
#pragma unroll
    for (int j = 0; j < SCAN_ITEMS; ++j) {
        const int idx = j * SCAN_BLOCK + threadIdx.x;
        const int64_t g = base + idx;
        if (g < n) out[g] = tile[SCAN_PAD(idx)];
    }
}

extern "C" __global__ void __launch_bounds__(SCAN_BLOCK)
scan_blocks(const float* x, float* out, float* block_sums, int64_t n) {
    __shared__ float tile[SCAN_SHARED_WORDS];
    const int64_t base = static_cast<int64_t>(blockIdx.x) * SCAN_TILE;
    load_tile(tile, x, base, n);
    scan_tile_inplace(tile, 0.0f);
    store_tile(tile, out, base, n);
    // Elements past n were loaded as 0, so the last slot holds the tile's total.
    if (threadIdx.x == 0) block_sums[blockIdx.x] = tile[SCAN_PAD(SCAN_TILE - 1)];
}

// Launch with exactly one block of SCAN_BLOCK threads.
extern "C" __global__ void __launch_bounds__(SCAN_BLOCK)
scan_block_sums(float* sums, int64_t m) {
    __shared__ float tile[SCAN_SHARED_WORDS];
    float carry = 0.0f;
    for (int64_t base = 0; base < m; base += SCAN_TILE) {
        load_tile(tile, sums, base, m);
        scan_tile_inplace(tile, carry);
        store_tile(tile, sums, base, m);
        carry = tile[SCAN_PAD(SCAN_TILE - 1)];
        __syncthreads();  // everyone has read the carry before the next chunk overwrites the tile
    }
}

// Grid of (num_tiles - 1) blocks: block b handles tile b + 1.
extern "C" __global__ void __launch_bounds__(SCAN_BLOCK)
scan_add(float* out, const float* __restrict__ scanned_sums, int64_t n) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) + 1;
    const float add = scanned_sums[t - 1];
    const int64_t base = t * SCAN_TILE;
    for (int j = threadIdx.x; j < SCAN_TILE; j += SCAN_BLOCK) {
        const int64_t g = base + j;
        if (g < n) out[g] = __fadd_rn(add, out[g]);
    }
}

PB_DEFINE_ERROR_HELPERS

// Number of tiles for n elements: the scratch (block_sums) size launch_scan needs, in floats.
extern "C" int64_t scan_num_tiles(int64_t n) {
    return n <= 0 ? 0 : (n + SCAN_TILE - 1) / SCAN_TILE;
}

// block_sums: scratch of at least scan_num_tiles(n) floats.
extern "C" int launch_scan(const float* x, float* out, int64_t n, float* block_sums, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t tiles = scan_num_tiles(n);
    if (tiles == 0) return static_cast<int>(cudaSuccess);
    if (tiles > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
    cudaStream_t s = PB_STREAM(stream);
    scan_blocks<<<static_cast<unsigned int>(tiles), SCAN_BLOCK, 0, s>>>(x, out, block_sums, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || tiles == 1) return static_cast<int>(err);
    scan_block_sums<<<1, SCAN_BLOCK, 0, s>>>(block_sums, tiles);
    err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
    scan_add<<<static_cast<unsigned int>(tiles - 1), SCAN_BLOCK, 0, s>>>(out, block_sums, n);
    return static_cast<int>(cudaGetLastError());
}
