"""The floor rows of ``pybridge bench``: the same calls from a C loop, compiled with ``cc`` at run time.

One small C program (no CUDA headers or libraries needed at build time: everything is looked up
with ``dlopen``/``dlsym``) with four modes, each printing one line ``ns_per_call <median> <min>``
(median and min over batches of N calls):

* ``futhark-scalar LIB N``: ``futhark_entry_trivial`` + ``futhark_context_sync`` (what a scalar
  call through pybridge does);
* ``futhark-array LIB ENTRY N LEN``: a one-argument f32 array entry (``chain30``) on a resident
  array + free of the result + sync;
* ``cuda-kernel CUBIN KERNEL N LEN``: ``cuLaunchKernel`` of a saxpy-shaped kernel on the legacy
  stream, one ``cuCtxSynchronize`` per batch; then ``graph`` rows: the same N launches captured in
  a CUDA graph and replayed (time per kernel);
* ``cuda-launcher LIB SYMBOL N LEN``: the cudart host launcher ``launch_saxpy`` in a loop.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..executables import child_env, configured, find
from ..paths import cache_dir
from ..errors import PybridgeError

C_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static void* need(void* lib, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) { fprintf(stderr, "missing symbol %s\n", name); exit(2); }
    return p;
}
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }
#define BATCHES 7
static void report(const char* what, double* s) {
    qsort(s, BATCHES, sizeof(double), cmp);
    printf("%s %.1f %.1f\n", what, s[BATCHES / 2], s[0]);
}
#define CHECK(call) do { int rc_ = (call); if (rc_) { fprintf(stderr, "%s failed: %d\n", #call, rc_); exit(3); } } while (0)

typedef void* (*cfg_new_t)(void);
typedef void* (*ctx_new_t)(void*);
typedef int (*ctx_int_t)(void*);
typedef int (*trivial_t)(void*, int32_t*, int32_t);
typedef void* (*new_f32_t)(void*, const float*, int64_t);
typedef int (*free_arr_t)(void*, void*);
typedef int (*entry1_t)(void*, void**, const void*);

static int futhark(int argc, char** argv, int array) {
    void* lib = dlopen(argv[2], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    void* cfg = ((cfg_new_t)need(lib, "futhark_context_config_new"))();
    void* ctx = ((ctx_new_t)need(lib, "futhark_context_new"))(cfg);
    ctx_int_t sync = (ctx_int_t)need(lib, "futhark_context_sync");
    double s[BATCHES];
    if (!array) {
        long n = atol(argv[3]);
        trivial_t f = (trivial_t)need(lib, "futhark_entry_trivial");
        int32_t out = 0;
        for (long i = 0; i < n / 10 + 10; i++) { CHECK(f(ctx, &out, 1)); CHECK(sync(ctx)); }
        for (int b = 0; b < BATCHES; b++) {
            double t0 = now_ns();
            for (long i = 0; i < n; i++) { CHECK(f(ctx, &out, (int32_t)i)); CHECK(sync(ctx)); }
            s[b] = (now_ns() - t0) / n;
        }
        report("ns_per_call", s);
    } else {
        char name[256];
        snprintf(name, sizeof name, "futhark_entry_%s", argv[3]);
        entry1_t f = (entry1_t)need(lib, name);
        long n = atol(argv[4]), len = atol(argv[5]);
        float* host = malloc(sizeof(float) * (len ? len : 1));
        for (long i = 0; i < len; i++) host[i] = (float)(i % 1000) * 0.001f;
        void* in = ((new_f32_t)need(lib, "futhark_new_f32_1d"))(ctx, host, len);
        free_arr_t fr = (free_arr_t)need(lib, "futhark_free_f32_1d");
        CHECK(sync(ctx));
        for (long i = 0; i < n / 10 + 3; i++) { void* out; CHECK(f(ctx, &out, in)); CHECK(fr(ctx, out)); CHECK(sync(ctx)); }
        for (int b = 0; b < BATCHES; b++) {
            double t0 = now_ns();
            for (long i = 0; i < n; i++) { void* out; CHECK(f(ctx, &out, in)); CHECK(fr(ctx, out)); CHECK(sync(ctx)); }
            s[b] = (now_ns() - t0) / n;
        }
        report("ns_per_call", s);
        fr(ctx, in);
        free(host);
    }
    ((ctx_int_t)need(lib, "futhark_context_free"))(ctx);
    ((void (*)(void*))need(lib, "futhark_context_config_free"))(cfg);
    return 0;
}

typedef int (*cu_v_t)();
static void* cuda_setup(void) {
    void* cu = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cu) { fprintf(stderr, "%s\n", dlerror()); exit(2); }
    CHECK(((int (*)(unsigned))need(cu, "cuInit"))(0));
    int dev = 0; void* ctx = 0;
    CHECK(((int (*)(int*, int))need(cu, "cuDeviceGet"))(&dev, 0));
    CHECK(((int (*)(void**, int))need(cu, "cuDevicePrimaryCtxRetain"))(&ctx, dev));
    CHECK(((int (*)(void*))need(cu, "cuCtxSetCurrent"))(ctx));
    return cu;
}

static int cuda_kernel(int argc, char** argv) {
    void* cu = cuda_setup();
    long n = atol(argv[4]); int64_t len = atol(argv[5]);
    void* mod = 0; void* fn = 0;
    CHECK(((int (*)(void**, const char*))need(cu, "cuModuleLoad"))(&mod, argv[2]));
    CHECK(((int (*)(void**, void*, const char*))need(cu, "cuModuleGetFunction"))(&fn, mod, argv[3]));
    int (*alloc)(uint64_t*, size_t) = (int (*)(uint64_t*, size_t))need(cu, "cuMemAlloc_v2");
    uint64_t x, y, out;
    CHECK(alloc(&x, len * 4)); CHECK(alloc(&y, len * 4)); CHECK(alloc(&out, len * 4));
    CHECK(((int (*)(uint64_t, unsigned char, size_t))need(cu, "cuMemsetD8_v2"))(x, 0x3f, len * 4));
    CHECK(((int (*)(uint64_t, unsigned char, size_t))need(cu, "cuMemsetD8_v2"))(y, 0x3f, len * 4));
    float a = 2.0f;
    void* params[] = {&a, &x, &y, &out, &len};
    unsigned grid = (unsigned)((len + 255) / 256); if (grid < 1) grid = 1; if (grid > 4096) grid = 4096;
    typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
    launch_t launch = (launch_t)need(cu, "cuLaunchKernel");
    int (*ctxsync)(void) = (int (*)(void))need(cu, "cuCtxSynchronize");
    double s[BATCHES];
    for (long i = 0; i < n / 10 + 10; i++) CHECK(launch(fn, grid, 1, 1, 256, 1, 1, 0, 0, params, 0));
    CHECK(ctxsync());
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) CHECK(launch(fn, grid, 1, 1, 256, 1, 1, 0, 0, params, 0));
        CHECK(ctxsync());
        s[b] = (now_ns() - t0) / n;
    }
    report("ns_per_call", s);
    /* The same launches captured once in a graph, replayed: time per kernel. */
    void* stream = 0; void* graph = 0; void* exec = 0;
    CHECK(((int (*)(void**, unsigned))need(cu, "cuStreamCreate"))(&stream, 1));
    CHECK(((int (*)(void*, int))need(cu, "cuStreamBeginCapture_v2"))(stream, 2 /* relaxed */));
    for (long i = 0; i < n; i++) CHECK(launch(fn, grid, 1, 1, 256, 1, 1, 0, stream, params, 0));
    CHECK(((int (*)(void*, void**))need(cu, "cuStreamEndCapture"))(stream, &graph));
    CHECK(((int (*)(void**, void*, unsigned long long))need(cu, "cuGraphInstantiateWithFlags"))(&exec, graph, 0));
    int (*glaunch)(void*, void*) = (int (*)(void*, void*))need(cu, "cuGraphLaunch");
    int (*ssync)(void*) = (int (*)(void*))need(cu, "cuStreamSynchronize");
    CHECK(glaunch(exec, stream)); CHECK(ssync(stream));
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        CHECK(glaunch(exec, stream)); CHECK(ssync(stream));
        s[b] = (now_ns() - t0) / n;
    }
    report("graph_ns_per_kernel", s);
    return 0;
}

typedef int (*saxpy_launcher_t)(float, const float*, const float*, float*, int64_t, void*);
static int cuda_launcher(int argc, char** argv) {
    void* cu = cuda_setup();
    void* lib = dlopen(argv[2], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    saxpy_launcher_t f = (saxpy_launcher_t)need(lib, argv[3]);
    long n = atol(argv[4]); int64_t len = atol(argv[5]);
    int (*alloc)(uint64_t*, size_t) = (int (*)(uint64_t*, size_t))need(cu, "cuMemAlloc_v2");
    uint64_t x, y, out;
    CHECK(alloc(&x, len * 4)); CHECK(alloc(&y, len * 4)); CHECK(alloc(&out, len * 4));
    int (*ctxsync)(void) = (int (*)(void))need(cu, "cuCtxSynchronize");
    double s[BATCHES];
    for (long i = 0; i < n / 10 + 10; i++) CHECK(f(2.0f, (float*)x, (float*)y, (float*)out, len, 0));
    CHECK(ctxsync());
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) CHECK(f(2.0f, (float*)x, (float*)y, (float*)out, len, 0));
        CHECK(ctxsync());
        s[b] = (now_ns() - t0) / n;
    }
    report("ns_per_call", s);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 4) { fprintf(stderr, "usage: see pybridge/bench/cdriver.py\n"); return 1; }
    if (!strcmp(argv[1], "futhark-scalar")) return futhark(argc, argv, 0);
    if (!strcmp(argv[1], "futhark-array") && argc >= 6) return futhark(argc, argv, 1);
    if (!strcmp(argv[1], "cuda-kernel") && argc >= 6) return cuda_kernel(argc, argv);
    if (!strcmp(argv[1], "cuda-launcher") && argc >= 6) return cuda_launcher(argc, argv);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 1;
}
"""


