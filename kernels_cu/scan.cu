// Inclusive prefix sum of f32 (out[i] = x[0] + ... + x[i]) for any n, in ONE pass over the data
// (one read and one write of every element): the single-pass scan with decoupled look-back
// (Merrill & Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back", 2016).
//
//   * Each block takes the next tile of SCAN_TILE elements from a counter (dynamic tile ids, so a
//     block only ever waits for tiles that blocks already running hold: no deadlock whatever the
//     order the hardware starts blocks in).
//   * It loads its tile (16-byte loads when x and out are aligned), scans it in shared memory and
//     registers (each thread SCAN_ITEMS consecutive elements, then warp shuffles), and publishes
//     the tile's total as an AGGREGATE in its status word.
//   * Warp 0 looks back over the predecessors' status words, 32 * SCAN_LOOKBACK (32) at a time,
//     adding aggregates until it meets an INCLUSIVE prefix; the tile then publishes its own inclusive prefix and writes its
//     elements plus the exclusive prefix.
//
// Status words are 64-bit (flag << 32 | float bits), written and read whole, so a flag is never
// seen without its value. Scratch (launch_scan's `scratch`, scan_scratch_floats(n) floats, 8-byte
// aligned): word 0 is the tile counter, words 1..tiles the status words; all must be ZERO before the
// launch (launch_scan and catalog.cuda_scan clear them).
//
// Accuracy: prefix i is a sum of its i+1 terms by some addition tree, so
// |err_i| <= i * u * sum_{j<=i} |x_j| (u = 2^-24). The tree depends on how far each look-back had to
// go, i.e. on timing: results can differ in the last bits between runs (always within the bound).
// In place (x == out) works: a tile is read completely before any of it is written.
// Launch: blockDim.x == SCAN_BLOCK; gridDim.x = number of tiles (launch_scan), or fewer (blocks loop).
#include "common.cuh"

#define SCAN_BLOCK 256
#define SCAN_ITEMS 32
#define SCAN_TILE (SCAN_BLOCK * SCAN_ITEMS)
// Tile and cap measured on the H100 (run 5, benchmarks/scan_variants.cu): 32 items (8192-element
// tiles, 37 KB of shared memory) at 6 blocks/SM reached 78 / 83 / 85% of copy at 2^24 / 2^26 / 2^28,
// 16 items at 8 blocks/SM 70 / 74 / 75%: a block's fixed costs (tile-id atomic, barriers,
// look-back, during which it has no loads in flight) spread over twice the bytes.
// Register cap: at least this many blocks resident per SM (40 registers, no spills).
#ifndef SCAN_MIN_BLOCKS
#define SCAN_MIN_BLOCKS 6
#endif
// 4 padding words after every 32: the float4 reads of thread t (words 32t .. 32t+31) and the
// coalesced float4 writes both spread over the 32 banks; alignment to 16 bytes is kept.
#define SCAN_PAD(i) ((i) + (((i) >> 5) << 2))
#define SCAN_SHARED_WORDS SCAN_PAD(SCAN_TILE)

#define SCAN_FLAG_AGGREGATE 1ull
#define SCAN_FLAG_INCLUSIVE 2ull

__device__ __forceinline__ void publish(unsigned long long* status, unsigned long long flag, float v) {
    const unsigned long long word = (flag << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(status), "l"(word) : "memory");
}

__device__ __forceinline__ unsigned long long peek(const unsigned long long* status) {
    unsigned long long word;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(word) : "l"(status) : "memory");
    return word;
}

// Status words each lane of warp 0 reads per look-back step (32 * SCAN_LOOKBACK predecessors per
// round trip to L2). Wider steps were SLOWER on the H100 (run 4: 1 / 4 / 8 / 16 words gave 75 / 74 /
// 72 / 55-60% of copy at 2^28): the look-back's round trips are not what limits this kernel.
#ifndef SCAN_LOOKBACK
#define SCAN_LOOKBACK 1
#endif

