"""Device-array interop shared by both halves: ``__cuda_array_interface__`` (CAI) and DLPack, both
directions, plus the few driver calls that ordering across libraries and contexts needs.

* :func:`cai_info` reads a producer's CAI (v2 or v3) into an :class:`ArrayInfo` (pointer, shape,
  byte strides, dtype, read-only flag, producer stream) and checks it.
* :func:`make_cai` writes a v3 CAI dictionary.
* :func:`export_dlpack` wraps a pointer + shape + strides into a DLPack capsule (legacy
  ``dltensor`` or versioned ``dltensor_versioned``) that keeps an owner alive until the consumer
  calls the deleter; :func:`import_dlpack` reads a capsule, marks it used, and returns the array's
  description plus a keep-alive object that calls the producer's deleter when released.

Pure Python (ctypes for DLPack capsules; driver calls through pybridge.cudriver), no CUDA needed:
the DLPack code is tested on CPU with NumPy as the other side.
pybridge.futhark uses :func:`cai_info` for ``from_cuda`` and :func:`restore_current_context` after
creating a cuda-backend context; pybridge.cuda uses all of it.

Stream values follow the CAI v3 / DLPack conventions for CUDA: None = no synchronisation needed
(CAI) or legacy default stream (DLPack ``stream=None``), 1 = legacy default stream, 2 = per-thread
default stream, any other int = a CUstream handle; 0 is disallowed (ambiguous).
"""

from __future__ import annotations

import ctypes
import operator
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import cudriver
from .ordering import LEGACY as LEGACY_STREAM

if TYPE_CHECKING:
    from .futhark.gpustream import FutharkStream

__all__ = [
    "ArrayInfo",
    "DLPackOwner",
    "KDLCPU",
    "KDLCUDA",
    "KDLCUDAHOST",
    "KDLCUDAMANAGED",
    "c_contiguous_strides",
    "copy_to_host",
    "cai_info",
    "export_dlpack",
    "import_dlpack",
    "is_c_contiguous",
    "make_cai",
    "plain_cai",
    "plain_cai_of",
    "futhark_cai",
    "futhark_dlpack",
    "futhark_dlpack_device",
    "futhark_view_of",
    "current_context",
    "restore_current_context",
    "stream_synchronize",
    "torch_plain",
    "wait_for_producer",
]

# DLPack device types used here.
KDLCPU = 1
KDLCUDA = 2
KDLCUDAHOST = 3
KDLCUDAMANAGED = 13

# CAI stream values with a fixed meaning.
LEGACY_DEFAULT_STREAM = 1
PER_THREAD_DEFAULT_STREAM = 2
# Pointers are 64-bit addresses: anything outside [0, 2**64) cannot be packed for a launch.
_ADDRESS_LIMIT = 2**64


