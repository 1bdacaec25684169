// Shared by benchmarks/scan_vs_cub.cu and sum_vs_cub.cu: error check and event timing.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { printf("%s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

// Best of 27 event-timed runs of f() on the legacy stream, after 3 warm-ups (ms).
template <class F> static float best_ms(F f) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    float best = 1e30f;
    for (int rep = 0; rep < 30; rep++) {
        CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b));
        if (rep >= 3 && ms < best) best = ms;
    }
    CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
    return best;
}
