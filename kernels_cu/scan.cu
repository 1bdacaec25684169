// Inclusive prefix sum of f32 (out[i] = x[0] + ... + x[i]) for any n, in ONE pass over the data
// (one read and one write of every element): the single-pass scan with decoupled look-back
// (Merrill & Garland, "Single-pass Parallel Prefix Scan with Decoupled Look-back", 2016).
//
//   * Each block takes the next tile of SCAN_TILE elements from a counter (dynamic tile ids, so a
//     block only ever waits for tiles that blocks already running hold: no deadlock whatever the
//     order the hardware starts blocks in), and keeps taking tiles until none is left; the copy
//     of its next tile (cp.async, 16-byte when x and out are aligned) runs while it works on the
//     current one.
//   * It scans its tile in shared memory and
//     registers (each thread SCAN_ITEMS consecutive elements, then warp shuffles), and publishes
//     the tile's total as an AGGREGATE in its status word.
//   * Warp 0 looks back over the predecessors' status words, 32 at a time, adding aggregates until
//     it meets an INCLUSIVE prefix; the tile then publishes its own inclusive prefix and writes its
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
// Launch: blockDim.x == SCAN_BLOCK, any gridDim.x (blocks are persistent: launch_scan uses
// min(tiles, SMs * SCAN_BLOCKS_PER_SM)).
#include "common.cuh"

#define SCAN_BLOCK 256
#define SCAN_ITEMS 16
#define SCAN_TILE (SCAN_BLOCK * SCAN_ITEMS)
// Persistent grid: at most this many blocks per multiprocessor (two 18 KB tile buffers each).
#define SCAN_BLOCKS_PER_SM 4
// 4 padding words after every 32: the float4 reads of thread t (words 16t .. 16t+15) and the
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

// Warp 0 only (all 32 lanes): the sum of all tiles before `tile`. Lane l looks at tile - 1 - l - 32w
// in window w; the window's values are added lane 0 first (the nearest tile), so within a window the
// order is fixed; how many windows and where the inclusive prefix is found depend on timing.
__device__ float look_back(const unsigned long long* status, int64_t tile) {
    const int lane = threadIdx.x & 31;
    float prefix = 0.0f;
    int64_t next = tile - 1;  // nearest predecessor not yet included
    while (true) {
        const int64_t t = next - lane;
        unsigned long long word = 0;
        unsigned long long flag = SCAN_FLAG_INCLUSIVE;  // lanes before tile 0 count as "found"
        if (t >= 0) {
            do {
                word = peek(status + t);
                flag = word >> 32;
            } while (flag == 0);
        }
        // The nearest lane holding an inclusive prefix ends this look-back; lanes past it do not count.
        const unsigned inclusive = __ballot_sync(PB_FULL_MASK, flag == SCAN_FLAG_INCLUSIVE);
        const int stop = inclusive ? __ffs(inclusive) - 1 : 31;
        float v = (lane <= stop && t >= 0) ? __uint_as_float(static_cast<unsigned>(word)) : 0.0f;
        // Fixed-shape sum of the window, lanes 0..stop in ascending order of distance.
        v = pb_warp_sum(v);
        v = __shfl_sync(PB_FULL_MASK, v, 0);
        prefix = __fadd_rn(prefix, v);
        if (inclusive) return prefix;
        next -= 32;
    }
}

// Asynchronous global -> shared copies (cp.async): `bytes` of the source copied, the rest of the
// destination zero-filled (bytes == 0: nothing is read).
__device__ __forceinline__ void scan_cp_async16(float* dst, const float* src, int bytes) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void scan_cp_async4(float* dst, const float* src, int bytes) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}

// Queues the copy of tile t (zeros past n) into `tile` (padded layout), as one cp.async group.
__device__ __forceinline__ void load_tile_async(float* tile, const float* x, int64_t t, int64_t n, bool aligned) {
    const int64_t base = t * SCAN_TILE;
    if (aligned && base + SCAN_TILE <= n) {
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS / 4; ++j) {
            const int c = j * SCAN_BLOCK + threadIdx.x;  // float4 chunk of the tile
            scan_cp_async16(&tile[SCAN_PAD(4 * c)], x + base + 4 * c, 16);
        }
    } else {
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS; ++j) {
            const int e = j * SCAN_BLOCK + threadIdx.x;
            const bool in = base + e < n;
            scan_cp_async4(&tile[SCAN_PAD(e)], in ? x + base + e : x, in ? 4 : 0);
        }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Persistent blocks: each takes tiles from the counter until none is left. While it scans tile t,
