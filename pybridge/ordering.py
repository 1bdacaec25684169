"""Order one CUDA stream after another on the device, across CUDA contexts (libcuda via cffi).

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
DLPack use). The driver calls go through pybridge.cudriver; pybridge.interop, pybridge.futhark and
pybridge.cuda use this.
"""

from __future__ import annotations

import threading
from typing import Any

from .cudriver import CudaCallError, driver, ffi
from .cudriver import check as _check

__all__ = ["LEGACY", "PER_THREAD", "CudaCallError", "EventSlot", "driver", "order", "stream_context"]

LEGACY = 1
PER_THREAD = 2
_EVENT_DISABLE_TIMING = 0x2
_INVALID_HANDLE, _INVALID_CONTEXT = 400, 201

_lock = threading.Lock()
_primary: dict[int, "EventSlot"] = {}  # handle of a retained, active primary context -> its slot
_primary_checked: set[int] = set()  # devices whose primary context was looked at
_last: list["EventSlot"] = []  # the primary slot used last: tried first (one device, one context)


class EventSlot:
    """One event of one CUDA context. Record and wait happen under the slot's lock: another
    thread's record in between would make the wait wait for that thread's work instead."""

    __slots__ = ("ctx", "ev", "_lock", "_cu", "_in_c")

    def __init__(self, ctx: int):
        cu = self._cu = driver()  # kept: try_order runs once per exchange
        self._in_c = _compiled_order()
        self.ctx = ctx
        out = ffi().new("uintptr_t *")
        self._lock = threading.Lock()
        _check(cu.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        try:
            _check(cu.cuEventCreate(out, _EVENT_DISABLE_TIMING), "cuEventCreate")
        finally:
            cu.cuCtxPopCurrent_v2(ffi().new("uintptr_t *"))
        self.ev = int(out[0])

    def order(self, waiter: int, producer: int) -> None:
        """``waiter`` waits for the work queued so far on ``producer`` (a stream of this context)."""
        _check(self.try_order(waiter, producer), "cuEventRecord")

    def try_order(self, waiter: int, producer: int) -> int:
        """:meth:`order`, returning cuEventRecord's error code instead of raising it (400 when
        ``producer`` is a stream of another context)."""
        in_c = self._in_c
        if in_c is not None:  # the compiled path: both calls in C, the GIL held between them
            rc = in_c[0](in_c[1], in_c[2], self.ev, waiter, producer)
            if rc == 0:
                return 0
            if rc[0] == 0:
                _check(rc[1], "cuStreamWaitEvent")
            return int(rc[0])
        cu = self._cu
        with self._lock:
            rc = cu.cuEventRecord(self.ev, producer)
            if rc == 0:
                # The wait captures the event's state now: a later record does not change it.
                _check(cu.cuStreamWaitEvent(waiter, self.ev, 0), "cuStreamWaitEvent")
            return rc

    def destroy(self) -> None:
        if self.ev:
            driver().cuEventDestroy_v2(self.ev)
            self.ev = 0


def _compiled_order() -> tuple[Any, int, int] | None:
    """(order_streams, address of cuEventRecord, of cuStreamWaitEvent) where the compiled call
    path is in use (pybridge.futhark._callpath: the two calls without a Python frame between
    them), else None."""
    from .futhark.callpath import compiled  # here: only once a slot is made (pybridge.futhark imports this module)

    if compiled is None:
        return None
    cu, f = driver(), ffi()
    return compiled.order_streams, int(f.cast("uintptr_t", cu.cuEventRecord)), int(f.cast("uintptr_t", cu.cuStreamWaitEvent))


def stream_context(stream: int) -> int:
    """The context of ``stream`` (for 1 and 2: the calling thread's current context)."""
    cu = driver()
    out = ffi().new("uintptr_t *")
    rc = cu.cuStreamGetCtx(stream, out)
    if rc == _INVALID_CONTEXT:  # a default stream with no context current
        raise CudaCallError(rc, f"stream {stream}: no CUDA context is current on this thread to say whose default stream it is; cuStreamGetCtx")
    _check(rc, f"cuStreamGetCtx({stream:#x})")
    return int(out[0])


def _primary_slot(ctx: int) -> EventSlot | None:
    """The slot of ``ctx`` if it is an active primary context (retained here once, for good)."""
    slot = _primary.get(ctx)
    if slot is not None:
        return slot
    cu = driver()
    with _lock:
        count = ffi().new("int *")
        cu.cuDeviceGetCount(count)
        for ordinal in range(count[0]):
            if ordinal in _primary_checked:
                continue
            dev, flags, active = ffi().new("int *"), ffi().new("unsigned int *"), ffi().new("int *")
            if cu.cuDeviceGet(dev, ordinal) or cu.cuDevicePrimaryCtxGetState(dev[0], flags, active):
                continue
            if not active[0]:
                continue  # retaining would create it (memory, time): looked at again next time
            pctx = ffi().new("uintptr_t *")
            if cu.cuDevicePrimaryCtxRetain(pctx, dev[0]) == 0:
                _primary_checked.add(ordinal)
                _primary[int(pctx[0])] = EventSlot(int(pctx[0]))
    return _primary.get(ctx)


def order(waiter: int, producer: int, slot: EventSlot | None = None) -> None:
    """Make stream ``waiter`` wait (on the device) for the work queued so far on ``producer``.

    ``slot``: an event of ``producer``'s context that the caller owns; else the primary context's
    slot used last is tried (a stream of another context makes the record fail, harmlessly), then
    the producer's context is looked up."""
    if waiter == producer:
        return
    if slot is not None:
        slot.order(waiter, producer)
        return
    if _last and _last[0].try_order(waiter, producer) == 0:
        return
    ctx = stream_context(producer)
    found = _primary_slot(ctx)
    if found is not None:
        found.order(waiter, producer)
        _last[:] = [found]
        return
    once = EventSlot(ctx)
    try:
        once.order(waiter, producer)
    finally:
        once.destroy()  # safe at once: the wait holds what it needs