@dataclass(frozen=True)
class ArrayInfo:
    """What a kernel launch needs to know about an array, wherever it came from."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in bytes, always filled in (C-contiguous when the producer gave none)
    dtype: np.dtype
    readonly: bool = False
    stream: int | None = None  # producer stream with possibly pending work (CAI convention)
    device_type: int = KDLCUDA
    device_id: int = 0

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def c_contiguous(self) -> bool:
        return is_c_contiguous(self.shape, self.strides, self.dtype.itemsize)


def c_contiguous_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides: list[int] = []
    step = itemsize
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def is_c_contiguous(shape: Sequence[int], strides: Sequence[int] | None, itemsize: int) -> bool:
    """True when the elements are dense in row-major order (axes of extent 1 may have any stride)."""
    if strides is None:
        return True
    if any(int(d) == 0 for d in shape):
        return True  # nothing to address
    expected = itemsize
    for d, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if int(d) != 1 and int(s) != expected:
            return False
        expected *= int(d)
    return True


def _dtype_from_typestr(typestr: str) -> np.dtype:
    try:
        dtype = np.dtype(typestr)
    except TypeError as e:
        raise TypeError(f"unsupported __cuda_array_interface__ typestr {typestr!r}") from e
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian):
        raise TypeError(f"big-endian data ({typestr!r}) cannot be used on a GPU")
    return dtype.newbyteorder("=") if dtype.byteorder not in ("|", "=") else dtype


def cai_info(obj: Any, cai: Mapping[str, Any] | None = None) -> ArrayInfo | None:
    """Read ``obj.__cuda_array_interface__`` (or ``cai``); None when ``obj`` has none.

    Raises TypeError/ValueError for a malformed or unsupported interface (a mask, stream 0,
    big-endian data).
    """
    if cai is None:
        try:
            cai = obj.__cuda_array_interface__
        except AttributeError:
            return None
    if not isinstance(cai, Mapping):
        raise TypeError(f"__cuda_array_interface__ of {type(obj).__name__} is not a dict")
    try:
        # operator.index: a float extent or pointer is an error, not silently truncated.
        shape = tuple(operator.index(d) for d in cai["shape"])
    except (KeyError, TypeError) as e:
        raise TypeError(f"__cuda_array_interface__ of {type(obj).__name__}: shape must be a tuple of ints: {e!r}") from e
    try:
        typestr = cai["typestr"]
        ptr, readonly = cai["data"]
        version = int(cai.get("version", 0))
    except (KeyError, TypeError, ValueError) as e:
        raise TypeError(f"malformed __cuda_array_interface__ from {type(obj).__name__}: {e!r}") from e
    if any(d < 0 for d in shape):
        raise ValueError(f"__cuda_array_interface__ of {type(obj).__name__}: negative extent in shape {shape}")
    if ptr is not None:
        try:
            ptr = operator.index(ptr)
        except TypeError:
            raise TypeError(
                f"__cuda_array_interface__ of {type(obj).__name__}: the data pointer must be an int, "
                f"got {type(ptr).__name__} {ptr!r}"
            ) from None
        if not 0 <= ptr < _ADDRESS_LIMIT:
            raise ValueError(f"__cuda_array_interface__ of {type(obj).__name__}: data pointer {ptr} is not an address")
    if cai.get("mask") is not None:
        raise TypeError(f"masked arrays ({type(obj).__name__} with a CAI mask) are not supported")
    dtype = _dtype_from_typestr(typestr)
    strides_raw = cai.get("strides")
    if strides_raw is None:
        strides = c_contiguous_strides(shape, dtype.itemsize)
    else:
        strides = tuple(int(s) for s in strides_raw)
        if len(strides) != len(shape):
            raise ValueError(f"__cuda_array_interface__ of {type(obj).__name__}: strides and shape differ in length")
    stream = cai.get("stream") if version >= 3 else None  # v2 and older carry none: the producer has synchronised
    if stream is not None:
        stream = int(stream)
        if stream == 0:
            raise ValueError(
                f"__cuda_array_interface__ of {type(obj).__name__} has stream 0, which CAI v3 forbids "
                "(ambiguous between the legacy and per-thread default streams)"
            )
    return ArrayInfo(
        ptr=ptr if ptr is not None else 0,
        shape=shape,
        strides=strides,
        dtype=dtype,
        readonly=bool(readonly),
        stream=stream,
    )


def plain_cai(obj: Any, typestr: str) -> tuple[int, bool, tuple[int, ...], int, int | None] | None:
    """(pointer, readonly, shape, element count, producer stream) of a CAI producer in the plain,
    common form: a v3 (or v2, stream None) dict of exact ints with ``typestr``, no strides (C
    order), no mask, a valid stream. None for anything else, which :func:`cai_info` then reads (and explains when wrong):
    the hot paths (kernel launches, ``from_cuda``) take this shortcut, with the same outcome."""
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        return None
    return plain_cai_of(cai, typestr)


def plain_cai_of(cai: Any, typestr: str) -> tuple[int, bool, tuple[int, ...], int, int | None] | None:
    """:func:`plain_cai` of an interface dictionary already read."""
    if type(cai) is not dict:
        return None
    get = cai.get
    version = get("version")
    if get("typestr") != typestr or get("strides") is not None or get("mask") is not None:
        return None
    if version == 3:
        stream = get("stream")
    elif version == 2:  # PyTorch's: no stream field, the producer has synchronised (as cai_info)
        stream = None
    else:
        return None
    shape, data = get("shape"), get("data")
    if type(shape) is not tuple or type(data) is not tuple or len(data) != 2:
        return None
    ptr, readonly = data
    if type(ptr) is not int or type(readonly) is not bool or not 0 <= ptr < _ADDRESS_LIMIT:
        return None
    if stream is not None and (type(stream) is not int or stream == 0):
        return None
    size = 1
    for d in shape:
        if type(d) is not int or d < 0:
            return None
        size *= d
    if ptr == 0 and size != 0:
        return None
    return ptr, readonly, shape, size, stream


def make_cai(
    ptr: int,
    shape: Sequence[int],
    dtype: np.dtype,
    *,
    strides: Sequence[int] | None = None,
    readonly: bool = False,
    stream: int | None = None,
) -> dict[str, Any]:
    """A CAI v3 dictionary. ``strides`` None (or C-contiguous) is written as None; stream 0 is rejected."""
    if stream == 0:
        raise ValueError("CAI v3 forbids stream 0; use 1 for the legacy default stream")
    dtype = np.dtype(dtype)
    shape_t = tuple(int(d) for d in shape)
    strides_t = None
    if strides is not None and not is_c_contiguous(shape_t, strides, dtype.itemsize):
        strides_t = tuple(int(s) for s in strides)
    return {
        "shape": shape_t,
        "typestr": dtype.str,
        "data": (int(ptr), bool(readonly)),
        "version": 3,
        "strides": strides_t,
        "stream": stream,
    }


# ------------------------------------------------------------------------------------- DLPack ABI


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_FLAG_READ_ONLY = 1 << 0

_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BOOL = 0, 1, 2, 6

# Module-level constants: a capsule keeps a pointer to its name, which must outlive it.
_NAME_LEGACY = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_NAME_USED_LEGACY = b"used_dltensor"
_NAME_USED_VERSIONED = b"used_dltensor_versioned"

_api = ctypes.pythonapi
_PyCapsule_New = _api.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_PyCapsule_GetPointer = _api.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_SetName = _api.PyCapsule_SetName
_PyCapsule_SetName.restype = ctypes.c_int
_PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_IsValid = _api.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
# Variants taking the capsule as a raw pointer, for its destructor: it runs while the capsule is
# being freed and must not create new references to it.
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)


def _dl_dtype(dtype: np.dtype) -> _DLDataType:
    code = {"i": _KDL_INT, "u": _KDL_UINT, "f": _KDL_FLOAT, "b": _KDL_BOOL}.get(dtype.kind)
    if code is None:
        raise BufferError(f"dtype {dtype} has no DLPack equivalent here")
    return _DLDataType(code, dtype.itemsize * 8, 1)


def _np_dtype(dt: _DLDataType) -> np.dtype:
    if dt.lanes != 1:
        raise BufferError(f"DLPack vector types (lanes={dt.lanes}) are not supported")
    bits = int(dt.bits)
    if dt.code == _KDL_BOOL and bits == 8:
        return np.dtype(np.bool_)
    kind = {_KDL_INT: "i", _KDL_UINT: "u", _KDL_FLOAT: "f"}.get(int(dt.code))
    if kind is None or bits % 8:
        raise BufferError(f"unsupported DLPack dtype (code {dt.code}, bits {bits})")
    return np.dtype(f"{kind}{bits // 8}")


# Export side: what a capsule points at stays here until its deleter runs.
_exports: dict[int, tuple[Any, ...]] = {}
_exports_lock = threading.Lock()


def _release_export(address: int) -> None:
    with _exports_lock:
        _exports.pop(address, None)


@_Deleter
def _managed_deleter(address: int | None) -> None:
    # Called by the consumer (any thread; ctypes takes the GIL) when it is done with the tensor.
    if address:
        _release_export(int(address))


_MANAGED_DELETER_PTR = ctypes.cast(_managed_deleter, ctypes.c_void_p).value

_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_CapsuleDestructor
def _capsule_destructor(capsule: int | None) -> None:
    # A capsule never consumed still owns its tensor; a consumed one was renamed "used_..." and
    # its tensor belongs to the consumer, who calls the deleter.
    if not capsule:
        return
    for name in (_NAME_LEGACY, _NAME_VERSIONED):
        if _raw_is_valid(capsule, name):
            address = _raw_get_pointer(capsule, name)
            if address:
                _release_export(int(address))
            return


_CAPSULE_DESTRUCTOR_PTR = ctypes.cast(_capsule_destructor, ctypes.c_void_p).value


def _dlpack_template(
    ptr: int, shape: Sequence[int], dtype: np.dtype, strides: Sequence[int] | None, device_type: int,
    device_id: int, versioned: bool, readonly: bool,
) -> tuple[Any, bytes, Any, Any, bytes]:
    """(struct class, its bytes, shape array, strides array, capsule name) of one export."""
    dtype = np.dtype(dtype)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*[int(d) for d in shape])
    if strides is None:
        strides = c_contiguous_strides(shape, dtype.itemsize)
    elem_strides = []
    for s in strides:
        if int(s) % dtype.itemsize:
            raise BufferError(f"stride {s} is not a multiple of the item size {dtype.itemsize}")
        elem_strides.append(int(s) // dtype.itemsize)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*elem_strides)
    tensor = _DLTensor(
        ctypes.c_void_p(int(ptr)),
        _DLDevice(device_type, device_id),
        ndim,
        _dl_dtype(dtype),
        ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)),
        ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)),
        0,
    )
    managed: _DLManagedTensor | _DLManagedTensorVersioned
    if versioned:
        managed = _DLManagedTensorVersioned(
            _DLPackVersion(1, 0), None, _MANAGED_DELETER_PTR, _FLAG_READ_ONLY if readonly else 0, tensor
        )
        name = _NAME_VERSIONED
    else:
        managed = _DLManagedTensor(tensor, None, _MANAGED_DELETER_PTR)
        name = _NAME_LEGACY
    return type(managed), bytes(managed), shape_arr, strides_arr, name


# Exports of the same array repeat: the managed-tensor bytes are built once per description (the
# shape and strides arrays they point to stay alive in the entry and in every export made from it).
_templates: dict[tuple[Any, ...], tuple[Any, bytes, Any, Any, bytes]] = {}


def export_dlpack(
    ptr: int,
    shape: Sequence[int],
    dtype: np.dtype,
    *,
    strides: Sequence[int] | None = None,
    device_type: int = KDLCUDA,
    device_id: int = 0,
    owner: Any = None,
    versioned: bool = False,
    readonly: bool = False,
) -> Any:
    """A DLPack capsule for memory at ``ptr``; ``owner`` stays alive until the consumer's deleter runs.

    ``strides`` are in bytes (as in NumPy and CAI) and must be multiples of the item size; None
    means C-contiguous. ``versioned`` gives a DLPack 1.0 ``dltensor_versioned`` capsule (which
    carries the read-only flag), else a legacy ``dltensor`` one.
    """
    key = (int(ptr), tuple(shape), dtype, None if strides is None else tuple(strides), device_type, device_id,
           versioned, readonly)
    return _export_keyed(key, owner)


_compiled: Any = None  # pybridge.futhark._callpath (False without it), looked up at the first export
_dl_codes: dict[Any, tuple[int, int]] = {}  # dtype (or its typestr) -> (DLPack type code, bits)


def _compiled_path() -> Any:
    """pybridge.futhark._callpath where the compiled call path is in use, else False; looked up
    at the first export (pybridge.futhark imports this module), when it is also given what its
    ``ArrayBase.__dlpack__`` reads."""
    global _compiled
    if _compiled is None:
        from .futhark.callpath import compiled

        if compiled is not None:
            compiled.configure_dlpack(_futhark_exports, futhark_dlpack)
        _compiled = compiled or False
    return _compiled


def _export_keyed(key: tuple[Any, ...], owner: Any) -> Any:
    """:func:`export_dlpack` for a key of exact types (int pointer, tuples, ...): callers that have
    them already (Futhark handles) skip the normalisation. C-ordered exports are made by the
    compiled call path where it is in use (the same capsule, built in C)."""
    if _compiled_path() and key[3] is None:
        code = _dl_codes.get(key[2])
        if code is None:
            dt = _dl_dtype(np.dtype(key[2]))  # BufferError for a dtype DLPack lacks
            code = _dl_codes[key[2]] = (int(dt.code), int(dt.bits))
        return _compiled.dlpack_capsule(key[0], key[1], code[0], code[1], key[4], key[5], key[6], key[7], owner)
    entry = _templates.get(key)
    if entry is None:
        entry = _dlpack_template(key[0], key[1], np.dtype(key[2]), key[3], *key[4:])
        if len(_templates) >= 512:
            _templates.clear()
        _templates[key] = entry
    cls, raw, shape_arr, strides_arr, name = entry
    managed = cls.from_buffer_copy(raw)
    address = ctypes.addressof(managed)
    with _exports_lock:
        _exports[address] = (managed, shape_arr, strides_arr, owner)
    try:
        return _PyCapsule_New(address, name, _CAPSULE_DESTRUCTOR_PTR)
    except BaseException:
        _release_export(address)
        raise


def exports_alive() -> int:
    """Exported tensors not yet released by their consumer (for leak tests)."""
    with _exports_lock:
        alive = len(_exports)
    return alive + (_compiled.dlpack_exports_alive() if _compiled else 0)


class DLPackOwner:
    """Keeps an imported DLPack tensor alive; calls the producer's deleter when released."""

    def __init__(self, address: int, deleter: int | None, producer: Any = None) -> None:
        self._address = address
        self._deleter = deleter
        self.producer = producer  # the object __dlpack__ was called on

    def release(self) -> None:
        deleter, self._deleter = self._deleter, None
        if deleter:
            _Deleter(deleter)(self._address)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass


