"""Device arrays: our own (PyCUDA GPUArray underneath) and anyone else's, zero-copy.

:class:`DeviceArray` is what pybridge.cuda hands out. Its native handle is a PyCUDA ``GPUArray``
(``.gpuarray``), and it speaks both exchange protocols:

* ``__cuda_array_interface__`` v3, whose ``stream`` field names the stream that may still be
  writing it (the stream of the last launch that used it), so consumers can wait for that work;
* ``__dlpack__`` / ``__dlpack_device__`` (legacy and versioned capsules), making the consumer's
  stream wait for pending work as the protocol asks.

:func:`as_device_array` takes any CAI or DLPack producer (CuPy, PyTorch, numba.cuda, a Futhark cuda
handle, our own arrays) without copying: the result's ``ptr`` is the producer's pointer, and the
producer stays alive as long as the result does. A producer stream (CAI ``stream``) is honoured by
making our stream wait on it (an event, not a host synchronisation). NumPy arrays are refused with
a TypeError that points at :func:`to_device`.
"""

from __future__ import annotations

import operator
import sys

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import interop
from ..interop import KDLCUDA, KDLCUDAMANAGED, ArrayInfo
from . import _driver, context
from .context import ensure_context, pycuda_driver
from .errors import pycuda_errors
from .streams import DEFAULT_STREAM, Stream, as_stream

__all__ = [
    "DeviceArray",
    "as_device_array",
    "empty",
    "from_cai",
    "from_dlpack",
    "to_device",
    "zeros",
]


def _gpuarray_module() -> Any:
    pycuda_driver()  # the ImportError with the install hint
    import pycuda.gpuarray as gpuarray

    return gpuarray


