// Variants of kernels_cu/scan.cu for benchmarks/scan_variants.py: look-back width (status words per
// lane per round trip, 32 x that many tiles) and register cap (resident blocks per SM).
#include "../kernels_cu/scan.cu"

#define SCAN_VARIANT(name, lookback, min_blocks)                                                    \
    extern "C" __global__ void __launch_bounds__(SCAN_BLOCK, min_blocks)                            \
    name(const float* x, float* out, int64_t n, unsigned long long* scratch) {                      \
        scan_tiles<lookback>(x, out, n, scratch);                                                   \
    }

SCAN_VARIANT(scan_l1_b8, 1, 8)
SCAN_VARIANT(scan_l4_b8, 4, 8)
SCAN_VARIANT(scan_l8_b8, 8, 8)
SCAN_VARIANT(scan_l8_b6, 8, 6)
SCAN_VARIANT(scan_l16_b5, 16, 5)
SCAN_VARIANT(scan_l16_b4, 16, 4)
