// Histogram of int32 values into nbins int32 counters; values outside [0, nbins) are ignored.
//
// histogram         each block counts into a private copy of the bins in (dynamic) shared memory
//                   with shared-memory atomics, then adds its non-zero counts to `bins` with one
//                   global atomic per bin. Needs nbins * 4 bytes of dynamic shared memory.
// histogram_global  the fallback when the bins do not fit in shared memory: global atomics.
//
// Both ADD to `bins` (the caller zeroes it; launch_histogram does). Integer atomics make the result
// exact and independent of scheduling. Counts are int32: at most 2^31 - 1 per bin.
#include "common.cuh"

#define HIST_BLOCK 256

extern "C" __global__ void histogram(const int32_t* __restrict__ x, int32_t* __restrict__ bins,
                                     int64_t n, int32_t nbins) {
    extern __shared__ int32_t local_bins[];
    for (int32_t b = threadIdx.x; b < nbins; b += blockDim.x) local_bins[b] = 0;
    __syncthreads();

    const int64_t stride = pb_grid_stride();
    for (int64_t i = pb_global_index(); i < n; i += stride) {
        const int32_t v = x[i];
        if (v >= 0 && v < nbins) atomicAdd(&local_bins[v], 1);
    }
    __syncthreads();

    for (int32_t b = threadIdx.x; b < nbins; b += blockDim.x) {
        const int32_t count = local_bins[b];
        if (count != 0) atomicAdd(&bins[b], count);
    }
}

extern "C" __global__ void histogram_global(const int32_t* __restrict__ x, int32_t* __restrict__ bins,
                                            int64_t n, int32_t nbins) {
    const int64_t stride = pb_grid_stride();
    for (int64_t i = pb_global_index(); i < n; i += stride) {
        const int32_t v = x[i];
        if (v >= 0 && v < nbins) atomicAdd(&bins[v], 1);
    }
}

PB_DEFINE_ERROR_HELPERS

// Zeroes bins, then counts. Uses shared memory up to the device's opt-in limit per block (227 KiB,
// about 58,000 bins, on an H100), global atomics beyond.
extern "C" int launch_histogram(const int32_t* x /*[n]*/, int32_t* bins /*[nbins]*/, int64_t n, int32_t nbins,
                                void* stream) {
    if (n < 0 || nbins < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (nbins == 0) return static_cast<int>(cudaSuccess);
    cudaStream_t s = PB_STREAM(stream);
    cudaError_t err = cudaMemsetAsync(bins, 0, static_cast<size_t>(nbins) * sizeof(int32_t), s);
    if (err != cudaSuccess) return static_cast<int>(err);
    if (n == 0) return static_cast<int>(cudaSuccess);

    int device = 0;
    int sms = 0;
    int smem_default = 0;
    int smem_optin = 0;
    if ((err = cudaGetDevice(&device)) != cudaSuccess) return static_cast<int>(err);
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return static_cast<int>(err);
    if ((err = cudaDeviceGetAttribute(&smem_default, cudaDevAttrMaxSharedMemoryPerBlock, device)) !=
        cudaSuccess)
        return static_cast<int>(err);
    if ((err = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device)) !=
        cudaSuccess)
        return static_cast<int>(err);

    // Privatised bins are merged once per block: a few blocks per SM keep that merge cheap.
    int64_t blocks = (n + HIST_BLOCK - 1) / HIST_BLOCK;
    const int64_t max_blocks = static_cast<int64_t>(sms > 0 ? sms : 1) * 4;
    if (blocks > max_blocks) blocks = max_blocks;

    const size_t smem = static_cast<size_t>(nbins) * sizeof(int32_t);
    if (smem <= static_cast<size_t>(smem_optin)) {
        if (smem > static_cast<size_t>(smem_default)) {
            err = cudaFuncSetAttribute(histogram, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
            if (err != cudaSuccess) return static_cast<int>(err);
        }
        histogram<<<static_cast<unsigned int>(blocks), HIST_BLOCK, smem, s>>>(x, bins, n, nbins);
    } else {
        histogram_global<<<pb_grid_stride_blocks(n, HIST_BLOCK), HIST_BLOCK, 0, s>>>(x, bins, n, nbins);
    }
    return static_cast<int>(cudaGetLastError());
}