class DeviceArray:
    """An array in device memory. Build one with :func:`to_device`, :func:`empty`, :func:`zeros`
    or :func:`as_device_array`, not directly."""

    # _info: the description without a stream (immutable). _meta: see _launch_meta,
    # what every launch checks, computed once on first use. _icache: (pending stream, info) for
    # `info`. _alloc: True when _owner is a PyCUDA allocation of ours (see `gpuarray`).
    __slots__ = ("_info", "_gpu", "_owner", "_pending", "_meta", "_icache", "_alloc", "__weakref__")

    def __init__(self, info: ArrayInfo, *, gpu: Any = None, owner: Any = None, pending: Stream | None = None) -> None:
        if type(info) is ArrayInfo and info.stream is None:
            self._info = info  # frozen: sharing it is the same as copying it
        else:
            self._info = ArrayInfo(
                ptr=info.ptr,
                shape=info.shape,
                strides=info.strides,
                dtype=info.dtype,
                readonly=info.readonly,
                stream=None,
                device_type=info.device_type,
                device_id=info.device_id,
            )
        self._gpu = gpu
        self._owner = owner
        self._pending = pending
        self._meta: tuple[int, bool, int, Any, bool] | None = None
        self._icache: tuple[Stream, ArrayInfo] | None = None
        self._alloc = False

    def _launch_meta(self) -> tuple[int, bool, int, Any, bool]:
        """(element count, C-contiguous, pointer as int, dtype if launchable else None, read-only):
        what launches check, computed once (an array's description never changes)."""
        meta = self._meta
        if meta is None:
            info = self._info
            try:
                ptr = int(info.ptr)
            except (TypeError, ValueError):
                # Not a pointer: report "not contiguous" (uncached) so that launches take the
                # general check, which fails on it exactly as before.
                return (info.size, False, 0, None, info.readonly)
            size, contiguous = info.size, info.c_contiguous
            # 4th: the dtype when the array can be launched as is (contiguous, a pointer unless
            # empty), else None; 5th: read-only. Launch checks compare these two only.
            ok = info.dtype if contiguous and (ptr != 0 or size == 0) else None
            meta = self._meta = (size, contiguous, ptr, ok, info.readonly)
        return meta

    # -- description
    @property
    def info(self) -> ArrayInfo:
        """The array's description, with the pending stream as its CAI stream value."""
        s = self._pending
        if s is None:
            return self._info
        cached = self._icache
        if cached is not None and cached[0] is s:
            return cached[1]
        i = self._info
        info = ArrayInfo(i.ptr, i.shape, i.strides, i.dtype, i.readonly, s.cai_stream, i.device_type, i.device_id)
        self._icache = (s, info)
        return info

    @property
    def ptr(self) -> int:
        return self._info.ptr

    @property
    def shape(self) -> tuple[int, ...]:
        return self._info.shape

    @property
    def strides(self) -> tuple[int, ...]:
        return self._info.strides

    @property
    def dtype(self) -> np.dtype:
        return self._info.dtype

    @property
    def size(self) -> int:
        meta = self._meta
        return meta[0] if meta is not None else self._launch_meta()[0]  # computed once, kept

    @property
    def nbytes(self) -> int:
        return self._info.nbytes

    @property
    def ndim(self) -> int:
        return len(self._info.shape)

    @property
    def readonly(self) -> bool:
        return self._info.readonly

    @property
    def c_contiguous(self) -> bool:
        return self._info.c_contiguous

    @property
    def owner(self) -> Any:
        """The object that owns the memory (the producer for imported arrays), or None."""
        return self._owner

    @property
    def stream(self) -> Stream | None:
        """The stream that may still have work on this array (None: nothing pending)."""
        return self._pending

    def _set_pending(self, stream: Stream | None) -> None:
        self._pending = stream

    def __len__(self) -> int:
        if not self._info.shape:
            raise TypeError("len() of a 0-d array")
        return self._info.shape[0]

    def __repr__(self) -> str:
        return (
            f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x}"
            f"{', readonly' if self.readonly else ''})"
        )

    # -- PyCUDA handle
    @property
    def gpuarray(self) -> Any:
        """The PyCUDA GPUArray (a view for imported memory, keeping this array alive)."""
        if self._gpu is None:
            gpuarray = _gpuarray_module()
            if self._alloc:
                # Our own allocation (see empty()): the GPUArray holds the allocation itself, as
                # one made by gpuarray.empty would, so no reference cycle delays the free.
                self._gpu = gpuarray.GPUArray(self.shape, self.dtype, gpudata=self._owner, strides=self.strides)
            else:
                self._gpu = gpuarray.GPUArray(
                    self.shape, self.dtype, gpudata=self.ptr, strides=self.strides, base=self
                )
        return self._gpu

    # -- to the host
    def get(self, stream: Any = None) -> np.ndarray:
        """Copy to a new NumPy array, after the pending work (or ``stream``'s) has finished."""
        ensure_context()
        for s in (self._pending, as_stream(stream) if stream is not None else None):
            if s is not None:
                s.synchronize()
        with pycuda_errors(operation="copy to host"):
            out = self.gpuarray.get()
        return np.asarray(out)

    def numpy(self) -> np.ndarray:
        return self.get()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a DeviceArray cannot be viewed as a NumPy array without a copy")
        out = self.get()
        return out.astype(dtype, copy=False) if dtype is not None else out

    def copy(self, stream: Any = None) -> DeviceArray:
        """A new contiguous device array with the same contents (device-to-device copy)."""
        if not self.c_contiguous:
            raise ValueError("copy() of a non-contiguous device array is not supported")
        s = as_stream(stream)
        out = empty(self.shape, self.dtype)
        if self._pending is not None:
            s.wait(self._pending)
        if self.nbytes:
            drv = pycuda_driver()
            with pycuda_errors(operation="device-to-device copy"):
                if s.pycuda is not None:
                    drv.memcpy_dtod_async(out.ptr, self.ptr, self.nbytes, s.pycuda)
                else:
                    if s.is_external:
                        s.synchronize()
                    drv.memcpy_dtod(out.ptr, self.ptr, self.nbytes)
        out._pending = s if s.pycuda is not None else None
        return out

    # -- exchange protocols
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        s = self._pending
        meta = self._meta
        if meta is None:
            meta = self._launch_meta()
        info = self._info
        if meta[1]:  # C-contiguous (cached with the launch metadata): no strides to compute
            return {"shape": info.shape, "typestr": info.dtype.str, "data": (info.ptr, info.readonly),
                    "version": 3, "strides": None, "stream": s.cai_stream if s is not None else None}
        return interop.make_cai(
            self.ptr, self.shape, self.dtype, strides=self.strides, readonly=self.readonly,
            stream=s.cai_stream if s is not None else None,
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._info.device_type, self._info.device_id)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        return (_compiled_exchange or _exchange())[1](self, stream, max_version, dl_device, copy)