def import_dlpack(capsule: Any, producer: Any = None) -> tuple[ArrayInfo, DLPackOwner]:
    """Consume a DLPack capsule (legacy or versioned): its array description and keep-alive owner.

    The capsule is renamed ``used_...`` as the protocol requires, so its own destructor no longer
    frees the tensor; the returned owner calls the producer's deleter when it is released.
    """
    if _PyCapsule_IsValid(capsule, _NAME_VERSIONED):
        address = _PyCapsule_GetPointer(capsule, _NAME_VERSIONED)
        mv = _DLManagedTensorVersioned.from_address(address)
        if mv.version.major != 1:
            raise BufferError(f"unsupported DLPack major version {mv.version.major}")
        tensor = mv.dl_tensor
        readonly = bool(mv.flags & _FLAG_READ_ONLY)
        deleter = mv.deleter
        used = _NAME_USED_VERSIONED
    elif _PyCapsule_IsValid(capsule, _NAME_LEGACY):
        address = _PyCapsule_GetPointer(capsule, _NAME_LEGACY)
        ml = _DLManagedTensor.from_address(address)
        tensor = ml.dl_tensor
        readonly = False
        deleter = ml.deleter
        used = _NAME_USED_LEGACY
    else:
        raise BufferError("not a DLPack capsule (or one that was already consumed)")
    dtype = _np_dtype(tensor.dtype)
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    if tensor.strides:
        strides = tuple(int(tensor.strides[i]) * dtype.itemsize for i in range(ndim))
    else:
        strides = c_contiguous_strides(shape, dtype.itemsize)
    ptr = int(tensor.data or 0) + int(tensor.byte_offset)
    info = ArrayInfo(
        ptr=ptr,
        shape=shape,
        strides=strides,
        dtype=dtype,
        readonly=readonly,
        stream=None,
        device_type=int(tensor.device.device_type),
        device_id=int(tensor.device.device_id),
    )
    if _PyCapsule_SetName(capsule, used) != 0:
        raise BufferError("could not mark the DLPack capsule as used")
    return info, DLPackOwner(int(address), int(deleter) if deleter else None, producer)


