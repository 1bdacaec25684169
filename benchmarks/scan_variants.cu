// Variants of kernels_cu/scan.cu for benchmarks/scan_variants.py, named
// scan_l<look-back words per lane>_i<items per thread>_b<min blocks per SM>[_static][_sleep]:
// look-back width (32 x that many tiles per round trip), tile size, register cap (resident blocks),
// blockIdx.x as the tile id instead of the atomic counter, a 100 ns back-off between polls.
#include "../kernels_cu/scan.cu"

#define SCAN_VARIANT(name, lookback, items, min_blocks, static_ids, sleep_ns)                       \
    extern "C" __global__ void __launch_bounds__(SCAN_BLOCK, min_blocks)                            \
    name(const float* x, float* out, int64_t n, unsigned long long* scratch) {                      \
        scan_tiles<lookback, items, static_ids, sleep_ns>(x, out, n, scratch);                      \
    }

SCAN_VARIANT(scan_l1_i16_b8, 1, 16, 8, false, 0)
SCAN_VARIANT(scan_l4_i16_b8, 4, 16, 8, false, 0)
SCAN_VARIANT(scan_l1_i16_b8_static, 1, 16, 8, true, 0)
SCAN_VARIANT(scan_l1_i16_b8_sleep, 1, 16, 8, false, 100)
SCAN_VARIANT(scan_l1_i32_b6, 1, 32, 6, false, 0)
SCAN_VARIANT(scan_l1_i32_b5, 1, 32, 5, false, 0)
SCAN_VARIANT(scan_l1_i32_b6_static, 1, 32, 6, true, 0)
SCAN_VARIANT(scan_l1_i24_b5, 1, 24, 5, false, 0)
