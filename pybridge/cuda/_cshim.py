"""Small cffi API-mode extensions compiled once per machine and cached (``$PYBRIDGE_CACHE/ffi``).

The launch paths spend most of their host time in generic conversions (PyCUDA's boost.python
argument handling, libffi in cffi's ABI mode, ``ffi.cast`` of each pointer). A few lines of C
compiled in API mode replace them: cffi then converts plain ints and floats straight into C
arguments. When no C compiler (or no Python headers) is at hand, :func:`compile_shim` raises and
callers keep their portable path; :func:`why_unavailable` says why.

:func:`launch_shim` is the one every kernel launch uses: ``pb_launch(function, grid..., block...,
shared_mem, stream, packed_args, size)`` calls ``cuLaunchKernel`` with the argument buffer
(``CU_LAUNCH_PARAM_BUFFER_POINTER``, what PyCUDA passes too). The driver entry point is handed in
as an address at load time, so the extension needs no CUDA headers or libraries to build.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["compile_shim", "launch_shim", "why_unavailable"]

_lock = threading.Lock()
_failures: dict[str, str] = {}


def compile_shim(tag: str, cdef: str, source: str, **set_source_kwargs: Any) -> tuple[Any, Any]:
    """(ffi, lib) of an API-mode extension built from ``source`` (cached by content hash).

    Raises ImportError (with the reason) when it cannot be built here; the reason is remembered,
    so a failing build is tried once per process.
    """
    import cffi

    from ..futhark.binding import _import_from
    from ..ownership import temporary_folder
    from ..paths import cache_dir

    key = f"{tag}\0{cdef}\0{source}\0{sorted(set_source_kwargs.items())}\0{cffi.__version__}\0{sys.version}"
    name = f"_pybridge_shim_{tag}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    with _lock:
        if name in _failures:
            raise ImportError(_failures[name])
        module = sys.modules.get(name)
        if module is None:
            out = cache_dir("ffi")
            found = sorted(out.glob(f"{name}.*.so")) + sorted(out.glob(f"{name}.so"))
            try:
                if not found:
                    builder = cffi.FFI()
                    builder.cdef(cdef)
                    builder.set_source(name, source, **set_source_kwargs)
                    # Built in a private folder of pybridge's, then renamed into place: another
                    # process building the same shim at the same time never sees a half-written file.
                    with temporary_folder(out, name) as tmp, \
                            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        built = Path(builder.compile(tmpdir=str(tmp), verbose=False))
                        final = out / built.name
                        os.replace(built, final)
                    found = [final]
                module = _import_from(found[0], name)
            except Exception as e:  # noqa: BLE001 - no compiler, no headers, link error: all mean "not here"
                _failures[name] = f"cannot build the C shim {tag!r}: {type(e).__name__}: {e}"
                raise ImportError(_failures[name]) from e
    return module.ffi, module.lib


def why_unavailable() -> dict[str, str]:
    """Shims that failed to build in this process, with the reason."""
    return dict(_failures)


_LAUNCH_CDEF = """
int pb_set_launch_fn(uintptr_t fn);
uintptr_t pb_get_launch_fn(void);
int pb_launch(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_mem,
              uintptr_t stream, const char* args, size_t size);
int pb_launch_cfg(uintptr_t f, const char* config, uintptr_t stream, const char* args, size_t size);
"""

_LAUNCH_SOURCE = r"""
#include <stddef.h>
#include <string.h>
#include <stdint.h>
/* cuLaunchKernel's prototype with opaque handles: CUfunction and CUstream are pointers. */
typedef int (*pb_launch_kernel_t)(void*, unsigned int, unsigned int, unsigned int, unsigned int,
                                  unsigned int, unsigned int, unsigned int, void*, void**, void**);
static pb_launch_kernel_t pb_cu_launch_kernel = 0;

int pb_set_launch_fn(uintptr_t fn) { pb_cu_launch_kernel = (pb_launch_kernel_t)fn; return 0; }
uintptr_t pb_get_launch_fn(void) { return (uintptr_t)pb_cu_launch_kernel; }

int pb_launch(uintptr_t f, unsigned int gx, unsigned int gy, unsigned int gz,
              unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_mem,
              uintptr_t stream, const char* args, size_t size) {
    if (!pb_cu_launch_kernel) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    size_t sz = size;
    /* CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END; the
       driver copies the buffer during the call, so a stack array is enough. */
    void* extra[5] = {(void*)1, (void*)args, (void*)2, (void*)&sz, (void*)0};
    return pb_cu_launch_kernel((void*)f, gx, gy, gz, bx, by, bz, shared_mem, (void*)stream, 0, extra);
}

/* The same with grid, block and shared memory as 7 native unsigned ints in one buffer (packed once
   per launch configuration): five arguments for cffi to convert instead of eleven. */
int pb_launch_cfg(uintptr_t f, const char* config, uintptr_t stream, const char* args, size_t size) {
    unsigned int c[7];
    memcpy(c, config, sizeof c);
    return pb_launch(f, c[0], c[1], c[2], c[3], c[4], c[5], c[6], stream, args, size);
}
"""


def launch_shim(launch_fn_address: int | None = None) -> Any:
    """The compiled ``lib`` with ``pb_launch``, bound to ``cuLaunchKernel`` (the driver's, or the
    function at ``launch_fn_address``: tests pass a recording stand-in). ImportError when it
    cannot be built or the driver has no cuLaunchKernel."""
    _, lib = compile_shim("launch", _LAUNCH_CDEF, _LAUNCH_SOURCE)
    if launch_fn_address is None:
        import ctypes

        from . import _driver

        try:
            launch_fn_address = ctypes.cast(_driver._fn("cuLaunchKernel"), ctypes.c_void_p).value
        except OSError as e:
            raise ImportError(f"no cuLaunchKernel in the CUDA driver: {e}") from e
    lib.pb_set_launch_fn(int(launch_fn_address or 0))
    return lib