class DriverUnavailable(PybridgeError, RuntimeError):
    """The C driver could not be built or run here (the message says why)."""


def driver_path() -> Path:
    """The compiled driver (built once per source version into the pybridge cache)."""
    cc = configured("CC", "cc") or find("gcc") or find("clang")  # PATH's absolute folders only
    if cc is None:
        raise DriverUnavailable("no C compiler (cc) to build the C loop")
    digest = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:12]
    exe = cache_dir("bench") / f"cdriver-{digest}"
    if not exe.exists():
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "cdriver.c"
            src.write_text(C_SOURCE)
            tmp_exe = Path(tmp) / "cdriver"
            proc = subprocess.run([cc, "-O2", "-o", str(tmp_exe), str(src), "-ldl"], capture_output=True, text=True,
                                  env=child_env())
            if proc.returncode != 0:
                raise DriverUnavailable(f"building the C loop failed: {proc.stderr.strip()[-300:]}")
            shutil.move(str(tmp_exe), exe)
    return exe


def run_driver(*args: str | int, timeout: float = 120) -> dict[str, tuple[float, float]]:
    """Run one mode; {metric: (median_us, min_us)} from its ``name median_ns min_ns`` lines."""
    exe = driver_path()
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise DriverUnavailable(f"C loop {args[0]} failed (rc {proc.returncode}): {proc.stderr.strip()[-300:]}")
    out: dict[str, tuple[float, float]] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[parts[0]] = (float(parts[1]) / 1e3, float(parts[2]) / 1e3)
    return out
