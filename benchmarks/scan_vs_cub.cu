// pybridge's scan (kernels_cu/scan.cu, through its host launcher) against CUB's
// cub::DeviceScan::InclusiveSum and a device-to-device copy of the same n floats, in one process
// and one run: issue 14/23's "≥ 90% of copy" target and the CUB figure it cites.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o scan_vs_cub benchmarks/scan_vs_cub.cu && ./scan_vs_cub
//
// Each time: the best of 27 event-timed runs after 3 warm-ups. Also checks pybridge's result
// against CUB's at every element (relative to the running sum of |x|, the scan's error bound).
#include "../kernels_cu/scan.cu"

#include <cub/cub.cuh>

#include <cmath>
#include <vector>

#include "vs_cub.cuh"

int main() {
    for (int p : {24, 26, 28}) {
        const int64_t n = int64_t(1) << p;
        std::vector<float> host(n);
        srand(p);
        for (int64_t i = 0; i < n; i++) host[i] = 2.0f * rand() / RAND_MAX - 1.0f;
        float *x, *y, *z, *scratch;
        CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&y, n * 4)); CK(cudaMalloc(&z, n * 4));
        CK(cudaMalloc(&scratch, scan_scratch_floats(n) * 4));
        CK(cudaMemcpy(x, host.data(), n * 4, cudaMemcpyHostToDevice));
        void* tmp = nullptr; size_t tmp_bytes = 0;
        CK(cub::DeviceScan::InclusiveSum(tmp, tmp_bytes, x, z, (int)n));
        CK(cudaMalloc(&tmp, tmp_bytes));
        const float copy = best_ms([&] { CK(cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice)); });
        const float cub = best_ms([&] { CK(cub::DeviceScan::InclusiveSum(tmp, tmp_bytes, x, z, (int)n)); });
        const float ours = best_ms([&] { if (launch_scan(x, y, n, scratch, nullptr)) exit(2); });
        std::vector<float> a(n), b(n);
        CK(cudaMemcpy(a.data(), y, n * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), z, n * 4, cudaMemcpyDeviceToHost));
        double abs_sum = 0, worst = 0;
        for (int64_t i = 0; i < n; i++) {
            abs_sum += std::fabs(host[i]);
            worst = std::fmax(worst, std::fabs((double)a[i] - (double)b[i]) / (abs_sum + 1e-30));
        }
        printf("n=2^%d  copy %.1f us | pybridge scan %.1f us = %.1f%% of copy | CUB InclusiveSum %.1f us = %.1f%% of copy"
               " | max |pybridge - CUB| / sum|x| = %.2e\n", p, copy * 1e3, ours * 1e3, 100.0 * copy / ours, cub * 1e3,
               100.0 * copy / cub, worst);
        CK(cudaFree(x)); CK(cudaFree(y)); CK(cudaFree(z)); CK(cudaFree(scratch)); CK(cudaFree(tmp));
    }
    return 0;
}
