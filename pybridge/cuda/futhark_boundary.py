"""Ordering at the boundary with Futhark's own CUDA context (see :mod:`pybridge.cuda.context`).

Contexts share no streams, so handing data across is a synchronisation: :func:`before_futhark`
before our outputs go into a Futhark entry point, :func:`after_futhark` before our kernels read a
Futhark output. Above both :mod:`~pybridge.cuda.context` and :mod:`~pybridge.cuda.streams`.
"""

from __future__ import annotations

from typing import Any

from .context import ensure_context, pycuda_driver
from .streams import Stream, as_stream

__all__ = ["after_futhark", "before_futhark"]


def before_futhark(*streams: Stream | None) -> None:
    """Call before our outputs go into a Futhark entry point: wait for our streams to finish.

    With no argument, waits for the whole primary context (every stream in it).
    """
    if not streams:
        ensure_context()
        pycuda_driver().Context.synchronize()
        return
    for s in streams:
        as_stream(s).synchronize()


def after_futhark(futhark_object: Any) -> None:
    """Call before reading a Futhark output with our kernels: sync the Futhark context that made it.

    Accepts anything with a ``sync()`` method (a pybridge.futhark library or context) or with a
    ``context`` attribute that has one (a handle).
    """
    target = futhark_object
    for _ in range(3):
        sync = getattr(target, "sync", None)
        if callable(sync):
            sync()
            return
        target = getattr(target, "context", None)
        if target is None:
            break
    raise TypeError(
        f"after_futhark needs a Futhark library, context or handle (something with sync()), "
        f"got {type(futhark_object).__name__}"
    )
