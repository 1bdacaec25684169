// Mandelbrot iteration counts: out[i*w + j] for pixel (i, j) of an h x w image (row-major), at
// c = (x0 + j*dx, y0 + i*dy). Starting from z = 0, each iteration first tests |z| > 2 (as
// zr^2 + zi^2 > 4) and stops if so, else sets z = z^2 + c; the count is the number of updates
// done, 0..max_iter.
//
// Every operation is rounded on its own (no FMA contraction), in this order, so NumPy float32
// code doing the same steps gets identical counts:
//   cr = x0 + f32(j)*dx;  ci = y0 + f32(i)*dy
//   zr2 = zr*zr;  zi2 = zi*zi;  stop if zr2 + zi2 > 4
//   zr, zi = (zr2 - zi2) + cr,  (2*zr)*zi + ci
// f32(j) is exact for j < 2^24.
// Launch: blockDim = (16, 16, 1), gridDim = (ceil(w / 16), ceil(h / 16), 1).
#include "common.cuh"

extern "C" __global__ void mandelbrot(int32_t* __restrict__ out, int32_t w, int32_t h, float x0,
                                      float y0, float dx, float dy, int32_t max_iter) {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
    if (i >= h || j >= w) return;
    const float cr = __fadd_rn(x0, __fmul_rn(static_cast<float>(j), dx));
    const float ci = __fadd_rn(y0, __fmul_rn(static_cast<float>(i), dy));
    float zr = 0.0f;
    float zi = 0.0f;
    int32_t it = 0;
    while (it < max_iter) {
        const float zr2 = __fmul_rn(zr, zr);
        const float zi2 = __fmul_rn(zi, zi);
        if (__fadd_rn(zr2, zi2) > 4.0f) break;
        const float new_zi = __fadd_rn(__fmul_rn(__fmul_rn(2.0f, zr), zi), ci);
        zr = __fadd_rn(__fsub_rn(zr2, zi2), cr);
        zi = new_zi;
        ++it;
    }
    out[i * w + j] = it;
}

PB_DEFINE_ERROR_HELPERS

extern "C" int launch_mandelbrot(int32_t* out /*[h*w]*/, int32_t w, int32_t h, float x0, float y0, float dx,
                                 float dy, int32_t max_iter, void* stream) {
    if (w < 0 || h < 0) return static_cast<int>(cudaErrorInvalidValue);
    if (w == 0 || h == 0) return static_cast<int>(cudaSuccess);
    const dim3 block(16, 16, 1);
    const dim3 grid(static_cast<unsigned int>((w + 15) / 16), static_cast<unsigned int>((h + 15) / 16), 1);
    if (grid.y > 65535) return static_cast<int>(cudaErrorInvalidConfiguration);  // h > 1,048,560
    mandelbrot<<<grid, block, 0, PB_STREAM(stream)>>>(out, w, h, x0, y0, dx, dy, max_iter);
    return static_cast<int>(cudaGetLastError());
}