// Warp 0 only (all 32 lanes): the sum of all tiles before `tile`. In a step, lane l reads the
// status words of tiles next - l - 32j (j < LOOKBACK, all loads issued before any is used),
// waiting only on words still 0 (a tile not yet past its local scan). Words are then taken in
// order of distance, j ascending: the first j whose 32 words hold an inclusive prefix ends the
// look-back at the nearest such lane; aggregates before it are added. Each lane adds its words in
// fixed order, then a fixed-shape warp sum; how many steps and where the inclusive prefix is found
// depend on timing. Words older than any inclusive prefix are never 0 (that prefix was built from
// them), so waiting on them cannot stall.
template <int LOOKBACK, int SLEEP_NS = 0>
__device__ float look_back(const unsigned long long* status, int64_t tile) {
    const int lane = threadIdx.x & 31;
    float prefix = 0.0f;
    int64_t next = tile - 1;  // nearest predecessor not yet included
    while (true) {
        // Lane l's j-th word is nearest[-32 j] (an immediate offset from one address).
        const int64_t first = next - lane;
        const unsigned long long* nearest = status + first;
        unsigned long long word[LOOKBACK];
#pragma unroll
        for (int j = 0; j < LOOKBACK; ++j) {
            // Tiles before tile 0 read as an inclusive prefix of 0.
            word[j] = first >= 32 * j ? peek(nearest - 32 * j) : (SCAN_FLAG_INCLUSIVE << 32);
        }
#pragma unroll
        for (int j = 0; j < LOOKBACK; ++j) {
            while ((word[j] >> 32) == 0) {
                if (SLEEP_NS > 0) __nanosleep(SLEEP_NS);
                word[j] = peek(nearest - 32 * j);
            }
        }
        float v = 0.0f;
        bool found = false;
#pragma unroll
        for (int j = 0; j < LOOKBACK; ++j) {
            const unsigned inclusive = __ballot_sync(PB_FULL_MASK, (word[j] >> 32) == SCAN_FLAG_INCLUSIVE);
            const int stop = inclusive ? __ffs(inclusive) - 1 : 31;
            if (lane <= stop) v = __fadd_rn(v, __uint_as_float(static_cast<unsigned>(word[j])));
            if (inclusive) {
                found = true;
                break;
            }
        }
        // Fixed-shape sum of the step, lanes 0..31 (lanes past the stop added 0 in the last row).
        v = pb_warp_sum(v);
        v = __shfl_sync(PB_FULL_MASK, v, 0);
        prefix = __fadd_rn(prefix, v);
        if (found) return prefix;
        next -= 32 * LOOKBACK;
    }
}

// One tile per block when the grid has a block per tile (launch_scan); a smaller grid loops, each
// block taking tiles until none is left (progress: the lowest unfinished tile is held by a running
// block whose predecessors are all done). KERNEL: the extern "C" kernels below, which set the
// register cap (blocks per SM).
// Variant knobs (benchmarks/scan_variants.cu): ITEMS per thread; STATIC_IDS takes blockIdx.x as the
// tile (as CUB does: no atomic before the loads, but progress then relies on the hardware starting
// blocks in index order; only with one block per tile); SLEEP_NS backs off between polls.
template <int LOOKBACK, int ITEMS = SCAN_ITEMS, bool STATIC_IDS = false, int SLEEP_NS = 0>
__device__ __forceinline__ void scan_tiles(const float* x, float* out, int64_t n, unsigned long long* scratch) {
    constexpr int TILE = SCAN_BLOCK * ITEMS;
    __shared__ __align__(16) float tile[SCAN_PAD(TILE)];
    __shared__ float warp_totals[SCAN_BLOCK / 32];
    __shared__ float tile_prefix;
    __shared__ int64_t tile_id;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    unsigned long long* status = scratch + 1;
    const int64_t num_tiles = (n + TILE - 1) / TILE;

    for (bool first = true;; first = false) {
    if (!first && gridDim.x >= num_tiles) return;  // one tile each: no second grab
    if (!first) __syncthreads();  // the previous tile's shared memory is no longer read
    if (tid == 0) tile_id = STATIC_IDS ? static_cast<int64_t>(blockIdx.x) : static_cast<int64_t>(atomicAdd(scratch, 1ull));
    __syncthreads();
    const int64_t t = tile_id;
    if (t >= num_tiles) return;
    const int64_t base = t * TILE;
    const bool full = base + TILE <= n;
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;

    // 1. Load the tile (coalesced), zeros past n.
    if (full && aligned) {
        const float4* x4 = reinterpret_cast<const float4*>(x + base);
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j) {
            const int c = j * SCAN_BLOCK + tid;  // float4 chunk of the tile
            *reinterpret_cast<float4*>(&tile[SCAN_PAD(4 * c)]) = x4[c];
        }
    } else {
#pragma unroll
        for (int j = 0; j < ITEMS; ++j) {
            const int e = j * SCAN_BLOCK + tid;
            tile[SCAN_PAD(e)] = (base + e < n) ? x[base + e] : 0.0f;
        }
    }
    __syncthreads();

    // 2. Each thread scans its ITEMS consecutive elements in place (kept in shared memory,
    //    not registers, across the look-back: fewer registers, more resident blocks).
    float run = 0.0f;
#pragma unroll
    for (int q = 0; q < ITEMS / 4; ++q) {
        float4* p = reinterpret_cast<float4*>(&tile[SCAN_PAD(tid * ITEMS + 4 * q)]);
        float4 v = *p;
        v.x = run = __fadd_rn(run, v.x);
        v.y = run = __fadd_rn(run, v.y);
        v.z = run = __fadd_rn(run, v.z);
        v.w = run = __fadd_rn(run, v.w);
        *p = v;
    }

    // 3. Exclusive scan of the per-thread totals across the block; the tile total.
    const float incl = pb_warp_inclusive_scan(run);
    float excl = __shfl_up_sync(PB_FULL_MASK, incl, 1);
    if (lane == 0) excl = 0.0f;
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        float w = (lane < SCAN_BLOCK / 32) ? warp_totals[lane] : 0.0f;
        w = pb_warp_inclusive_scan(w);
        if (lane < SCAN_BLOCK / 32) warp_totals[lane] = w;
        const float total = __shfl_sync(PB_FULL_MASK, w, SCAN_BLOCK / 32 - 1);
        // 4. Publish, look back, publish the inclusive prefix.
        float prefix = 0.0f;
        if (t == 0) {
            if (lane == 0) publish(status, SCAN_FLAG_INCLUSIVE, total);
        } else {
            if (lane == 0) publish(status + t, SCAN_FLAG_AGGREGATE, total);
            prefix = look_back<LOOKBACK, SLEEP_NS>(status, t);
            if (lane == 0) publish(status + t, SCAN_FLAG_INCLUSIVE, __fadd_rn(prefix, total));
        }
        if (lane == 0) tile_prefix = prefix;
    }
    __syncthreads();
    const float before_warp = (warp > 0) ? warp_totals[warp - 1] : 0.0f;
    const float offset = __fadd_rn(tile_prefix, __fadd_rn(before_warp, excl));

    // 5. Back through shared memory (each thread rewrites only what it read), then coalesced stores.
