"""The CUDA stream of a cuda-backend Futhark context, for exchanges ordered on the device.

Futhark's cuda backend runs each context on a CUDA context and stream of its own, and the C API
does not say which. The hardened C (csource.py, "cuda-stream-accessors") exports them, and whether
enqueued work may still fail (a kernel with a bounds check; its error surfaces at the next sync).
With them an exchange orders with a CUDA event (pybridge.ordering) instead of blocking the host on
a sync: a handle's ``__cuda_array_interface__`` names Futhark's stream, ``__dlpack__`` makes the
consumer's stream wait for it, ``from_cuda`` makes Futhark's stream wait for the producer's.
A library without the accessors (compiled by hand) keeps the host sync.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import ordering
from .errors import InvalidHandleError

_CDEF = """
uintptr_t pybridge_cuda_stream(uintptr_t ctx);
uintptr_t pybridge_cuda_context(uintptr_t ctx);
int pybridge_cuda_may_fail(uintptr_t ctx);
"""
_ffi: Any = None


class FutharkStream:
    """Futhark's stream and CUDA context for one Futhark context, with an event of that context.

    The event goes with the CUDA context when Futhark frees it (never destroyed here): use this
    only while the Futhark context is open."""

    __slots__ = ("stream", "cu_ctx", "slot", "_may_fail", "_ctx", "_dll", "_state")

    def __init__(self, so_path: Path, ctx_address: int, state: Any = None):
        global _ffi
        if _ffi is None:
            import cffi

            ffi = cffi.FFI()
            ffi.cdef(_CDEF)
            _ffi = ffi
        # The library cffi loaded already (dlopen gives the same copy); handles as integers.
        self._dll = _ffi.dlopen(str(so_path))
        self._ctx = ctx_address
        self._state = state  # the Futhark context's (open, lock): wait_for orders only while open
        self.stream = int(self._dll.pybridge_cuda_stream(ctx_address))
        self.cu_ctx = int(self._dll.pybridge_cuda_context(ctx_address))
        self._may_fail = self._dll.pybridge_cuda_may_fail
        self.slot = ordering.EventSlot(self.cu_ctx)

    def may_fail(self) -> bool:
        """Whether enqueued work may still report an error at the next sync (call under the lock)."""
        return bool(self._may_fail(self._ctx))

    def wait_for(self, producer: int) -> None:
        """Futhark's later work waits (on the device) for what ``producer`` has queued so far.
        Raises InvalidHandleError once the context is closed: the caller's check came before a
        producer's properties ran, which may close it (or another thread may meanwhile)."""
        state = self._state
        if state is None:
            ordering.order(self.stream, producer)
            return
        with state.lock:  # as close() frees the stream
            if not state.open:
                raise InvalidHandleError("the Futhark context is closed")
            ordering.order(self.stream, producer)

    def signal(self, consumer: int) -> None:
        """``consumer``'s later work waits (on the device) for what Futhark has queued so far."""
        if consumer != self.stream:  # ordering.order's test, then the slot's order (one frame less)
            self.slot.order(consumer, self.stream)


_NONE = object()


def futhark_stream(library: Any) -> FutharkStream | None:
    """The :class:`FutharkStream` of a cuda-backend library's context (made once), or None when
    the library has no accessors (or is not cuda): then exchanges sync the host."""
    ctx = library.context
    found = getattr(ctx, "_gpu_stream", _NONE)
    if found is _NONE:
        found = None
        if library.backend == "cuda":
            address = int(ctx.ffi.cast("uintptr_t", ctx.ptr))
            try:
                found = FutharkStream(library.path, address, ctx._state)
            except (AttributeError, OSError):
                found = None  # no accessors: compiled without pybridge's csource.py
        ctx._gpu_stream = found
    return found