def _dlpack_python(
    array: DeviceArray, stream: int | None, max_version: tuple[int, int] | None, dl_device: tuple[int, int] | None,
    copy: bool | None,
) -> Any:
    """``DeviceArray.__dlpack__`` (the compiled exchange does its common case in C)."""
    if copy:
        raise BufferError("DeviceArray.__dlpack__ does not copy (copy=True was asked)")
    if dl_device is not None and tuple(dl_device) != array.__dlpack_device__():
        raise BufferError(f"DeviceArray lives on {array.__dlpack_device__()}, not {tuple(dl_device)}")
    # stream: the consumer's stream (None means the legacy default stream, -1 no sync at all).
    if stream == 0:
        raise ValueError("DLPack stream 0 is ambiguous; use 1 (legacy) or 2 (per-thread default)")
    if array._pending is not None and stream != -1:
        consumer = 1 if stream is None else int(stream)
        ensure_context()
        _driver.stream_wait(consumer, array._pending.cai_stream, what="__dlpack__")
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    info = array._info
    # Strides exactly C order's are given as None: export_dlpack writes the same ones (in C where
    # the compiled path is in use).
    strides = None if info.strides == interop.c_contiguous_strides(info.shape, info.dtype.itemsize) else info.strides
    return interop.export_dlpack(
        info.ptr, info.shape, info.dtype, strides=strides, device_type=info.device_type,
        device_id=info.device_id, owner=array, versioned=versioned, readonly=info.readonly,
    )


# as_device_array's "cai" branch and DeviceArray.__dlpack__: (import, export) of the compiled
# exchange (pybridge.futhark._callpath, their common case in C) or of the Python functions here,
# which define what they do. Chosen at first use: pybridge.futhark is not imported before.
_compiled_exchange: tuple[Any, Any] | None = None


def _exchange() -> tuple[Any, Any]:
    global _compiled_exchange
    if _compiled_exchange is None:
        from ..futhark.callpath import compiled

        if compiled is None:
            _compiled_exchange = (_import_preferring_cai, _dlpack_python)
        else:
            compiled.configure_cuda(sys.modules[__name__], interop, ArrayInfo, DeviceArray, DEFAULT_STREAM, context,
                                    np.ndarray)
            _compiled_exchange = (compiled.cuda_import_cai, compiled.cuda_dlpack)
    return _compiled_exchange


# ------------------------------------------------------------------------------------ factories


def _wrap_gpuarray(gpu: Any, pending: Stream | None = None) -> DeviceArray:
    ptr = int(gpu.gpudata) if gpu.gpudata is not None else 0
    info = ArrayInfo(ptr=ptr, shape=tuple(gpu.shape), strides=tuple(gpu.strides), dtype=np.dtype(gpu.dtype))
    return DeviceArray(info, gpu=gpu, owner=gpu, pending=pending)


_dtypes: dict[Any, np.dtype] = {}
_mem_alloc: Any = None


def _dtype(dtype: Any) -> np.dtype:
    """np.dtype(dtype), cached for the usual specs (a scalar type such as np.float32, or a str)."""
    if isinstance(dtype, np.dtype):
        return dtype  # what np.dtype() returns for a dtype
    kind = type(dtype)
    if kind is not type and kind is not str:
        return np.dtype(dtype)
    dt = _dtypes.get(dtype)
    if dt is None:
        dt = np.dtype(dtype)
        if len(_dtypes) < 256:
            _dtypes[dtype] = dt
    return dt