// the copy of its next tile is already in flight (two shared-memory buffers), so loads overlap the
// look-back, the scan and the stores. Progress: the lowest unfinished tile is held by a block
// that is scanning it (a block holds a "next" tile only while scanning a lower one), and its
// predecessors are all done, so it finishes; any grid size works.
extern "C" __global__ void __launch_bounds__(SCAN_BLOCK, SCAN_BLOCKS_PER_SM)
scan_lookback(const float* x, float* out, int64_t n, unsigned long long* scratch) {
    __shared__ __align__(16) float tiles[2][SCAN_SHARED_WORDS];
    __shared__ float warp_totals[SCAN_BLOCK / 32];
    __shared__ float tile_prefix;
    __shared__ int64_t tile_ids[2];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    unsigned long long* status = scratch + 1;
    const int64_t num_tiles = (n + SCAN_TILE - 1) / SCAN_TILE;
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;

    if (tid == 0) tile_ids[0] = static_cast<int64_t>(atomicAdd(scratch, 1ull));
    __syncthreads();
    int64_t t = tile_ids[0];
    if (t < num_tiles) load_tile_async(tiles[0], x, t, n, aligned);
    int cur = 0;
    while (t < num_tiles) {
        float* tile = tiles[cur];
        // Everyone is done with the other buffer (the previous tile's stores) after this barrier.
        if (tid == 0) tile_ids[cur ^ 1] = static_cast<int64_t>(atomicAdd(scratch, 1ull));
        __syncthreads();
        const int64_t next = tile_ids[cur ^ 1];
        if (next < num_tiles) {
            load_tile_async(tiles[cur ^ 1], x, next, n, aligned);
            asm volatile("cp.async.wait_group 1;" ::: "memory");  // this tile's copies are done
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();  // ... everyone's

        // 1. Each thread scans its SCAN_ITEMS consecutive elements.
        float vals[SCAN_ITEMS];
#pragma unroll
        for (int q = 0; q < SCAN_ITEMS / 4; ++q) {
            const float4 v = *reinterpret_cast<const float4*>(&tile[SCAN_PAD(tid * SCAN_ITEMS + 4 * q)]);
            vals[4 * q] = v.x;
            vals[4 * q + 1] = v.y;
            vals[4 * q + 2] = v.z;
            vals[4 * q + 3] = v.w;
        }
#pragma unroll
        for (int j = 1; j < SCAN_ITEMS; ++j) vals[j] = __fadd_rn(vals[j - 1], vals[j]);

        // 2. Exclusive scan of the per-thread totals across the block; the tile total.
        const float incl = pb_warp_inclusive_scan(vals[SCAN_ITEMS - 1]);
        float excl = __shfl_up_sync(PB_FULL_MASK, incl, 1);
        if (lane == 0) excl = 0.0f;
        if (lane == 31) warp_totals[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            float w = (lane < SCAN_BLOCK / 32) ? warp_totals[lane] : 0.0f;
            w = pb_warp_inclusive_scan(w);
            if (lane < SCAN_BLOCK / 32) warp_totals[lane] = w;
            const float total = __shfl_sync(PB_FULL_MASK, w, SCAN_BLOCK / 32 - 1);
            // 3. Publish, look back, publish the inclusive prefix.
            float prefix = 0.0f;
            if (t == 0) {
                if (lane == 0) publish(status, SCAN_FLAG_INCLUSIVE, total);
            } else {
                if (lane == 0) publish(status + t, SCAN_FLAG_AGGREGATE, total);
                prefix = look_back(status, t);
                if (lane == 0) publish(status + t, SCAN_FLAG_INCLUSIVE, __fadd_rn(prefix, total));
            }
            if (lane == 0) tile_prefix = prefix;
        }
        __syncthreads();
        const float before_warp = (warp > 0) ? warp_totals[warp - 1] : 0.0f;
        const float offset = __fadd_rn(tile_prefix, __fadd_rn(before_warp, excl));

        // 4. Back through shared memory (each thread rewrites only what it read), then coalesced stores.
#pragma unroll
        for (int q = 0; q < SCAN_ITEMS / 4; ++q) {
            *reinterpret_cast<float4*>(&tile[SCAN_PAD(tid * SCAN_ITEMS + 4 * q)]) =
                make_float4(__fadd_rn(offset, vals[4 * q]), __fadd_rn(offset, vals[4 * q + 1]),
                            __fadd_rn(offset, vals[4 * q + 2]), __fadd_rn(offset, vals[4 * q + 3]));
        }
        __syncthreads();
        const int64_t base = t * SCAN_TILE;
        if (aligned && base + SCAN_TILE <= n) {
            float4* out4 = reinterpret_cast<float4*>(out + base);
#pragma unroll
            for (int j = 0; j < SCAN_ITEMS / 4; ++j) {
                const int c = j * SCAN_BLOCK + tid;
                out4[c] = *reinterpret_cast<const float4*>(&tile[SCAN_PAD(4 * c)]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < SCAN_ITEMS; ++j) {
                const int e = j * SCAN_BLOCK + tid;
                if (base + e < n) out[base + e] = tile[SCAN_PAD(e)];
            }
        }
        t = next;
        cur ^= 1;
    }
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

// Blocks of the persistent grid: SCAN_BLOCKS_PER_SM per multiprocessor, at most one per tile.
static inline unsigned int scan_grid(int64_t tiles, int sms) {
    const int64_t cap = static_cast<int64_t>(sms > 0 ? sms : 1) * SCAN_BLOCKS_PER_SM;
    return static_cast<unsigned int>(tiles < cap ? tiles : cap);
}

// scratch: at least scan_scratch_floats(n) floats, 8-byte aligned; cleared here, then used.
extern "C" int launch_scan(const float* x, float* out, int64_t n, float* scratch, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t tiles = scan_num_tiles(n);
    if (tiles == 0) return static_cast<int>(cudaSuccess);
    if (tiles > 0x7fffffff || (reinterpret_cast<uintptr_t>(scratch) & 7) != 0)
        return static_cast<int>(cudaErrorInvalidValue);
    cudaStream_t s = PB_STREAM(stream);
    int device = 0;
    int sms = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return static_cast<int>(err);
    const size_t bytes = static_cast<size_t>(scan_scratch_floats(n)) * sizeof(float);
    if ((err = cudaMemsetAsync(scratch, 0, bytes, s)) != cudaSuccess) return static_cast<int>(err);
    scan_lookback<<<scan_grid(tiles, sms), SCAN_BLOCK, 0, s>>>(
        x, out, n, reinterpret_cast<unsigned long long*>(scratch));
    return static_cast<int>(cudaGetLastError());
}
