// Deterministic f32 sum without float atomics, in one launch (sum_single) or two:
//
//   sum_partial  a fixed grid of P blocks (P depends on n only, never on the device or timing);
//                global thread t (of T = P*B) adds the 4-element chunks t, t + T, t + 2T, ... into
//                four lane accumulators (16-byte loads when x is aligned: the layout and the order
//                are the same either way), folds them, the block combines its threads with a fixed
//                shuffle tree, writes partials[b];
//   sum_final    one block adds partials[0..P) the same way and writes out[0].
//   sum_single   both in one launch: each block does sum_partial's work, then takes a ticket from a
//                counter; the block holding the last ticket does sum_final's work (same threads, same
//                order: the same bits as the two launches) and sets the counter back to 0. Saves the
//                second launch and its gap (~7 us of fixed cost at 2^24 elements in run 3).
//
// Same input and same n => same additions in the same order => the same bits, run after run.
// Accuracy: every element goes through at most n-1 roundings, so |err| <= (n-1) * u * sum|x|
// (u = 2^-24), the classical bound for any summation order.
// Both kernels need blockDim.x to be a multiple of 32 (full warps for the shuffles), at most 1024.
#include "common.cuh"

// Number of per-block partial sums the launcher uses for n elements (and so the scratch size).
#define SUM_BLOCK 256
#define SUM_MAX_PARTIALS 1024
// Chunks of 4 floats each thread loads before adding them (16 * SUM_UNROLL bytes in flight).
#define SUM_UNROLL 4

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

// Elements 4c .. 4c+3 ("chunk" c) as a float4, zeros past n: one 16-byte load when x is aligned and
// the chunk is whole, else four scalar loads. Either way the same values arrive in the same lanes,
// so the order of the additions (and the result) does not depend on x's alignment.
__device__ __forceinline__ float4 load_chunk(const float* __restrict__ x, int64_t c, int64_t n,
                                             bool aligned) {
    const int64_t i = 4 * c;
    if (aligned && i + 3 < n) return __ldg(reinterpret_cast<const float4*>(x) + c);
    return make_float4(i < n ? x[i] : 0.0f, i + 1 < n ? x[i + 1] : 0.0f, i + 2 < n ? x[i + 2] : 0.0f,
                       i + 3 < n ? x[i + 3] : 0.0f);
}

// Thread t of the grid (T threads) adds chunks t, t + T, t + 2T, ... into four lane accumulators,
// SUM_UNROLL chunks loaded before the first addition (bytes in flight), then folds the lanes
// ((x + y) + (z + w)) and the block tree. Adding a zero past n changes nothing (x + 0 == x).
__device__ __forceinline__ float block_partial(const float* __restrict__ x, int64_t n) {
    const bool aligned = (reinterpret_cast<uintptr_t>(x) & 15) == 0;
    const int64_t chunks = (n + 3) / 4;
    const int64_t threads = pb_grid_stride();
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t c0 = pb_global_index(); c0 < chunks; c0 += SUM_UNROLL * threads) {
        float4 v[SUM_UNROLL];
#pragma unroll
        for (int u = 0; u < SUM_UNROLL; ++u) {
            const int64_t c = c0 + u * threads;
            v[u] = c < chunks ? load_chunk(x, c, n, aligned) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < SUM_UNROLL; ++u) {
            acc.x = __fadd_rn(acc.x, v[u].x);
            acc.y = __fadd_rn(acc.y, v[u].y);
            acc.z = __fadd_rn(acc.z, v[u].z);
            acc.w = __fadd_rn(acc.w, v[u].w);
        }
    }
    float t = __fadd_rn(__fadd_rn(acc.x, acc.y), __fadd_rn(acc.z, acc.w));
    return block_sum(t);
}

extern "C" __global__ void sum_partial(const float* __restrict__ x, float* __restrict__ partials,
                                       int64_t n) {
    const float t = block_partial(x, n);
    if (threadIdx.x == 0) partials[blockIdx.x] = t;
}

// partials[0..num_partials) added by one block: thread i takes i, i + B, ... in order, then the
// block tree. `cg` loads through L2 only (sum_single reads partials other blocks just wrote).
__device__ __forceinline__ float sum_of_partials(const float* partials, int64_t num_partials) {
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < num_partials; i += blockDim.x) acc = __fadd_rn(acc, __ldcg(partials + i));
    return block_sum(acc);
}

// Launch with exactly one block. num_partials == 0 writes 0 (the sum of nothing).
extern "C" __global__ void sum_final(const float* __restrict__ partials, float* __restrict__ out,
                                     int64_t num_partials) {
    const float acc = sum_of_partials(partials, num_partials);
    if (threadIdx.x == 0) out[0] = acc;
}

// One launch of sum_num_partials(n) >= 1 blocks of SUM_BLOCK. scratch: word 0 is the ticket counter
// (at a fixed place, so a scratch serves any n), which must be 0 before the launch and is 0 again
// after it (zero it once when allocating scratch; launches sharing a scratch must be stream-ordered);
// the partials follow it.
extern "C" __global__ void sum_single(const float* __restrict__ x, float* __restrict__ out, int64_t n,
                                      float* scratch) {
    __shared__ bool last;
    unsigned* counter = reinterpret_cast<unsigned*>(scratch);
    float* partials = scratch + 1;
    const float t = block_partial(x, n);
    if (threadIdx.x == 0) {
        __stcg(partials + blockIdx.x, t);
        __threadfence();  // the partial is visible before the ticket is taken
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();  // every other block's partial (fenced before its ticket) is visible from here
    const float acc = sum_of_partials(partials, gridDim.x);
    if (threadIdx.x == 0) {
        out[0] = acc;
        *counter = 0u;  // ready for the next launch on this scratch
    }
}

PB_DEFINE_ERROR_HELPERS

// Partial sums used for n elements: one per block of SUM_BLOCK, at most SUM_MAX_PARTIALS.
extern "C" int64_t sum_num_partials(int64_t n) {
    if (n <= 0) return 0;
    int64_t p = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    return p < SUM_MAX_PARTIALS ? p : SUM_MAX_PARTIALS;
}

// Scratch launch_sum needs, in floats: the ticket counter and the partials.
extern "C" int64_t sum_scratch_floats(int64_t n) {
    return sum_num_partials(n) + 1;
}

// scratch: at least sum_scratch_floats(n) floats (SUM_MAX_PARTIALS + 1 always suffices), ZEROED
// before its first use; every launch leaves it usable for the next (sum_single resets its counter),
// as long as launches sharing it are ordered (one stream). One launch (sum_single); n == 0 writes 0.
extern "C" int launch_sum(const float* x /*[n]*/, float* out /*[1]*/, int64_t n,
                          float* scratch /*[min((n + 255) / 256, 1024) + 1]*/, void* stream) {
    if (n < 0) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t p = sum_num_partials(n);
    if (p > 0) {
        sum_single<<<static_cast<unsigned int>(p), SUM_BLOCK, 0, PB_STREAM(stream)>>>(x, out, n, scratch);
    } else {
        sum_final<<<1, SUM_BLOCK, 0, PB_STREAM(stream)>>>(scratch, out, 0);
    }
    return static_cast<int>(cudaGetLastError());
}