def wait_for_producer(info: ArrayInfo) -> None:
    """Block until the producer's stream (CAI v3 ``stream``) has finished; no-op for None."""
    if info.stream is not None:
        stream_synchronize(info.stream)


def stream_synchronize(stream: int) -> None:
    """cuStreamSynchronize on a CAI stream value (1 legacy, 2 per-thread, else a CUstream)."""
    rc = cudriver.stream_synchronize(stream)
    if rc != 0:
        raise RuntimeError(f"cuStreamSynchronize({stream:#x}) failed with CUDA error {rc}")


def copy_to_host(info: ArrayInfo) -> np.ndarray:
    """A NumPy copy of the device array ``info`` describes (after its producer stream is done).

    Copies the bytes the array spans with cuMemcpyDtoH, then applies the strides on the host."""
    if any(s < 0 for s in info.strides):
        raise ValueError("copy_to_host: negative strides are not supported")
    if info.size == 0:
        return np.empty(info.shape, info.dtype)
    wait_for_producer(info)
    span = sum((d - 1) * s for d, s in zip(info.shape, info.strides)) + info.dtype.itemsize
    raw = np.empty(span, np.uint8)
    rc = cudriver.memcpy_dtoh(raw.ctypes.data, info.ptr, span)
    if rc != 0:
        raise RuntimeError(f"cuMemcpyDtoH of {span} bytes from {info.ptr:#x} failed with CUDA error {rc}")
    return np.array(np.ndarray(info.shape, info.dtype, buffer=raw, strides=info.strides))