#pragma unroll
    for (int q = 0; q < ITEMS / 4; ++q) {
        float4* p = reinterpret_cast<float4*>(&tile[SCAN_PAD(tid * ITEMS + 4 * q)]);
        const float4 v = *p;
        *p = make_float4(__fadd_rn(offset, v.x), __fadd_rn(offset, v.y), __fadd_rn(offset, v.z),
                         __fadd_rn(offset, v.w));
    }
    __syncthreads();
    if (full && aligned) {
        float4* out4 = reinterpret_cast<float4*>(out + base);
#pragma unroll
        for (int j = 0; j < ITEMS / 4; ++j) {
            const int c = j * SCAN_BLOCK + tid;
            out4[c] = *reinterpret_cast<const float4*>(&tile[SCAN_PAD(4 * c)]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < ITEMS; ++j) {
            const int e = j * SCAN_BLOCK + tid;
            if (base + e < n) out[base + e] = tile[SCAN_PAD(e)];
        }
    }
    }
}

extern "C" __global__ void __launch_bounds__(SCAN_BLOCK, SCAN_MIN_BLOCKS)
scan_lookback(const float* x, float* out, int64_t n, unsigned long long* scratch) {
    scan_tiles<SCAN_LOOKBACK>(x, out, n, scratch);
}

PB_DEFINE_ERROR_HELPERS

// Number of tiles (blocks) for n elements.
extern "C" int64_t scan_num_tiles(int64_t n) {
    return n <= 0 ? 0 : (n + SCAN_TILE - 1) / SCAN_TILE;
}

// Scratch launch_scan needs, in floats: the tile counter and one status word per tile, 8 bytes each.
extern "C" int64_t scan_scratch_floats(int64_t n) {
    return 2 * (scan_num_tiles(n) + 1);
}

// scratch: at least scan_scratch_floats(n) floats, 8-byte aligned; cleared here, then used.
extern "C" int launch_scan(const float* x /*[n]*/, float* out /*[n]*/, int64_t n,
                           float* scratch /*[2 * (1 + (n + 8191) / 8192)]*/, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t tiles = scan_num_tiles(n);
    if (tiles == 0) return static_cast<int>(cudaSuccess);
    if (tiles > 0x7fffffff || (reinterpret_cast<uintptr_t>(scratch) & 7) != 0)
        return static_cast<int>(cudaErrorInvalidValue);
    cudaStream_t s = PB_STREAM(stream);
    const size_t bytes = static_cast<size_t>(scan_scratch_floats(n)) * sizeof(float);
    cudaError_t err = cudaMemsetAsync(scratch, 0, bytes, s);
    if (err != cudaSuccess) return static_cast<int>(err);
    scan_lookback<<<static_cast<unsigned int>(tiles), SCAN_BLOCK, 0, s>>>(
        x, out, n, reinterpret_cast<unsigned long long*>(scratch));
    return static_cast<int>(cudaGetLastError());
}
