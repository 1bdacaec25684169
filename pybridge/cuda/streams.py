"""Streams and events in the primary context.

:class:`Stream` wraps a PyCUDA stream (what PyCUDA's launches need) or, for streams made by
someone else (PyTorch, CuPy, numba, a raw handle), just the CUstream handle. Either way it speaks
the ``__cuda_stream__`` protocol (``(0, handle)``), so cuda.core and other consumers can use ours.
:func:`as_stream` turns None, our streams, PyCUDA streams, ``__cuda_stream__`` objects, PyTorch and
CuPy streams and raw ints into a :class:`Stream`.

:class:`Event` is a CUDA event created through the driver (ctypes), so that it can be recorded on
any stream, ours or foreign: ``Event.elapsed_ms(start, end)`` times GPU work.
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import _driver
from .context import ensure_context, pycuda_driver

__all__ = ["DEFAULT_STREAM", "Event", "Stream", "as_stream", "stream_handle"]


class Stream:
    """A CUDA stream. ``Stream()`` creates one; ``Stream.default()`` is the legacy default stream."""

    __slots__ = ("_pycuda", "_handle", "_owner", "__weakref__")

    def __init__(self, *, non_blocking: bool = False, _pycuda: Any = None, _handle: int | None = None,
                 _owner: Any = None) -> None:
        self._owner = _owner
        if _handle is not None:  # foreign (or default) stream, by handle
            self._pycuda = None
            self._handle = int(_handle)
            return
        if _pycuda is None:
            ensure_context()
            drv = pycuda_driver()
            # flags=1 is CU_STREAM_NON_BLOCKING: no implicit sync with the legacy default stream.
            _pycuda = drv.Stream(1 if non_blocking else 0)
        self._pycuda = _pycuda
        self._handle = int(_pycuda.handle)

    @classmethod
    def default(cls) -> Stream:
        """The legacy default stream (handle 0; CAI/DLPack value 1)."""
        return cls(_handle=0)

    @classmethod
    def external(cls, handle: int, owner: Any = None) -> Stream:
        """A stream made by someone else; ``owner`` (e.g. the torch.cuda.Stream) is kept alive."""
        return cls(_handle=int(handle), _owner=owner)

    @property
    def handle(self) -> int:
        """The raw CUstream handle (0 for the legacy default stream)."""
        return self._handle

    @property
    def cai_stream(self) -> int:
        """This stream as a CAI v3 / DLPack stream value (the default stream is 1, never 0)."""
        return self._handle if self._handle not in (0,) else 1

    @property
    def pycuda(self) -> Any:
        """The PyCUDA Stream to launch on (None for the default stream or a foreign one)."""
        return self._pycuda

    @property
    def is_default(self) -> bool:
        return self._handle in (0, 1)

    @property
    def is_external(self) -> bool:
        """A stream PyCUDA cannot launch on directly (neither ours nor the default stream)."""
        return self._pycuda is None and not self.is_default

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self._handle)

    def synchronize(self) -> None:
        ensure_context()
        if self._pycuda is not None:
            from .errors import from_pycuda_error

            try:
                self._pycuda.synchronize()
            except Exception as e:
                if type(e).__module__.startswith("pycuda"):  # pycuda.driver.Error
                    raise from_pycuda_error(e, operation="stream synchronize") from e
                raise
        else:
            _driver.stream_synchronize(self.cai_stream)

    def query(self) -> bool:
        """True when all work queued on the stream has finished."""
        ensure_context()
        if self._pycuda is not None:
            return bool(self._pycuda.is_done())
        res = _driver._fn("cuStreamQuery")(ctypes.c_void_p(self.cai_stream))
        if res == 600:  # CUDA_ERROR_NOT_READY
            return False
        _driver.check(res, "cuStreamQuery")
        return True

    def wait(self, other: Stream | Event | Any) -> None:
        """Make this stream wait (on the GPU, not the host) for an event or another stream's work."""
        ensure_context()
        if isinstance(other, Event):
            _driver.check(
                _driver._fn("cuStreamWaitEvent")(ctypes.c_void_p(self.cai_stream), other._ev, ctypes.c_uint(0)),
                "cuStreamWaitEvent",
            )
            return
        _driver.stream_wait(self.cai_stream, as_stream(other).cai_stream)

    def record(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.cai_stream == self.cai_stream

    def __hash__(self) -> int:
        return hash(self.cai_stream)

    def __repr__(self) -> str:
        kind = "default" if self.is_default else ("external" if self.is_external else "pycuda")
        return f"<pybridge.cuda.Stream {kind} handle=0x{self._handle:x}>"


def stream_handle(obj: Any) -> int:
    """The raw CUstream handle of a stream-like object (see :func:`as_stream`)."""
    return as_stream(obj).handle


# The legacy default stream as one shared object: a Stream is immutable, and the default stream
# has no PyCUDA object or owner, so every `stream=None` can use this one instead of a new object.
DEFAULT_STREAM = Stream(_handle=0)


def as_stream(obj: Any) -> Stream:
    """None (legacy default), Stream, PyCUDA Stream, ``__cuda_stream__`` objects, torch/CuPy/numba
    streams and raw ints (0 and 1 = legacy default) as a :class:`Stream`."""
    if obj is None:
        return DEFAULT_STREAM
    if isinstance(obj, Stream):
        return obj
    if isinstance(obj, bool):
        raise TypeError("a stream cannot be a bool")
    if isinstance(obj, int):
        return DEFAULT_STREAM if obj in (0, 1) else Stream.external(obj)
    proto = getattr(obj, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        version, handle = value
        if version != 0:
            raise TypeError(f"unsupported __cuda_stream__ version {version} from {type(obj).__name__}")
        return Stream.external(int(handle), owner=obj)
    mod = type(obj).__module__
    if mod.startswith("pycuda"):
        return Stream(_pycuda=obj)
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(obj, attr, None)
        if isinstance(value, int):
            return Stream.external(value, owner=obj)
    handle = getattr(obj, "handle", None)  # numba.cuda stream: handle is a ctypes c_void_p
    if handle is not None:
        value = getattr(handle, "value", handle)
        if isinstance(value, int) or value is None:
            return Stream.external(int(value or 0), owner=obj)
    raise TypeError(
        f"cannot use {type(obj).__name__} as a CUDA stream (expected None, a pybridge Stream, an int handle, "
        "or an object with __cuda_stream__)"
    )


class Event:
    """A CUDA event. ``Event(timing=True)`` can be used with :meth:`elapsed_ms`."""

    __slots__ = ("_ev", "_timing", "__weakref__")

    def __init__(self, *, timing: bool = True) -> None:
        ensure_context()
        self._ev = ctypes.c_void_p()
        self._timing = timing
        flags = 0 if timing else _driver.CU_EVENT_DISABLE_TIMING
        _driver.check(_driver._fn("cuEventCreate")(ctypes.byref(self._ev), ctypes.c_uint(flags)), "cuEventCreate")

    def record(self, stream: Any = None) -> Event:
        ensure_context()
        s = as_stream(stream)
        _driver.check(_driver._fn("cuEventRecord")(self._ev, ctypes.c_void_p(s.cai_stream)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        ensure_context()
        _driver.check(_driver._fn("cuEventSynchronize")(self._ev), "cuEventSynchronize")

    def query(self) -> bool:
        ensure_context()
        res = _driver._fn("cuEventQuery")(self._ev)
        if res == 600:  # CUDA_ERROR_NOT_READY
            return False
        _driver.check(res, "cuEventQuery")
        return True

    def time_since(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event (both recorded and finished)."""
        return Event.elapsed_ms(start, self)

    @staticmethod
    def elapsed_ms(start: Event, end: Event) -> float:
        if not (start._timing and end._timing):
            raise ValueError("elapsed time needs events created with timing=True")
        ensure_context()
        ms = ctypes.c_float()
        fn = _driver._fn("cuEventElapsedTime_v2", "cuEventElapsedTime")
        _driver.check(fn(ctypes.byref(ms), start._ev, end._ev), "cuEventElapsedTime")
        return float(ms.value)

    def __del__(self) -> None:
        ev = getattr(self, "_ev", None)
        if ev is not None and ev.value:
            try:
                _driver._fn("cuEventDestroy_v2", "cuEventDestroy")(ev)
            except Exception:  # noqa: BLE001 - never raise from a finaliser
                pass
            self._ev = ctypes.c_void_p()

    def __repr__(self) -> str:
        return f"<pybridge.cuda.Event 0x{(self._ev.value or 0):x}>"
