// Variants of kernels_cu/scan.cu for benchmarks/scan_variants.py: the register cap (resident blocks per SM).
#include "../kernels_cu/scan.cu"

#define SCAN_VARIANT(name, min_blocks)                                                              \
    extern "C" __global__ void __launch_bounds__(SCAN_BLOCK, min_blocks)                            \
    name(const float* x, float* out, int64_t n, unsigned long long* scratch) {                      \
        scan_tiles(x, out, n, scratch);                                                             \
    }

SCAN_VARIANT(scan_b4, 4)
SCAN_VARIANT(scan_b6, 6)
SCAN_VARIANT(scan_b8, 8)
