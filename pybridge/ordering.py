"""Order one CUDA stream after another on the device, across CUDA contexts (libcuda via ctypes).

An event recorded on the producer's stream and waited for on the consumer's (``cuStreamWaitEvent``)
orders the consumer's later work after the producer's earlier work without blocking the host.
``cuStreamWaitEvent`` accepts an event of another context, which is what Futhark's cuda backend
needs: it runs each Futhark context on a CUDA context and stream of its own, while CuPy, PyTorch,
numba and pybridge.cuda work in the device's primary context.

An event must be recorded on a stream of the context it was made in, so events are kept per
context: the caller owns an :class:`EventSlot` for a context it controls (a Futhark context), one
slot is kept per active primary context (retained here, so it outlives the slot), and any other
context gets an event made for the one call.

Stream values are CUstream handles; ``1`` and ``2`` are the legacy and per-thread default streams
of the current context (``CU_STREAM_LEGACY``, ``CU_STREAM_PER_THREAD``, the values CAI v3 and
DLPack use). Imports only pybridge.errors: pybridge.interop, pybridge.futhark and pybridge.cuda use this.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from .errors import PybridgeError

LEGACY = 1
PER_THREAD = 2
_EVENT_DISABLE_TIMING = 0x2

_lock = threading.Lock()
_cu: Any = None
_primary: dict[int, "EventSlot"] = {}  # handle of a retained, active primary context -> its slot
_primary_checked: set[int] = set()  # devices whose primary context was looked at


def driver() -> Any:
    """libcuda, initialised, with the argument types of the calls used here."""
    global _cu
    if _cu is None:
        with _lock:
            if _cu is None:
                cu = ctypes.CDLL("libcuda.so.1")
                cu.cuInit(0)
                vp = ctypes.c_void_p
                cu.cuEventRecord.argtypes = [vp, vp]
                cu.cuStreamWaitEvent.argtypes = [vp, vp, ctypes.c_uint]
                cu.cuStreamGetCtx.argtypes = [vp, ctypes.POINTER(vp)]
                cu.cuCtxPushCurrent_v2.argtypes = [vp]
                cu.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(vp)]
                cu.cuEventCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
                cu.cuEventDestroy_v2.argtypes = [vp]
                _cu = cu
    return _cu


class CudaCallError(PybridgeError, RuntimeError):
    """A driver call failed: ``code`` (CUresult) and ``operation`` (the call) for callers that
    raise their own error class (pybridge.cuda)."""

    def __init__(self, code: int, operation: str):
        super().__init__(f"{operation} failed with CUDA error {code}")
        self.code, self.operation = code, operation


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise CudaCallError(rc, what)


class EventSlot:
    """One event of one CUDA context. Record and wait happen under the slot's lock: another
    thread's record in between would make the wait wait for that thread's work instead."""

    __slots__ = ("ctx", "_ev", "_lock")

    def __init__(self, ctx: int):
        cu = driver()
        self.ctx = ctx
        self._ev = ctypes.c_void_p()
        self._lock = threading.Lock()
        _check(cu.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)), "cuCtxPushCurrent")
        try:
            _check(cu.cuEventCreate(ctypes.byref(self._ev), _EVENT_DISABLE_TIMING), "cuEventCreate")
        finally:
            cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def order(self, waiter: int, producer: int) -> None:
        """``waiter`` waits for the work queued so far on ``producer`` (a stream of this context)."""
        cu = _cu
        with self._lock:
            _check(cu.cuEventRecord(self._ev, producer), "cuEventRecord")
            # The wait captures the event's state now: a later record does not change what it waits for.
            _check(cu.cuStreamWaitEvent(waiter, self._ev, 0), "cuStreamWaitEvent")

    def destroy(self) -> None:
        if self._ev.value:
            driver().cuEventDestroy_v2(self._ev)
            self._ev = ctypes.c_void_p()


def stream_context(stream: int) -> int:
    """The context of ``stream`` (for 1 and 2: the calling thread's current context)."""
    ctx = ctypes.c_void_p()
    rc = driver().cuStreamGetCtx(stream, ctypes.byref(ctx))
    if rc == 201:  # CUDA_ERROR_INVALID_CONTEXT: a default stream with no context current
        raise CudaCallError(rc, f"stream {stream}: no CUDA context is current on this thread to say whose default stream it is; cuStreamGetCtx")
    _check(rc, f"cuStreamGetCtx({stream:#x})")
    return int(ctx.value or 0)


def _primary_slot(ctx: int) -> EventSlot | None:
    """The slot of ``ctx`` if it is an active primary context (retained here once, for good)."""
    slot = _primary.get(ctx)
    if slot is not None:
        return slot
    cu = driver()
    with _lock:
        count = ctypes.c_int(0)
        cu.cuDeviceGetCount(ctypes.byref(count))
        for ordinal in range(count.value):
            if ordinal in _primary_checked:
                continue
            dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
            if cu.cuDeviceGet(ctypes.byref(dev), ordinal) or cu.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)):
                continue
            if not active.value:
                continue  # retaining would create it (memory, time): looked at again next time
            pctx = ctypes.c_void_p()
            if cu.cuDevicePrimaryCtxRetain(ctypes.byref(pctx), dev) == 0:
                _primary_checked.add(ordinal)
                _primary[int(pctx.value or 0)] = EventSlot(int(pctx.value or 0))
    return _primary.get(ctx)


def order(waiter: int, producer: int, slot: EventSlot | None = None) -> None:
    """Make stream ``waiter`` wait (on the device) for the work queued so far on ``producer``.

    ``slot``: an event of ``producer``'s context that the caller owns; else one is found or made."""
    if waiter == producer:
        return
    if slot is None:
        ctx = stream_context(producer)
        slot = _primary_slot(ctx)
        if slot is None:
            once = EventSlot(ctx)
            try:
                once.order(waiter, producer)
            finally:
                once.destroy()  # safe at once: the wait holds what it needs
            return
    slot.order(waiter, producer)
