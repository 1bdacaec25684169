// pybridge's sum (kernels_cu/reduce.cu, through its host launcher) against CUB's
// cub::DeviceReduce::Sum and a device-to-device copy, in one process and one run (issue 14/23's
// "≥ 90% of copy" target; bytes counted: the sum reads 4n, the copy moves 8n, as in
// `pybridge bench bandwidth`).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o sum_vs_cub benchmarks/sum_vs_cub.cu && ./sum_vs_cub
//
// Each time: the best of 27 event-timed runs after 3 warm-ups; the two sums are compared with a
// float64 sum on the host.
#include "../kernels_cu/reduce.cu"

#include <cub/cub.cuh>

#include <cmath>
#include <vector>

#include "vs_cub.cuh"

int main() {
    for (int p : {24, 26, 28}) {
        const int64_t n = int64_t(1) << p;
        std::vector<float> host(n);
        srand(p);
        double exact = 0;
        for (int64_t i = 0; i < n; i++) { host[i] = 2.0f * rand() / RAND_MAX - 1.0f; exact += host[i]; }
        float *x, *y, *out, *cub_out, *scratch;
        CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&y, n * 4)); CK(cudaMalloc(&out, 4)); CK(cudaMalloc(&cub_out, 4));
        CK(cudaMalloc(&scratch, sum_scratch_floats(n) * 4));
        CK(cudaMemcpy(x, host.data(), n * 4, cudaMemcpyHostToDevice));
        void* tmp = nullptr; size_t tmp_bytes = 0;
        CK(cub::DeviceReduce::Sum(tmp, tmp_bytes, x, cub_out, (int)n));
        CK(cudaMalloc(&tmp, tmp_bytes));
        const float copy = best_ms([&] { CK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); });
        const float cub = best_ms([&] { CK(cub::DeviceReduce::Sum(tmp, tmp_bytes, x, cub_out, (int)n)); });
        const float ours = best_ms([&] { if (launch_sum(x, out, n, scratch, nullptr)) exit(2); });
        float a, b;
        CK(cudaMemcpy(&a, out, 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&b, cub_out, 4, cudaMemcpyDeviceToHost));
        // % of copy as the bench counts it: GB/s of the sum (4n bytes) over GB/s of the copy (8n bytes)
        printf("n=2^%d  copy %.1f us | pybridge sum %.1f us = %.1f%% of copy | CUB DeviceReduce::Sum %.1f us = %.1f%% of copy"
               " | sums %.6g %.6g, float64 %.6g\n", p, copy * 1e3, ours * 1e3, 100.0 * (4.0 / ours) / (8.0 / copy),
               cub * 1e3, 100.0 * (4.0 / cub) / (8.0 / copy), a, b, exact);
        CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(out)); CK(cudaFree(cub_out)); CK(cudaFree(scratch)); CK(cudaFree(tmp));
    }
    return 0;
}
