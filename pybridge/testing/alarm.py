"""A timer that interrupts the main thread at a precise moment, as Ctrl-C does (Linux).

``Alarm.arm(us)`` starts a POSIX timer whose SIGALRM goes to the main thread alone
(``SIGEV_THREAD_ID``); its handler raises KeyboardInterrupt, as SIGINT's default handler does.
After ``Alarm.disarm()`` no interrupt comes any more: one the timer caused has surfaced by the end
of that call. ``setitimer`` cannot promise that: its signal goes to the process, another thread
may take it and pass it on after the timer was disarmed (it surfaced once in the lifecycle
machine's own code). A helper thread sending the signal could not fire while the main thread runs
Python either: it needs the GIL first.

The handler must be installed for SIGALRM (``signal.signal(signal.SIGALRM, alarm.handler)``) in
the main thread, which is the only one that may arm the alarm.

A Ctrl-C surfaces only where the interrupted code checks for signals (RELIABILITY.md, "Ctrl-C").
A trace function (Hypothesis traces a test once it failed, to explain it: ``sys.settrace`` before
Python 3.12, ``sys.monitoring`` after) runs Python code at every line, and a signal handled there
raises at the traced line: at a ``try:`` line that exception escapes every handler of the frame
(CPython 3.11), and elsewhere it lands where no Ctrl-C could. So the handler does not raise while
a trace function or Hypothesis's own code (its tracer, its GC callback) runs: it sets the timer
again, ``DEFER_US`` later, and the interrupt lands in the code under test, as a real one would;
once ``disarm()`` began (the call under test is over) it drops the interrupt instead, which raised
there would escape the region that guards the call.
Before, one that landed in Hypothesis's tracer at the lifecycle machine's ``try:`` killed its
process with SIGINT.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys
import threading
from typing import Any

_CLOCK_MONOTONIC = 1
DEFER_US = 5.0  # how much later an interrupt that came in a tracer is sent again
_SIGEV_THREAD_ID = 4  # Linux: deliver to the thread named in sigev_notify_thread_id


class _Sigevent(ctypes.Structure):
    # struct sigevent on Linux: value, signo, notify, then a union of 48 bytes (the thread id first).
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("tid", ctypes.c_int), ("pad", ctypes.c_int * 11)]


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


def _librt() -> Any:
    """The C library holding timer_create (libc since glibc 2.34, librt before)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "timer_create"):
        return libc
    try:  # by its soname: find_library would run ldconfig, gcc or ld to find it
        return ctypes.CDLL("librt.so.1", use_errno=True)
    except OSError:
        return ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)


class Alarm:
    """One POSIX timer of the main thread (see the module's text)."""

    def __init__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("an Alarm interrupts the main thread and is made there")
        self._rt = _librt()
        sev = _Sigevent(signo=signal.SIGALRM, notify=_SIGEV_THREAD_ID, tid=threading.get_native_id())
        self._timer = ctypes.c_void_p()
        self._armed = False  # between arm() and disarm(): an interrupt may be sent again (handler)
        if self._rt.timer_create(_CLOCK_MONOTONIC, ctypes.byref(sev), ctypes.byref(self._timer)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create failed")

    def handler(self, signum: int, frame: Any) -> None:
        """SIGALRM's handler: KeyboardInterrupt, or (while armed, in a tracer) the timer set again."""
        if _in_tracer(frame):
            if self._armed:
                self._set(round(DEFER_US * 1000))
            # else disarm() has begun: the call is over, and the interrupt is dropped, as Python
            # drops one that comes in a finaliser (raised here it would escape the guarded region)
            return
        raise KeyboardInterrupt

    def _set(self, ns: int) -> None:
        spec = _Itimerspec()
        spec.value.sec, spec.value.nsec = divmod(ns, 10**9)
        if self._rt.timer_settime(self._timer, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime failed")

    def arm(self, us: float) -> None:
        """Interrupt the main thread ``us`` microseconds from now (at least 1 ns)."""
        self._armed = True
        self._set(max(1, round(us * 1000)))

    def disarm(self) -> None:
        """Stop the timer. Its signal goes to this thread, which takes it, if the timer fired,
        before the call that disarms returns (a signal still queued is taken on that call's way
        out, or dropped by the kernel, the timer having changed): an interrupt surfaces here at the
        latest, at the end of that call, and none comes later."""
        self._armed = False  # first: a handler running from here on sends nothing again
        self._set(0)

    def close(self) -> None:
        self._armed = False
        if self._timer:
            self._set(0)
            self._rt.timer_delete(self._timer)
            self._timer = ctypes.c_void_p()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _in_tracer(frame: Any) -> bool:
    """Whether ``frame`` (where a signal handler was called) is a trace or profile function's, or
    Hypothesis's own code (its tracer under ``sys.monitoring``, its GC callback)."""
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # a signal that came in this module (the handler's own _set): its caller
    if frame is None:
        return False
    code = frame.f_code
    for hook in (sys.gettrace(), sys.getprofile()):
        if hook is None:
            continue
        fn = getattr(hook, "__func__", hook)  # a function, a bound method or an object with __call__
        fn = getattr(fn, "__code__", None) or getattr(getattr(type(hook), "__call__", None), "__code__", None)
        if fn is code:
            return True
    return str(frame.f_globals.get("__name__", "")).startswith("hypothesis.")


__all__ = ["DEFER_US", "Alarm"]
