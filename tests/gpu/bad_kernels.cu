// Deliberately broken kernels for tests/gpu/test_cuda_interop.py (error handling). Each kills the
// CUDA context it runs in, so the tests run them in a subprocess. Compiled at test time with nvcc
// when it is there; bad_kernels.ptx (made from this file with
// `nvcc -ptx -arch=compute_90 -o tests/gpu/bad_kernels.ptx tests/gpu/bad_kernels.cu`) otherwise.
#include <cassert>
#include <stdint.h>

// Writes far past the end of `out` (1 TiB beyond it), into unmapped address space: the launch
// fails with cudaErrorIllegalAddress (700), a sticky error.
extern "C" __global__ void bad_write(float* out, int64_t n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        volatile float* p = out + n + (int64_t(1) << 38);
        *p = 1.0f;
    }
}

// A failed device-side assert: cudaErrorAssert (710), also sticky.
extern "C" __global__ void bad_assert(int32_t value) {
    assert(value == 12345);
}
