"""Which CUDA context owns what, and how work is ordered across contexts.

**The primary context (shared).** pybridge.cuda works in the device's *primary* context, the one
the CUDA runtime uses: :func:`ensure_context` retains it through PyCUDA
(``pycuda.driver.Device(n).retain_primary_context()``) and pushes it on the calling thread. CuPy,
PyTorch, numba.cuda and our cudart host launchers (``build/cuda/lib<mod>.so``) all use that same
context, so within it:

* device pointers from any of them are valid in all of them (zero-copy through CAI / DLPack);
* ordering is by streams: a CAI ``stream`` field or a DLPack consumer stream is honoured with an
  event (:func:`pybridge.cuda._driver.stream_wait`), never by a device-wide synchronisation;
* memory is freed by whoever allocated it; imported arrays keep their producer alive.

Do not use ``pycuda.autoinit``: it creates a *separate* non-primary context whose memory the other
libraries cannot use. ``pycuda.autoprimaryctx`` is compatible with us.

**Futhark's context (separate).** The Futhark cuda backend creates its own context with
``cuCtxCreate`` when ``futhark_context_new`` runs, and launches its kernels there. Two contexts on
one device share the unified virtual address space (so a pointer names one place, and copies
between them work), but a kernel in one context is not guaranteed to be allowed to dereference
memory allocated in the other. The rules pybridge follows at that boundary:

* ordering: contexts share no streams, so the boundary is a synchronisation. A Futhark handle syncs
  its context before it gives out its pointer (its CAI has ``stream: None``);
  :func:`~pybridge.cuda.futhark_boundary.before_futhark` syncs our stream(s) before our outputs go
  into a Futhark entry point, and :func:`~pybridge.cuda.futhark_boundary.after_futhark` syncs a Futhark context before we read its outputs;
* access: :func:`same_context` tells whether a pointer belongs to the current (primary) context;
  when it does not, copy it (``DeviceArray.copy()`` through the unified address space) before a
  kernel of ours reads it many times, or run the consumer in the owner's context.

**Leaving the stack as we found it.** PyCUDA keeps one context stack per thread and aborts the
whole process (``PyCUDA ERROR: The context stack was not empty upon module cleanup``, signal 6)
when a thread ends with a context still on its stack. :func:`ensure_context` pushes once per
thread and keeps the context current for that thread's later calls, so it also arranges the pop:
at interpreter exit for the main thread (``atexit``), and when any other thread ends (a
thread-local object whose finaliser pops, run by Python on that thread as it finishes: a thread
pool's workers, a Dask worker's task threads).

PyCUDA is optional: importing this module works without it, and the functions that need it raise
an ImportError that says how to install it.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from ..distribution import install_hint

__all__ = [
    "PYCUDA_HINT",
    "compute_capability",
    "device_count",
    "ensure_context",
    "have_pycuda",
    "pycuda_driver",
    "same_context",
]

PYCUDA_HINT = f"pybridge.cuda needs PyCUDA (and an NVIDIA GPU with its driver) for this: {install_hint('cuda')}"

_state_lock = threading.Lock()
_primary: dict[int, Any] = {}  # device ordinal -> retained primary context (PyCUDA Context)
_tls = threading.local()  # which devices' contexts this thread has pushed
_initialised = False


def pycuda_driver() -> Any:
    """``pycuda.driver``, or an ImportError that says how to get it."""
    try:
        import pycuda.driver as drv
    except ImportError as e:
        raise ImportError(f"{PYCUDA_HINT} [{e}]") from e
    return drv


def have_pycuda() -> bool:
    try:
        pycuda_driver()
    except ImportError:
        return False
    return True


def _init() -> Any:
    global _initialised
    drv = pycuda_driver()
    if not _initialised:
        drv.init()
        _initialised = True
    return drv


def device_count() -> int:
    """Number of CUDA devices; 0 when PyCUDA or the driver is missing."""
    try:
        drv = _init()
        return int(drv.Device.count())
    except Exception:  # noqa: BLE001 - any failure means "no usable GPU"
        return 0


class _Pushed:
    """The devices whose primary context this thread pushed. Held only by the thread's local
    storage, so Python drops it, on that same thread, when the thread ends: its finaliser pops
    what the thread pushed before PyCUDA's per-thread stack is destroyed (which aborts when not
    empty). The main thread's pushes are popped at exit instead (``atexit``), before PyCUDA's
    module cleanup."""

    __slots__ = ("devices", "main", "__weakref__")

    def __init__(self, main: bool):
        self.devices: set[int] = set()
        self.main = main

    def __del__(self) -> None:
        if not self.main:
            _pop_pushed(self.devices)


def ensure_context(device: int = 0) -> Any:
    """Make the primary context of ``device`` current on this thread (once per thread); return it.
    The push is undone when the thread ends (see the module docstring)."""
    pushed: _Pushed | None = getattr(_tls, "pushed", None)
    if pushed is not None and device in pushed.devices:  # the every-launch path: two lookups, no allocation
        ctx = _primary.get(device)
        if ctx is not None:
            return ctx
    if pushed is None:
        pushed = _Pushed(threading.current_thread() is threading.main_thread())
    drv = _init()
    with _state_lock:
        ctx = _primary.get(device)
        if ctx is None:
            ctx = drv.Device(device).retain_primary_context()
            _primary[device] = ctx
    ctx.push()
    pushed.devices.add(device)
    if getattr(_tls, "pushed", None) is None:
        _tls.pushed = pushed
        if pushed.main:
            atexit.register(_pop_at_exit, pushed)  # atexit runs on the main thread: pop only its pushes
    return ctx


def _pop_pushed(devices: set[int]) -> None:
    """Pop one context per device this thread pushed. Failures (a context killed by a sticky
    error, a driver already gone) cannot be acted on this late."""
    try:
        drv = pycuda_driver()
        for _ in list(devices):
            drv.Context.pop()
    except Exception:  # noqa: BLE001
        pass
    devices.clear()


def _pop_at_exit(pushed: _Pushed) -> None:
    # Mirrors pycuda.autoprimaryctx: leave the context stack as we found it, then let PyCUDA drop
    # its caches.
    _pop_pushed(pushed.devices)
    try:
        from pycuda.tools import clear_context_caches

        clear_context_caches()
    except Exception:  # noqa: BLE001
        pass


def compute_capability(device: int = 0) -> tuple[int, int]:
    drv = _init()
    major, minor = drv.Device(device).compute_capability()
    return int(major), int(minor)


def same_context(ptr: int) -> bool | None:
    """Whether device pointer ``ptr`` was allocated in this thread's current context.

    None when CUDA does not know the pointer (host memory, or a stale pointer).
    """
    from . import _driver

    owner = _driver.pointer_context(ptr)
    if owner is None:
        return None
    return owner == _driver.current_context()