def _shape_tuple(shape: Any) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as a tuple; a float such as 2.5 is a TypeError,
    not truncated to 2."""
    try:
        try:
            return (operator.index(shape),)
        except TypeError:  # a sequence (a 1-d NumPy array too: only 0-d ones are indexes)
            return tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape: expected an int or a sequence of ints, got {shape!r}") from None


def empty(shape: int | Sequence[int], dtype: Any = np.float32) -> DeviceArray:
    """An uninitialised C-contiguous device array.

    The memory is one ``cuMemAlloc`` (``pycuda.driver.mem_alloc``, the allocator GPUArray uses),
    freed when the array is; the PyCUDA GPUArray (``.gpuarray``) is made on first use only, as
    building one costs more host time than the launch that fills the array.

    Why no memory pool (``pycuda.tools.DeviceMemoryPool``): a pool hands a freed block to the next
    allocation at once, whatever stream may still use it. ``cuMemFree`` waits for (or defers past)
    pending work; a pool does not. With streams that is a race: ``y = cuda_saxpy(2, t, t,
    stream=s1); del t`` frees ``t`` while saxpy may still read it on s1, and ``cuda_chain(x, 5,
    stream=s2)`` can then get the same block and write it on s2 before s1 has read it. Our
    pending-stream tracking cannot fence this: the free happens in the allocation's C++
    destructor, and foreign consumers (CuPy, PyTorch through CAI/DLPack) may have queued reads on
    streams we never see. A safe pool needs per-stream free lists plus recorded events per
    cross-stream use, as PyTorch's caching allocator does (``record_stream``); until then, outputs
    are plain allocations, and callers who want no allocation per call pass ``out=``.
    """
    global _mem_alloc
    if type(shape) is int:
        shape_t: tuple[int, ...] = (shape,)
    else:
        shape_t = _shape_tuple(shape)
    dt = _dtype(dtype)
    ensure_context()
    itemsize = dt.itemsize
    count = 1
    for d in shape_t:
        count *= d
    if count <= 0 or itemsize == 0 or any(d < 0 for d in shape_t):
        # Nothing to allocate (or a shape PyCUDA should reject): exactly as before, via GPUArray.
        gpuarray = _gpuarray_module()
        with pycuda_errors(operation="allocation"):
            return _wrap_gpuarray(gpuarray.empty(shape_t, dt))
    alloc_fn = _mem_alloc
    if alloc_fn is None:
        alloc_fn = _mem_alloc = pycuda_driver().mem_alloc
    try:
        alloc = alloc_fn(count * itemsize)
    except Exception as e:  # as pycuda_errors(), without a context manager's cost
        if type(e).__module__.startswith("pycuda"):
            from .errors import from_pycuda_error

            raise from_pycuda_error(e, operation="allocation") from e
        raise
    info = ArrayInfo(int(alloc), shape_t, interop.c_contiguous_strides(shape_t, itemsize), dt)
    out = DeviceArray(info, owner=alloc)
    out._alloc = True
    out._meta = (count, True, info.ptr, dt, False)
    return out


def zeros(shape: int | Sequence[int], dtype: Any = np.float32, stream: Any = None) -> DeviceArray:
    """A zero-filled device array (filled on ``stream``, synchronously when None)."""
    out = empty(shape, dtype)
    if out.nbytes:
        drv = pycuda_driver()
        s = as_stream(stream)
        with pycuda_errors(operation="memset"):
            if s.pycuda is not None:
                drv.memset_d8_async(out.ptr, 0, out.nbytes, s.pycuda)
                out._set_pending(s)
            else:
                if s.is_external:
                    s.synchronize()
                drv.memset_d8(out.ptr, 0, out.nbytes)
    return out


def to_device(array: Any, stream: Any = None) -> DeviceArray:
    """Copy a NumPy array (or anything np.asarray accepts) to a new C-contiguous device array."""
    ensure_context()
    host = np.ascontiguousarray(array)
    if host.dtype.byteorder == ">":
        host = host.astype(host.dtype.newbyteorder("="))
    out = empty(host.shape, host.dtype)
    if host.nbytes:
        drv = pycuda_driver()
        s = as_stream(stream)
        with pycuda_errors(operation="copy to device"):
            if s.pycuda is not None:
                # Ordered on the stream; from pageable memory the call returns once the data is staged.
                drv.memcpy_htod_async(out.ptr, host, s.pycuda)
                out._set_pending(s)
            else:
                if s.is_external:
                    s.synchronize()
                drv.memcpy_htod(out.ptr, host)
    return out


def from_cai(obj: Any, stream: Any = None) -> DeviceArray:
    """Wrap a ``__cuda_array_interface__`` producer without copying.

    If the producer names a stream, ``stream`` (None = the legacy default stream) waits for it.
    """
    try:
        cai = obj.__cuda_array_interface__  # read once: some producers (PyTorch) build it in Python
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} has no __cuda_array_interface__") from None
    return _from_cai_dict(obj, cai, stream)


def _from_cai_dict(obj: Any, cai: Any, stream: Any) -> DeviceArray:
    """:func:`from_cai` with ``obj``'s interface already read."""
    t = cai.get("typestr") if type(cai) is dict else None
    # The common v3 form with a little-endian / byte-order-free number type: read without the
    # general parser (same outcome); anything else goes through cai_info, which explains errors.
    plain = interop.plain_cai_of(cai, t) if type(t) is str and t[:1] in "<|" and t[1:2] in "fiub" else None
    if plain is not None:
        ptr, readonly, shape, _, cai_stream = plain
        dt = _dtype(t)
        info = ArrayInfo(ptr, shape, interop.c_contiguous_strides(shape, dt.itemsize), dt, readonly)
    else:
        info = interop.cai_info(obj, cai)  # type: ignore[assignment]
        cai_stream = info.stream
    pending: Stream | None = None
    if cai_stream is not None:
        ensure_context()
        target = as_stream(stream)
        if target.cai_stream != cai_stream:  # the same stream is in order already: no event pair
            _driver.stream_wait(target.cai_stream, cai_stream, what="__cuda_array_interface__ import")
        pending = target
    return DeviceArray(info, owner=obj, pending=pending)