def current_context() -> int:
    """The CUDA context current on this thread (0 for none)."""
    return cudriver.current_context()


def restore_current_context(previous: int) -> None:
    """Make ``previous`` current again (0: leave no context current).

    Futhark's cuda backend leaves its own context current after creating it; cudart-based
    libraries (PyTorch, CuPy, the host launchers) would then run in Futhark's context instead of
    the device's primary one. Futhark pushes its context around each API call, so it needs none."""
    if cudriver.current_context() != previous:
        cudriver.set_current(previous)  # its code unchecked, as before: a best-effort restore


# ------------------------------------------------------------------ Futhark cuda handles <-> CUDA

# Per exported handle, what cannot change while it lives: (pointer, shape, typestr, device, stream).
# Keyed by id() with a weak reference that drops the entry when the handle dies (no id reuse).
# The third item: the export in the form _callpath.ArrayBase.__dlpack__ reads (None without the
# compiled path, or for a dtype DLPack lacks): see _c_export.
_futhark_exports: dict[int, tuple[Any, tuple[int, tuple[int, ...], str, int, int | None], Any]] = {}


def _pointer_device(ptr: int) -> int:
    try:
        device = cudriver.pointer_device(ptr)
    except OSError:  # no CUDA driver
        return 0
    return 0 if device is None else device


