"""Device-array interop shared by the Futhark and CUDA halves: reading a producer's
``__cuda_array_interface__`` (v3) and honouring its ``stream`` field.

CAI v3: ``stream`` None means no synchronisation is needed; 1 is the legacy default stream, 2 the
per-thread default stream, any other integer a ``CUstream``; 0 is disallowed. A consumer that uses
the data on another stream (or another context, as Futhark's cuda backend does) must first wait for
the producer's stream. Without PyCUDA at hand this module waits through the driver (libcuda) directly.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CudaArrayView:
    """What a CAI producer says about its memory."""

    pointer: int
    shape: tuple[int, ...]
    dtype: np.dtype
    strides: tuple[int, ...] | None
    readonly: bool
    stream: int | None
    owner: Any

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def c_contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected = []
        step = self.dtype.itemsize
        for n in reversed(self.shape):
            expected.append(step)
            step *= n
        # Strides of axes with extent 1 never matter.
        return all(s == e or n == 1 for s, e, n in zip(self.strides, reversed(expected), self.shape))

    def synchronize(self) -> None:
        """Wait until the producer's stream has finished writing this memory."""
        if self.stream is not None:
            stream_synchronize(self.stream)


def cuda_array_interface_view(obj: Any) -> CudaArrayView:
    """Read and validate ``obj.__cuda_array_interface__``; TypeError if it has none."""
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} does not expose __cuda_array_interface__") from None
    version = int(cai.get("version", 0))
    if version < 2:
        raise TypeError(f"__cuda_array_interface__ version {version} is too old (need 2 or 3)")
    if cai.get("mask") is not None:
        raise TypeError("masked CUDA arrays are not supported")
    ptr, readonly = cai["data"]
    stream = cai.get("stream") if version >= 3 else None
    if stream == 0:
        raise ValueError("__cuda_array_interface__ stream 0 is disallowed by the protocol (use 1 or 2)")
    strides = cai.get("strides")
    return CudaArrayView(
        pointer=int(ptr or 0),
        shape=tuple(int(s) for s in cai["shape"]),
        dtype=np.dtype(cai["typestr"]),
        strides=tuple(int(s) for s in strides) if strides is not None else None,
        readonly=bool(readonly),
        stream=int(stream) if stream is not None else None,
        owner=obj,
    )


_libcuda: Any = None


def _driver() -> Any:
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
        _libcuda.cuInit(0)
    return _libcuda


def stream_synchronize(stream: int) -> None:
    """cuStreamSynchronize on a CAI stream value (1 legacy, 2 per-thread, else a CUstream)."""
    rc = _driver().cuStreamSynchronize(ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"cuStreamSynchronize({stream:#x}) failed with CUDA error {rc}")


def current_context() -> int:
    """The CUDA context current on this thread (0 for none)."""
    cur = ctypes.c_void_p()
    _driver().cuCtxGetCurrent(ctypes.byref(cur))
    return int(cur.value or 0)


def restore_current_context(previous: int) -> None:
    """Make ``previous`` current again (0: leave no context current).

    Futhark's cuda backend leaves its own context current after creating it; cudart-based
    libraries (PyTorch, CuPy, the host launchers) would then run in Futhark's context instead of
    the device's primary one. Futhark pushes its context around each API call, so it needs none."""
    cu = _driver()
    if current_context() == previous:
        return
    if previous:
        cu.cuCtxSetCurrent(ctypes.c_void_p(previous))
    else:
        popped = ctypes.c_void_p()
        cu.cuCtxPopCurrent(ctypes.byref(popped))