def from_dlpack(obj: Any, stream: Any = None) -> DeviceArray:
    """Wrap a DLPack producer living on a CUDA device without copying.

    ``stream`` (None = legacy default) is passed to ``__dlpack__`` so the producer orders its
    pending work before it.
    """
    device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else None
    if device is not None and int(device[0]) not in (KDLCUDA, KDLCUDAMANAGED):
        raise TypeError(
            f"{type(obj).__name__} lives on DLPack device {tuple(device)}, not a CUDA device: "
            "copy host data with pybridge.cuda.to_device()"
        )
    ensure_context()
    target = as_stream(stream)
    try:
        capsule = obj.__dlpack__(stream=target.cai_stream, max_version=(1, 0))
    except TypeError:  # a producer from before DLPack 1.0 (no max_version keyword)
        capsule = obj.__dlpack__(stream=target.cai_stream)
    info, keepalive = interop.import_dlpack(capsule, producer=obj)
    if info.device_type not in (KDLCUDA, KDLCUDAMANAGED):
        keepalive.release()
        raise TypeError(f"{type(obj).__name__} exported a DLPack tensor on device type {info.device_type}, not CUDA")
    return DeviceArray(info, owner=keepalive, pending=None if target.is_default else target)


_MISSING = object()


def as_device_array(obj: Any, *, stream: Any = None, prefer: str = "cai") -> DeviceArray:
    """Any device array (ours, CAI or DLPack producer) as a DeviceArray, zero-copy.

    ``prefer`` picks the protocol when the object speaks both ("cai" or "dlpack").
    """
    if prefer == "cai":  # the usual call first: the compiled exchange makes the checks below too
        return (_compiled_exchange or _exchange())[0](obj, stream)
    ours = _ours_or_refused(obj, stream)
    if ours is not None:
        return ours
    if prefer != "dlpack":
        raise ValueError("prefer must be 'cai' or 'dlpack'")
    has_cai = hasattr(obj, "__cuda_array_interface__")  # first, as always: PyTorch raises here for a grad tensor
    if hasattr(obj, "__dlpack__"):
        return from_dlpack(obj, stream)
    if has_cai:
        return from_cai(obj, stream)
    raise _not_a_device_array(obj)


def _ours_or_refused(obj: Any, stream: Any) -> DeviceArray | None:
    """``obj`` itself when it is a DeviceArray (``stream`` waiting for its pending work); a
    TypeError for a NumPy array; None for anything else."""
    if isinstance(obj, DeviceArray):
        pending = obj._pending
        if stream is not None and pending is not None:
            s = as_stream(stream)
            if s.cai_stream != pending.cai_stream:  # same stream: already ordered, nothing to do
                s.wait(pending)
        return obj
    if isinstance(obj, np.ndarray):
        raise TypeError(
            "a NumPy array lives in host memory; copy it to the GPU with pybridge.cuda.to_device(array)"
        )
    return None


def _import_preferring_cai(obj: Any, stream: Any) -> DeviceArray:
    """``as_device_array(obj, stream=stream, prefer="cai")`` (the compiled exchange does its common
    case in C)."""
    ours = _ours_or_refused(obj, stream)
    if ours is not None:
        return ours
    # A plain PyTorch tensor read directly: what its CAI (version 2, no stream) says, without
    # the dictionary PyTorch builds in Python.
    torch_view = interop.torch_plain(obj)
    if torch_view is not None:
        ptr, shape, dt = torch_view
        strides = interop.c_contiguous_strides(shape, dt.itemsize)
        return DeviceArray(ArrayInfo(ptr, shape, strides, dt, False, None), owner=obj)
    # Read once (hasattr would build it, then from_cai again): CuPy and PyTorch make it per read.
    cai = getattr(obj, "__cuda_array_interface__", _MISSING)
    if cai is not _MISSING:
        return _from_cai_dict(obj, cai, stream)
    return _import_without_cai(obj, stream)


def _import_without_cai(obj: Any, stream: Any) -> DeviceArray:
    if hasattr(obj, "__dlpack__"):
        return from_dlpack(obj, stream)
    raise _not_a_device_array(obj)


def _not_a_device_array(obj: Any) -> TypeError:
    return TypeError(
        f"{type(obj).__name__} is not a device array (it has neither __cuda_array_interface__ nor __dlpack__)"
    )