def _futhark_export(handle: Any, dlpack: bool = False) -> tuple[int, tuple[int, ...], str, int, int | None]:
    """(pointer, shape, typestr, device, stream) of an array handle, for export.

    ``stream`` is Futhark's CUDA stream, on which the value may still be being computed: a consumer
    orders after it on the device (the CAI's ``stream``; ``__dlpack__`` makes the consumer's stream
    wait for it). It is None when the data is complete: a library without pybridge's stream
    accessors, or a context with work that may still fail (a kernel's bounds check), is synced
    instead, so that an error is raised rather than its data handed on. Futhark values are
    immutable (a consuming entry point invalidates the handle), so pointer, shape and stream stay
    as they are while the handle lives: later exports check only that it is still valid.
    """
    key = id(handle)
    entry = _futhark_exports.get(key)
    if entry is not None and entry[0]() is handle:  # exported before
        state = entry[1]
        if state[3] < 0 and not dlpack:
            raise AttributeError(f"__cuda_array_interface__ needs the cuda backend, not {handle.library.backend}")
        if handle._status is not None or handle._ctx.closed:
            handle.ptr  # raises InvalidHandleError: freed, consumed or closed  # noqa: B018
        return state
    backend = handle.library.backend
    if backend != "cuda" and not (dlpack and backend in _HOST_BACKENDS):
        what = "DLPack export needs the cuda, c or multicore backend" if dlpack else \
            "__cuda_array_interface__ needs the cuda backend"
        raise AttributeError(f"{what}, not {backend}")
    handle.ptr  # InvalidHandleError once freed, consumed or closed  # noqa: B018
    ptr = handle.data_pointer()
    from .futhark.gpustream import futhark_stream  # here: pybridge.futhark imports this module

    stream = None
    fs = futhark_stream(handle.library) if backend == "cuda" else None
    with handle._ctx.lock:
        if fs is not None and not fs.may_fail():
            stream = fs.stream
        else:
            handle._ctx.sync()
    device = (_pointer_device(ptr) if ptr else 0) if backend == "cuda" else -1  # -1: host memory
    state = (ptr, handle.shape, handle.dtype.str, device, stream)
    _futhark_exports[key] = (weakref.ref(handle, lambda _r, k=key: _futhark_exports.pop(k, None)), state,
                             _c_export(handle, state))
    return state


