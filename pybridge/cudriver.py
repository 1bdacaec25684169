"""libcuda through cffi (ABI mode): the CUDA driver calls pybridge makes outside PyCUDA, shared by
stream ordering (``pybridge.ordering``), interop (``pybridge.interop``: producer syncs, copies,
the current context around Futhark's context creation) and pybridge.futhark's cuda contexts.

Handles are declared as ``uintptr_t``, so Python ints pass straight through (a cffi ABI call costs a
fraction of a ctypes call). pybridge.cuda keeps its own ctypes access (``cuda/_driver.py``) for the
calls that act on PyCUDA's objects. Imports only pybridge.errors.
"""

from __future__ import annotations

import threading
from typing import Any

from .errors import PybridgeError

_CDEF = """
int cuInit(unsigned int flags);
int cuEventRecord(uintptr_t event, uintptr_t stream);
int cuStreamWaitEvent(uintptr_t stream, uintptr_t event, unsigned int flags);
int cuStreamSynchronize(uintptr_t stream);
int cuStreamGetCtx(uintptr_t stream, uintptr_t *ctx);
int cuCtxGetCurrent(uintptr_t *ctx);
int cuCtxSetCurrent(uintptr_t ctx);
int cuCtxPushCurrent_v2(uintptr_t ctx);
int cuCtxPopCurrent_v2(uintptr_t *ctx);
int cuEventCreate(uintptr_t *event, unsigned int flags);
int cuEventDestroy_v2(uintptr_t event);
int cuDeviceGetCount(int *count);
int cuDeviceGet(int *device, int ordinal);
int cuDevicePrimaryCtxGetState(int device, unsigned int *flags, int *active);
int cuDevicePrimaryCtxRetain(uintptr_t *ctx, int device);
int cuMemcpyDtoH_v2(uintptr_t dst, uintptr_t src, size_t bytes);
int cuPointerGetAttribute(void *data, int attribute, uintptr_t ptr);
"""
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9

_lock = threading.Lock()
_ffi: Any = None
_cu: Any = None


def driver() -> Any:
    """libcuda through cffi (ABI mode), initialised; OSError where there is no CUDA driver."""
    global _cu, _ffi
    if _cu is None:
        with _lock:
            if _cu is None:
                import cffi

                ffi = cffi.FFI()
                ffi.cdef(_CDEF)
                cu = ffi.dlopen("libcuda.so.1")
                cu.cuInit(0)
                _ffi, _cu = ffi, cu
    return _cu


def ffi() -> Any:
    """The cffi FFI of :func:`driver` (for out-parameters)."""
    driver()
    return _ffi


class CudaCallError(PybridgeError, RuntimeError):
    """A driver call failed: ``code`` (CUresult) and ``operation`` (the call) for callers that
    raise their own error class (pybridge.cuda)."""

    def __init__(self, code: int, operation: str):
        super().__init__(f"{operation} failed with CUDA error {code}")
        self.code, self.operation = code, operation


def check(rc: int, what: str) -> None:
    if rc != 0:
        raise CudaCallError(rc, what)


def current_context() -> int:
    """The CUDA context current on this thread (0 for none)."""
    out = ffi().new("uintptr_t *")
    driver().cuCtxGetCurrent(out)
    return int(out[0])


def set_current(ctx: int) -> int:
    """Make ``ctx`` current on this thread, 0: pop the current context (leave none); the code."""
    cu = driver()
    if ctx:
        return int(cu.cuCtxSetCurrent(ctx))
    return int(cu.cuCtxPopCurrent_v2(ffi().new("uintptr_t *")))


def stream_synchronize(stream: int) -> int:
    """cuStreamSynchronize's code for a stream value (1 legacy, 2 per-thread, else a CUstream)."""
    return int(driver().cuStreamSynchronize(stream))


def memcpy_dtoh(dst_address: int, src: int, nbytes: int) -> int:
    """cuMemcpyDtoH's code: ``nbytes`` from device address ``src`` to host address ``dst_address``."""
    return int(driver().cuMemcpyDtoH_v2(dst_address, src, nbytes))


def pointer_device(ptr: int) -> int | None:
    """The device ordinal of device pointer ``ptr``, or None when CUDA does not know it."""
    value = ffi().new("int *")
    rc = driver().cuPointerGetAttribute(value, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    return int(value[0]) if rc == 0 else None
