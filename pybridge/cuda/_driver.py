"""The few CUDA driver calls PyCUDA does not expose for foreign handles, through ctypes (the ones
pybridge.interop and pybridge.ordering make too go through pybridge.cudriver's cffi).

PyCUDA can only record events on its own Stream objects, but ordering against a producer's stream
(a CAI ``stream`` field, a DLPack consumer stream, a PyTorch or CuPy stream) needs the raw CUstream
handle. These helpers call libcuda directly; they act on the calling thread's current context, which
pybridge.cuda.context makes the device's primary context.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from .. import cudriver, ordering
from .errors import CudaError, error_for_code

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None

CU_EVENT_DISABLE_TIMING = 0x2
CU_POINTER_ATTRIBUTE_CONTEXT = 1
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_MEMORYTYPE_HOST = 1
CU_MEMORYTYPE_DEVICE = 2
CU_MEMORYTYPE_ARRAY = 3
CU_MEMORYTYPE_UNIFIED = 4


def libcuda() -> ctypes.CDLL:
    """The CUDA driver library (loaded once); OSError with a clear message when absent."""
    global _lib
    with _lock:
        if _lib is None:
            errors = []
            for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
                try:
                    _lib = ctypes.CDLL(name)
                    break
                except OSError as e:
                    errors.append(str(e))
            else:
                raise OSError(
                    "the CUDA driver library (libcuda.so.1) cannot be loaded: is an NVIDIA driver "
                    "installed on this machine? (" + "; ".join(errors) + ")"
                )
        return _lib


def _fn(*names: str) -> Any:
    lib = libcuda()
    for name in names:
        try:
            return getattr(lib, name)
        except AttributeError:
            continue
    raise OSError(f"the CUDA driver has none of {names}")


def error_string(code: int) -> str:
    s = ctypes.c_char_p()
    try:
        if _fn("cuGetErrorString")(ctypes.c_int(code), ctypes.byref(s)) == 0 and s.value:
            return s.value.decode(errors="replace")
    except OSError:
        pass
    return "unknown CUDA error"


def check(code: int, operation: str, kernel: str | None = None) -> None:
    if code != 0:
        raise error_for_code(code, kernel=kernel, operation=operation, cuda_message=error_string(code))


def stream_wait(waiter: int, producer: int, *, what: str | None = None) -> None:
    """Make stream ``waiter`` wait for the work queued so far on stream ``producer`` (raw handles;
    1 = legacy default, 2 = per-thread default). Does not block the host. The producer may be in
    another context (a Futhark handle's stream): the event is made in the producer's context."""
    try:
        ordering.order(waiter, producer)
    except ordering.CudaCallError as e:
        check(e.code, e.operation, what)


def stream_synchronize(handle: int) -> None:
    check(cudriver.stream_synchronize(handle), "cuStreamSynchronize")


def current_context() -> int:
    return cudriver.current_context()


def pointer_context(ptr: int) -> int | None:
    """Handle of the context that allocated device pointer ``ptr``; None if CUDA does not know it."""
    ctx = ctypes.c_void_p()
    res = _fn("cuPointerGetAttribute")(
        ctypes.byref(ctx), ctypes.c_int(CU_POINTER_ATTRIBUTE_CONTEXT), ctypes.c_uint64(ptr)
    )
    return int(ctx.value or 0) if res == 0 else None


def pointer_memory_type(ptr: int) -> int | None:
    """CU_MEMORYTYPE_* of ``ptr``, or None for memory CUDA does not know (plain host memory)."""
    kind = ctypes.c_uint(0)
    res = _fn("cuPointerGetAttribute")(
        ctypes.byref(kind), ctypes.c_int(CU_POINTER_ATTRIBUTE_MEMORY_TYPE), ctypes.c_uint64(ptr)
    )
    return int(kind.value) if res == 0 else None


__all__ = [
    "CudaError",
    "check",
    "current_context",
    "error_string",
    "libcuda",
    "pointer_context",
    "pointer_memory_type",
    "stream_synchronize",
    "stream_wait",
]