def _c_export(handle: Any, state: tuple[int, tuple[int, ...], str, int, int | None]) -> Any:
    """What ``_callpath.ArrayBase.__dlpack__`` needs to export ``handle`` again without this
    module: (pointer, shape, DLPack type code, bits, device type, device id, Futhark's stream or
    None, (cuEventRecord, cuStreamWaitEvent, event, Futhark's stream) addresses for the ordering
    or None). None where the compiled path is not in use or cannot order as futhark_dlpack does."""
    if not _compiled_path():
        return None
    ptr, shape, typestr, device, stream = state
    try:
        dt = _dl_dtype(np.dtype(typestr))
    except BufferError:  # futhark_dlpack raises it, every time
        return None
    order = None
    if stream is not None:
        fs = handle._ctx._gpu_stream
        in_c = getattr(fs.slot, "_in_c", None) if fs is not None else None
        if in_c is None:
            return None
        order = (in_c[1], in_c[2], fs.slot.ev, fs.stream)
    where = (KDLCPU, 0) if device < 0 else (KDLCUDA, device)
    return (ptr, shape, int(dt.code), int(dt.bits), where[0], where[1], stream, order)


def futhark_cai(handle: Any) -> dict[str, Any]:
    """``ArrayHandle.__cuda_array_interface__`` (v3; ``stream``: see :func:`_futhark_export`)."""
    ptr, shape, typestr, _, stream = _futhark_export(handle)
    return {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": None, "version": 3, "stream": stream}


# Futhark backends whose arrays live in host memory (DLPack device kDLCPU).
_HOST_BACKENDS = frozenset({"c", "multicore", "ispc"})


def futhark_dlpack_device(handle: Any) -> tuple[int, int]:
    device = _futhark_export(handle, dlpack=True)[3]
    return (KDLCPU, 0) if device < 0 else (KDLCUDA, device)


def futhark_dlpack(handle: Any, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
    """``ArrayHandle.__dlpack__``: a capsule over Futhark's memory that keeps the handle alive
    (device memory on cuda; host memory on the c / multicore backends, so ``np.from_dlpack(h)`` is
    a zero-copy view there). Freeing the handle explicitly while a consumer still uses the memory
    is the caller's error, as for the CAI.

    Ordering (DLPack's rule): the consumer's ``stream`` (None: the legacy default stream) waits on
    the device for Futhark's stream; -1 asks for no ordering; 0 is refused (ambiguous)."""
    if copy:
        raise BufferError("Futhark handles export without a copy (copy=True was asked)")
    if stream == 0:
        raise ValueError("DLPack stream 0 is ambiguous; use 1 (legacy) or 2 (per-thread default)")
    ptr, shape, typestr, device, producer = _futhark_export(handle, dlpack=True)
    where = (KDLCPU, 0) if device < 0 else (KDLCUDA, device)
    if dl_device is not None and tuple(dl_device) != where:
        raise BufferError(f"this Futhark array lives on {where}, not {tuple(dl_device)}")
    if producer is not None and stream != -1:
        consumer = LEGACY_STREAM if stream is None else operator.index(stream)
        # The FutharkStream that _futhark_export found (gpustream.futhark_stream keeps it on the
        # context): read, not looked up through an import, which costs a µs per call.
        fs = handle._ctx._gpu_stream
        assert fs is not None  # a stream was exported: the library has the accessors
        fs.signal(consumer)
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    # export_dlpack's key, built from values of exact types (the export state's)
    return _export_keyed((ptr, shape, typestr, None, where[0], where[1], versioned, False), handle)


UNREAD = object()  # futhark_view_of's cai: not read yet


def futhark_view_of(obj: Any, dtype: np.dtype, rank: int, into: FutharkStream | None = None,
                    cai: Any = UNREAD) -> tuple[int, tuple[int, ...], bool]:
    """(pointer, shape, plain) for ``ArrayKind.from_cuda``: a C-contiguous CAI array of ``dtype``,
    ordered after its producer: Futhark's stream (``into``) waits on the device for the producer's
    stream, or without ``into`` the host waits for it. ``plain``: the shape has ``rank``
    non-negative exact ints (the :func:`plain_cai` form). ``cai``: the interface, already read
    (by ``_callpath.FromCuda``, after the PyTorch test), else read here."""
    if cai is UNREAD:
        # torch_plain's own first test, made here: anything else goes on without two calls
        view = None if type(obj).__module__ != "torch" else _torch_view(obj, dtype, rank)
        if view is not None:
            _order_after(_torch_stream(obj), into)  # PyTorch's CAI (v2) names no stream, and PyTorch does not sync
            return view[0], view[1], True
        try:
            cai = obj.__cuda_array_interface__  # read once: some producers (PyTorch) build it in Python
        except AttributeError:
            raise TypeError(f"from_cuda: {type(obj).__name__} has no __cuda_array_interface__") from None
    compiled = _compiled if _compiled is not None else _compiled_path()
    fast = (compiled.plain_cai_of if compiled else plain_cai_of)(cai, dtype.str)
    if fast is not None and len(fast[2]) == rank:
        if fast[4] is not None or cai.get("version") == 2:  # else: the producer says the data is ready
            _order_after_producer(obj, cai, fast[4], into)
        return fast[0], fast[2], True
    info = cai_info(obj, cai)
    if info.dtype != dtype:
        raise TypeError(f"from_cuda: expected dtype {dtype}, got {info.dtype}")
    if not info.c_contiguous:
        raise ValueError("from_cuda: the array must be C-contiguous")
    _order_after_producer(obj, cai, info.stream, into)
    return info.ptr, info.shape, False


def _order_after_producer(obj: Any, cai: Any, stream: int | None, into: FutharkStream | None) -> None:
    if stream is None and cai.get("version") == 2:
        stream = _torch_stream(obj)  # PyTorch's CAI (v2) names no stream, and PyTorch does not sync
    _order_after(stream, into)


def _order_after(stream: int | None, into: FutharkStream | None) -> None:
    if stream is None:
        return  # CAI v3: the producer says the data is ready
    if into is not None:
        into.wait_for(stream)
    else:
        stream_synchronize(stream)


_torch_dtypes: dict[Any, np.dtype] = {}


def torch_plain(t: Any) -> tuple[int, tuple[int, ...], np.dtype] | None:
    """(pointer, shape, dtype) of a plain PyTorch CUDA tensor (an exact ``torch.Tensor`` or
    ``Parameter``: contiguous, no grad, not sparse, no lazy conjugate or negation, a NumPy dtype),
    read directly: what its CAI says (pointer 0 when empty), without the dictionary PyTorch builds
    in Python for it, twice as dear as the rest of an exchange. None for anything else (the CAI
    path decides and explains)."""
    if type(t).__module__ != "torch" or type(t).__name__ not in ("Tensor", "Parameter"):
        return None
    if not _torch_dtypes:
        import torch

        for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"):
            _torch_dtypes[getattr(torch, name)] = np.dtype(name)
    dtype = _torch_dtypes.get(t.dtype)
    if dtype is None or not t.is_cuda or t.requires_grad or t.is_sparse:
        return None
    if not t.is_contiguous() or t.is_conj() or t.is_neg():
        return None
    shape = tuple(t.shape)
    return (t.data_ptr() if t.numel() else 0), shape, dtype


def _torch_view(t: Any, dtype: np.dtype, rank: int) -> tuple[int, tuple[int, ...]] | None:
    """(pointer, shape) of a :func:`torch_plain` tensor of ``dtype`` and ``rank``, else None."""
    plain = torch_plain(t)
    if plain is None or plain[2] != dtype or len(plain[1]) != rank:
        return None
    return plain[0], plain[1]


def _torch_stream(obj: Any) -> int | None:
    """The current stream of a PyTorch CUDA tensor's device (1 for the legacy default), else None."""
    if not type(obj).__module__.startswith("torch"):
        return None
    torch, raw = _torch_streams or _torch_stream_functions()
    index = obj.device.index  # read once: each read makes a torch.device
    if index is None:
        index = torch.cuda.current_device()
    handle = raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream
    return int(handle) or LEGACY_STREAM


_torch_streams: tuple[Any, Any] | None = None


def _torch_stream_functions() -> tuple[Any, Any]:
    """(torch, its raw current-stream getter or None), looked up once: an import statement per
    exchange costs more than the read it serves."""
    global _torch_streams
    import torch  # the tensor's own module: already imported

    # what Triton uses: no Stream object made
    _torch_streams = (torch, getattr(torch._C, "_cuda_getCurrentRawStream", None))
    return _torch_streams
