"""Futhark values in Python: array handles, opaque handles (records, tuples, sums, arrays of records),
and the conversions between Python/NumPy values and the C arguments of the API.

A handle owns one reference to a Futhark value (the C API reference-counts values) and frees it once:
on ``free()``, at the end of a ``with`` block, when garbage-collected, or when its context closes.
Conversion rules (documented in the README):
- a handle of the parameter's type from the same context is passed as is, never copied;
- a NumPy array must have the element dtype and rank exactly (TypeError otherwise); a non-contiguous
  one is copied into C order; nested lists/tuples are converted with ``np.asarray(x, dtype)`` and
  rejected if that changes a value;
- scalars: see ``types.scalar_to_numpy`` (integers range-checked, no bool for numbers);
- a record parameter also takes a mapping of its fields, a tuple parameter a Python tuple.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from . import aliases, binformat
from .cdef import struct_name
from .errors import FutharkError, InvalidHandleError, ValueFormatError
from .manifest import ArrayType, OpaqueType
from .names import name_lookup, python_names, resolve_keys
from .types import PRIMITIVES, Primitive, scalar_to_numpy

if TYPE_CHECKING:
    from .context import Context
    from .library import Library


# ---------------------------------------------------------------- handles


class Value:
    """Base of all handles: one reference to a Futhark value in one context."""

    __slots__ = ("_ctx", "_ptr", "_status", "_free_fn", "_keep", "_aliases", "library", "__weakref__")

    def __init__(self, library: "Library", ptr: Any, free_fn: Any, keep: Any = None):
        self.library = library
        self._ctx: Context = library.context
        self._ptr = ptr
        self._free_fn = free_fn
        self._status: str | None = None  # None while live; else why it is unusable
        self._keep = keep  # an object that must outlive the value (new_raw's owner)
        self._ctx._state.values[id(self)] = (free_fn, ptr)  # Context.register, inlined: every result
        self._aliases: aliases.AliasGroup | None = None  # handles that may share memory (aliases.py)

    @property
    def ptr(self) -> Any:
        """The C pointer; raises InvalidHandleError after free/consume/close."""
        if self._status is not None:
            raise InvalidHandleError(f"{self._describe()} was {self._status}")
        if self._ctx.closed:
            raise InvalidHandleError(f"{self._describe()} belongs to a closed Futhark context")
        return self._ptr

    @property
    def valid(self) -> bool:
        return self._status is None and not self._ctx.closed

    def _describe(self) -> str:
        return f"Futhark value of type {self.type_name}"

    @property
    def type_name(self) -> str:
        raise NotImplementedError

    def free(self) -> None:
        """Release this reference now. Idempotent."""
        self._release("freed")

    def _release(self, status: str) -> None:
        state = self._ctx._state  # the context's shared state: its lock, open flag and registry
        if not state.open:  # close() freed the C value; never wait for a lock at interpreter exit
            self._status = self._status or status
            self._keep = None
            return
        with state.lock:  # a call passing this handle in another thread finishes first, or sees it gone
            if self._status is not None:
                return
            self._status = status
            self._keep = None
            if state.open:
                state.values.pop(id(self), None)
                rc = self._free_fn(state.ctx, self._ptr)
                if rc != 0:
                    raise self._ctx.error(rc, "free")

    def _mark_consumed(self, by: str) -> None:
        # A consumed value may only be freed (docs/c-api.rst, "Entry points").
        self._release(f"consumed by {by}")

    def __del__(self) -> None:
        try:
            if self._status is None:
                self._release("freed")  # touches no C once the context is closed
        except Exception:
            pass

    def __enter__(self) -> "Value":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


class ArrayHandle(Value):
    """A Futhark array of primitives. Data stays in Futhark (on the GPU for GPU backends)."""

    __slots__ = ("atype", "_shape")

    def __init__(self, library: "Library", atype: "ArrayKind", ptr: Any, keep: Any = None):
        # Value.__init__ spelled out: every array result is built here, and super() costs more
        # than the C call it wraps (`pybridge bench overhead`).
        self.atype = atype
        self._shape: tuple[int, ...] | None = None
        self.library = library
        ctx = self._ctx = library.context
        self._ptr = ptr
        free_fn = self._free_fn = atype.free_fn
        self._status = None
        self._keep = keep
        self._aliases = None
        ctx._state.values[id(self)] = (free_fn, ptr)

    @property
    def type_name(self) -> str:
        return self.atype.name

    @property
    def dtype(self) -> np.dtype:
        return self.atype.prim.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        ptr = self.ptr  # a freed handle has no shape, even a cached one
        if self._shape is None:
            with self._ctx.lock:
                p = self.atype.shape_fn(self._ctx.ptr, ptr)
                self._shape = tuple(int(p[i]) for i in range(self.atype.rank))
        return self._shape

    @property
    def ndim(self) -> int:
        return self.atype.rank

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def numpy(self) -> np.ndarray:
        """Copy the values into a new NumPy array (synchronises)."""
        ctx = self._ctx
        with ctx.lock:
            ptr = self.ptr  # raises for a freed/consumed handle, even when no copy is needed
            out = np.empty(self.shape, dtype=self.dtype)
            if out.size:
                rc = self.atype.values_fn(ctx.ptr, ptr, self.atype.buffer(out))
                ctx.check(rc, self.atype.info.ops["values"])
                ctx.sync()
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:  # NumPy 2 protocol: refuse rather than copy when asked not to
            raise ValueError(
                f"{self._describe()}: its data lives in Futhark, so NumPy cannot view it without a copy; "
                "use np.asarray(handle) or handle.numpy()"
            )
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getitem__(self, index: int | tuple[int, ...]) -> np.generic:
        """One element, by a full integer index (negative counts from the end)."""
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) != self.ndim or not all(isinstance(i, (int, np.integer)) for i in idx):
            raise TypeError(
                f"{self.type_name} handles support indexing by {self.ndim} integer(s); "
                "use .numpy() for slices"
            )
        norm = []
        for i, (k, n) in enumerate(zip(idx, self.shape)):
            k = int(k)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {i} with size {n}")
            norm.append(k + n if k < 0 else k)
        out = self.atype.ffi.new(f"{self.atype.prim.ctype} *")
        with self._ctx.lock:
            rc = self.atype.index_fn(self._ctx.ptr, out, self.ptr, *norm)
            self._ctx.check(rc, self.atype.info.ops["index"])
            self._ctx.sync()
        return prim_from_c(self.atype.prim, out[0])

    def data_pointer(self) -> int:
        """The raw storage address (``values_raw``); on cuda a device (or managed) pointer."""
        fn = self.atype.values_raw_fn
        if fn is None:
            raise TypeError(f"{self.type_name}: the library has no values_raw operation")
        with self._ctx.lock:
            raw = fn(self._ctx.ptr, self.ptr)
        return int(raw) if isinstance(raw, int) else int(self.atype.ffi.cast("uintptr_t", raw))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CAI v3 over Futhark's device memory, ``stream`` None: Futhark's context is synced before
        the first export of a value (later exports reuse what cannot change: see interop)."""
        from ..interop import futhark_cai

        return futhark_cai(self)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """DLPack export (cuda backend), no copy, data ready (synced as for the CAI)."""
        from ..interop import futhark_dlpack

        return futhark_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        from ..interop import futhark_dlpack_device

        return futhark_dlpack_device(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_array, (self.library.key, self.type_name, self.numpy()))

    def __repr__(self) -> str:
        if self._status is not None:
            return f"<ArrayHandle {self.type_name} {self._status}>"
        return f"<ArrayHandle {self.type_name} shape={self.shape} backend={self.library.backend}>"


class OpaqueHandle(Value):
    """A Futhark opaque value: record, tuple, sum, array of records, or fully opaque."""

    __slots__ = ("otype",)

    def __init__(self, library: "Library", otype: "OpaqueKind", ptr: Any):
        self.otype = otype
        super().__init__(library, ptr, otype.free_fn)

    @property
    def type_name(self) -> str:
        return self.otype.name

    # records and tuples
    @property
    def field_names(self) -> tuple[str, ...]:
        fields = self.otype.fields
        return tuple(f.name for f in fields) if fields else ()

    def field(self, name: str) -> Any:
        """Project one field (a record field, a tuple component, or a record array's column), by its
        exact Futhark name (``"as"``, ``"0"``, ``"x'"``) or its Python spelling (``as_``, ``_0``, ``x_1``).
        Fields named like a handle attribute (``free``, ``store``, ``shape``, ``valid``...) are reached
        only this way or as ``handle["free"]``."""
        i = self.otype.field_lookup.get(name)
        if i is None:
            raise AttributeError(f"{self.type_name} has no field {name!r}; fields: {list(self.field_names)}")
        f = self.otype.fields[i]  # type: ignore[index]
        out = self.library.codec.out_cell(f.type)
        with self._ctx.lock:
            rc = self.library.fn(f.project)(self._ctx.ptr, out, self.ptr)
            self._ctx.check(rc, f.project)
            return _aliasing(self, self.library.codec.from_cell(f.type, out))

    def __getattr__(self, name: str) -> Any:
        # Only reached when no attribute of that name exists; dunders are never fields.
        if name.startswith("__") or name == "otype":
            raise AttributeError(name)
        if name not in self.otype.field_lookup:
            raise AttributeError(f"{type(self).__name__} of {self.type_name} has no attribute or field {name!r}")
        return self.field(name)

    def __dir__(self) -> list[str]:
        return list(super().__dir__()) + list(self.otype.python_fields)

    def to_dict(self) -> dict[str, Any]:
        return {n: self.field(n) for n in self.field_names}

    @property
    def is_tuple(self) -> bool:
        """Fields exactly 0..n-1 with n >= 2: Futhark's tuples (``{0: i32}`` is a record, not a 1-tuple)."""
        return self.otype.info.record is not None and self.otype.kind == "tuple"

    def __len__(self) -> int:
        self.ptr  # raises for a freed or consumed handle
        if self.otype.info.record_array or self.otype.info.opaque_array:
            return self.shape[0]
        if self.is_tuple:
            return len(self.field_names)
        raise TypeError(f"{self.type_name} has no length")

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, i: int | str | tuple[int, ...]) -> Any:
        """A tuple component (``h[0]``), a field by name (``h["as"]``), or an element of an array of
        records (``h[3]``)."""
        if isinstance(i, str):
            try:
                return self.field(i)
            except AttributeError as e:
                raise KeyError(str(e)) from None
        info = self.otype.info
        if self.is_tuple and isinstance(i, (int, np.integer)):
            n = len(self.field_names)
            if not -n <= int(i) < n:
                raise IndexError(f"tuple index {i} out of range for {self.type_name}")
            return self.field(str(int(i) % n))
        arr = info.record_array or info.opaque_array
        if arr is None or arr.index is None:
            raise TypeError(f"{self.type_name} is not indexable")
        idx = i if isinstance(i, tuple) else (i,)
        shape = self.shape
        if len(idx) != arr.rank:
            raise TypeError(f"{self.type_name} needs {arr.rank} indices")
        norm = []
        for ax, (k, n) in enumerate(zip(idx, shape)):
            k = int(k)
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for axis {ax} with size {n}")
            norm.append(k + n if k < 0 else k)
        out = self.library.codec.out_cell(arr.elemtype)
        with self._ctx.lock:
            rc = self.library.fn(arr.index)(self._ctx.ptr, out, self.ptr, *norm)
            self._ctx.check(rc, arr.index)
            return _aliasing(self, self.library.codec.from_cell(arr.elemtype, out))

    @property
    def shape(self) -> tuple[int, ...]:
        arr = self.otype.info.record_array or self.otype.info.opaque_array
        if arr is None or arr.shape is None:
            raise AttributeError(f"{self.type_name} is not an array")
        with self._ctx.lock:
            p = self.library.fn(arr.shape)(self._ctx.ptr, self.ptr)
            return tuple(int(p[k]) for k in range(arr.rank))

    # sums
    @property
    def variant(self) -> str:
        s = self.otype.info.sum
        if s is None:
            raise AttributeError(f"{self.type_name} is not a sum type")
        with self._ctx.lock:
            k = self.library.fn(s.variant)(self._ctx.ptr, self.ptr)
        if not 0 <= k < len(s.variants):
            raise FutharkError(f"{self.type_name}: Futhark reports variant number {k}, but the type has {len(s.variants)}")
        return s.variants[k].name

    @property
    def payload(self) -> tuple[Any, ...]:
        s = self.otype.info.sum
        if s is None:
            raise AttributeError(f"{self.type_name} is not a sum type")
        v = next(v for v in s.variants if v.name == self.variant)
        cells = [self.library.codec.out_cell(t) for t in v.payload]
        with self._ctx.lock:
            rc = self.library.fn(v.destruct)(self._ctx.ptr, *cells, self.ptr)
            self._ctx.check(rc, v.destruct)
            return tuple(_aliasing(self, self.library.codec.from_cell(t, c)) for t, c in zip(v.payload, cells))

    # serialisation
    def store(self) -> bytes:
        """Serialise with ``futhark_store_opaque_*`` (restore with ``lib.types[name].restore``)."""
        ffi = self.library.ffi
        p = ffi.new("void **")
        n = ffi.new("size_t *")
        with self._ctx.lock:
            rc = self.library.fn(self.otype.info.ops["store"])(self._ctx.ptr, self.ptr, p, n)
            self._ctx.check(rc, self.otype.info.ops["store"])
            self._ctx.sync()
        try:
            data = bytes(ffi.buffer(p[0], n[0]))
        finally:
            self.library.lib.free(p[0])
        self.otype.learn_layout(data)
        return data

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_opaque, (self.library.key, self.type_name, self.store()))

    def __repr__(self) -> str:
        if self._status is not None:
            return f"<OpaqueHandle {self.type_name} {self._status}>"
        info = self.otype.info
        if info.sum:
            return f"<OpaqueHandle {self.type_name} #{self.variant}>"
        if info.record and self.field_names:
            return f"<OpaqueHandle {self.type_name} fields={list(self.field_names)}>"
        return f"<OpaqueHandle {self.type_name}>"


def _restore_array(key: str, type_name: str, data: np.ndarray) -> ArrayHandle:
    from .library import library_for_key

    return library_for_key(key).types[type_name].new(data)


def _restore_opaque(key: str, type_name: str, data: bytes) -> OpaqueHandle:
    from .library import library_for_key

    return library_for_key(key).types[type_name].restore(data)


# ---------------------------------------------------------------- type objects (lib.types[name])


def prim_from_c(prim: Primitive, value: Any) -> np.generic:
    if prim.name == "f16":
        return np.uint16(value).view(np.float16)
    return prim.scalar_type(value)


def prim_to_c(prim: Primitive, value: Any, what: str) -> Any:
    v = scalar_to_numpy(prim, value, what)
    if prim.name == "f16":
        return int(v.view(np.uint16))
    return v.item()


class ArrayKind:
    """``lib.types['[]f32']``: make arrays from NumPy or device pointers."""

    def __init__(self, library: "Library", info: ArrayType):
        self.library, self.info, self.name = library, info, info.name
        self.ffi = library.ffi
        self.prim = PRIMITIVES[info.elemtype]
        self.rank = info.rank
        fn = library.fn
        ops = info.ops
        self.new_fn = fn(ops["new"])
        self.free_fn = fn(ops["free"])
        self.values_fn = fn(ops["values"])
        self.shape_fn = fn(ops["shape"])
        self.index_fn = fn(ops["index"]) if "index" in ops else None
        self.values_raw_fn = fn(ops["values_raw"]) if "values_raw" in ops else None
        self.new_raw_fn = fn(ops["new_raw"]) if "new_raw" in ops else None
        self._buf_type = f"{self.prim.ctype}[]"

    @property
    def dtype(self) -> np.dtype:
        return self.prim.dtype

    def buffer(self, arr: np.ndarray) -> Any:
        return self.ffi.from_buffer(self._buf_type, arr)

    def coerce(self, value: Any, what: str) -> np.ndarray:
        """A C-contiguous array of exactly this dtype and rank, by the documented rule."""
        dtype = self.prim.dtype
        if isinstance(value, np.ma.MaskedArray):
            if np.ma.is_masked(value):  # Futhark has no mask: the hidden values would be used
                raise ValueError(f"{what}: a masked array with masked elements; Futhark has no mask, so fill them first (value.filled(x))")
            value = value.data
        if isinstance(value, np.ndarray):
            if value.dtype != dtype:
                raise TypeError(
                    f"{what}: expected a NumPy array of dtype {dtype} ({self.name}), got {value.dtype}; "
                    f"convert explicitly with .astype(np.{dtype.name})"
                )
            arr = value
        elif isinstance(value, (list, tuple)):
            try:
                with np.errstate(over="ignore", invalid="ignore"):  # a changed value is refused below
                    arr = np.asarray(value, dtype=dtype)
                back = np.asarray(value)
            except (TypeError, ValueError, OverflowError) as e:
                raise TypeError(f"{what}: cannot convert to {self.name}: {e}") from None
            nan_ok = back.dtype.kind in "fc" and arr.dtype.kind in "fc"  # NaN stays NaN
            if back.shape != arr.shape or (back.size and not np.array_equal(back, arr, equal_nan=nan_ok)):
                raise TypeError(f"{what}: converting this sequence to {self.name} would change values")
        elif hasattr(value, "__array__") and not isinstance(value, Value):
            return self.coerce(np.asarray(value), what)
        else:
            raise TypeError(f"{what}: expected {self.name} (a NumPy array or Futhark handle), got {type(value).__name__}")
        if arr.ndim != self.rank:
            raise TypeError(f"{what}: expected a {self.rank}-d array for {self.name}, got {arr.ndim}-d")
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        if dtype.kind == "b" and arr.size and arr.view(np.uint8).max() > 1:
            # NumPy reads any nonzero byte as True; Futhark's C code assumes 0 or 1.
            arr = arr.view(np.uint8) != 0
        return arr

    def new(self, value: Any) -> ArrayHandle:
        """Copy NumPy data into a new Futhark array."""
        arr = self.coerce(value, f"{self.name}.new")
        return self._new_from(arr)

    def _new_from(self, arr: np.ndarray) -> ArrayHandle:
        lib = self.library
        ctx = lib.context
        with ctx.lock:
            ptr = self.new_fn(ctx.ptr, self.buffer(arr), *arr.shape)
            if ptr == self.ffi.NULL:
                raise ctx.error(None, self.info.ops["new"])
            ctx.keep_until_sync(arr)  # the copy may still be reading arr
            return ArrayHandle(lib, self, ptr)

    def new_raw(self, pointer: int, shape: Sequence[int], owner: Any = None) -> ArrayHandle:
        """Wrap existing storage (a device pointer on cuda) without copying. Futhark never frees
        it, so ``owner`` (the object that owns the memory) is kept alive as long as the handle."""
        if self.new_raw_fn is None:
            raise TypeError(f"{self.name}: the library has no new_raw operation")
        shape = tuple(int(s) for s in shape)
        if len(shape) != self.rank or any(s < 0 for s in shape):
            raise ValueError(f"new_raw: shape must be {self.rank} non-negative ints, got {shape}")
        raw_type = self.library.raw_ctype
        raw = pointer if raw_type == "CUdeviceptr" else self.ffi.cast(raw_type, pointer)
        with self.library.context.lock:
            ptr = self.new_raw_fn(self.library.context.ptr, raw, *shape)
            if ptr == self.ffi.NULL:
                raise self.library.context.error(None, self.info.ops["new_raw"])
            return ArrayHandle(self.library, self, ptr, keep=owner)

    def from_cuda(self, obj: Any) -> ArrayHandle:
        """Zero-copy view of a CUDA array (anything with ``__cuda_array_interface__``)."""
        if self.library.backend != "cuda":
            raise TypeError(f"from_cuda needs a cuda-backend library, this one is {self.library.backend}")
        from ..interop import futhark_view_of

        ptr, shape, plain = futhark_view_of(obj, self.dtype, self.rank)  # checks, waits for the producer
        lib, fn = self.library, self.new_raw_fn
        if not plain or fn is None or lib.raw_ctype != "CUdeviceptr":
            return self.new_raw(ptr, shape, owner=obj)
        # The plain CAI form has the rank and non-negative exact ints new_raw would check for.
        raw = fn(lib.context.ptr, ptr, *shape)
        if raw == self.ffi.NULL:
            raise lib.context.error(None, self.info.ops["new_raw"])
        return ArrayHandle(lib, self, raw, keep=obj)

    def __repr__(self) -> str:
        return f"<ArrayType {self.name}>"


class OpaqueKind:
    """``lib.types['point']``: build records/tuples/sums/arrays of records, restore bytes."""

    def __init__(self, library: "Library", info: OpaqueType):
        self.library, self.info, self.name = library, info, info.name
        self.free_fn = library.fn(info.ops["free"])
        self.fields = info.record.fields if info.record else (info.record_array.fields if info.record_array else None)
        names = [f.name for f in self.fields or ()]
        self.python_fields = python_names(names)  # attribute spellings (names.python_names)
        self.field_lookup = name_lookup(names)  # either spelling -> position
        # (rank, type) of each component in store() bytes, learnt from the first store(): the
        # manifest does not say how Futhark flattens the value.
        self.layout: list[tuple[int, str]] | None = None


    def learn_layout(self, data: bytes) -> None:
        if self.layout is None:
            self.layout = [(c.rank, c.type) for c in binformat.read_values(data, f"{self.name}.store")]


    def _max_components(self, seen: frozenset[str] = frozenset()) -> int:
        """An upper bound on the components of this type's stored form (from the manifest)."""
        i = self.info
        if self.name in seen:
            return 64
        parts: list[str] = []
        if i.record:
            parts += [f.type for f in i.record.fields]
        if i.record_array:
            parts += [f.type for f in i.record_array.fields]
        if i.sum:
            parts += ["i8"] + [t for v in i.sum.variants for t in v.payload]
        if i.opaque_array:
            parts.append(i.opaque_array.elemtype)
        if not parts:
            return 64
        n = 0
        for t in parts:
            kind = self.library.types.get(t)
            n += kind._max_components(seen | {self.name}) if isinstance(kind, OpaqueKind) else 1
        return n

    @property
    def kind(self) -> str:
        i = self.info
        if i.sum:
            return "sum"
        if i.record_array:
            return "record_array"
        if i.opaque_array:
            return "opaque_array"
        if i.record:
            names = [f.name for f in i.record.fields]
            return "tuple" if len(names) >= 2 and sorted(names) == sorted(str(k) for k in range(len(names))) else "record"
        return "opaque"

    def _call_new(self, fn_name: str, cell: Any, c_args: Sequence[Any], handles: Sequence[Any], scope: "_Scope") -> OpaqueHandle:
        """Call a constructor (record new, zip, sum construct) under the context lock, with the
        handles given as fields checked live there (another thread may have freed them). The result
        shares the memory of every handle it was built from (temporaries included)."""
        ctx = self.library.context
        with ctx.lock:
            for h in handles:
                h.ptr  # raises InvalidHandleError for a handle freed since its conversion
            rc = self.library.fn(fn_name)(ctx.ptr, cell, *c_args)
            ctx.check(rc, fn_name)
            out = OpaqueHandle(self.library, self, cell[0])
        aliases.join([out, *(h for h, _ in scope.handles)])  # built from those handles, no copy
        return out

    def _field_args(self, fields: Sequence[Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        names = [f.name for f in fields]
        if args and kwargs:
            raise TypeError(f"{self.name}: give fields either by position or by name")
        if kwargs:  # exact Futhark names or Python spellings
            kwargs = resolve_keys(kwargs, self.field_lookup, names, self.name)
            missing = [n for n in names if n not in kwargs]
            extra = [k for k in kwargs if k not in names]
            if missing or extra:
                raise TypeError(f"{self.name}: fields are {names}; missing {missing}, unexpected {extra}")
            args = [kwargs[n] for n in names]
        if len(args) != len(names):
            raise TypeError(f"{self.name}: expected {len(names)} fields {names}, got {len(args)}")
        return list(args)

    def new(self, *args: Any, **kwargs: Any) -> OpaqueHandle:
        """Build a record (fields by name or position) or a tuple (components by position)."""
        rec = self.info.record
        if rec is None or rec.new is None:
            if self.info.record_array:
                return self.zip(*args, **kwargs)
            raise TypeError(f"{self.name} is not a record or tuple, it cannot be built from fields")
        values = self._field_args(rec.fields, args, kwargs)
        codec = self.library.codec
        with codec.call_scope() as scope:
            c_args = [
                codec.to_c(f.type, v, f"{self.name}.{f.name}", scope) for f, v in zip(rec.fields, values)
            ]
            cell = self.library.ffi.new(f"{struct_name(self.info.ctype)} **")
            return self._call_new(rec.new, cell, c_args, [v for v in values if isinstance(v, Value)], scope)

    def zip(self, *args: Any, **kwargs: Any) -> OpaqueHandle:
        """Build an array of records from one array per field (no copy in Futhark)."""
        ra = self.info.record_array
        if ra is None or ra.zip is None:
            raise TypeError(f"{self.name} is not an array of records")
        values = self._field_args(ra.fields, args, kwargs)
        codec = self.library.codec
        with codec.call_scope() as scope:
            c_args = [codec.to_c(f.type, v, f"{self.name}.{f.name}", scope) for f, v in zip(ra.fields, values)]
            cell = self.library.ffi.new(f"{struct_name(self.info.ctype)} **")
            return self._call_new(ra.zip, cell, c_args, [v for v in values if isinstance(v, Value)], scope)

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.info.sum.variants) if self.info.sum else ()

    def construct(self, variant: str, *payload: Any) -> OpaqueHandle:
        """Build a sum value of the named variant."""
        s = self.info.sum
        if s is None:
            raise TypeError(f"{self.name} is not a sum type")
        try:
            v = next(v for v in s.variants if v.name == variant)
        except StopIteration:
            raise ValueError(f"{self.name} has no variant {variant!r}; variants: {list(self.variants)}") from None
        if len(payload) != len(v.payload):
            raise TypeError(f"{self.name}.{variant} takes {len(v.payload)} values, got {len(payload)}")
        codec = self.library.codec
        with codec.call_scope() as scope:
            c_args = [codec.to_c(t, x, f"{self.name}.{variant}[{i}]", scope) for i, (t, x) in enumerate(zip(v.payload, payload))]
            cell = self.library.ffi.new(f"{struct_name(self.info.ctype)} **")
            return self._call_new(v.construct, cell, c_args, [x for x in payload if isinstance(x, Value)], scope)

    def restore(self, data: bytes) -> OpaqueHandle:
        """Rebuild a value from ``OpaqueHandle.store()`` bytes."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{self.name}.restore: expected bytes, got {type(data).__name__}")
        what = f"{self.name}.restore"
        raw = bytes(data)
        comps = binformat.read_values(raw, what)  # Futhark would read past a truncated buffer
        found = [(c.rank, c.type) for c in comps]
        if self.layout is not None and found != self.layout:
            raise ValueFormatError(f"{what}: the bytes hold components {found}, a {self.name} value has {self.layout}")
        s = self.info.sum
        if s is not None:
            tag = comps[0].scalar(raw) if found[0] == (0, "  i8") else None
            if tag is None or not 0 <= int(tag) < len(s.variants):
                raise ValueFormatError(f"{what}: the variant tag {tag!r} is not one of the {len(s.variants)} variants")
        # Without a learnt layout, zero padding makes any header Futhark expects beyond the
        # components present fail its own check instead of reading past the buffer.
        pad = 0 if self.layout is not None else 16 * self._max_components()
        lib = self.library
        buf = lib.ffi.from_buffer(raw + bytes(pad))
        with lib.context.lock:
            ptr = lib.fn(self.info.ops["restore"])(lib.context.ptr, buf)
            if ptr == lib.ffi.NULL:
                msg = lib.context.last_error()
                raise ValueFormatError(f"{what}: Futhark rejected the bytes (not a {self.name} value){': ' + msg if msg else ''}")
            lib.context.sync()  # restore is asynchronous and reads buf
            return OpaqueHandle(lib, self, ptr)

    def __repr__(self) -> str:
        return f"<OpaqueType {self.name} ({self.kind})>"


# ---------------------------------------------------------------- codec


class _Scope:
    """Temporaries created for one call, freed when the call is done."""

    def __init__(self) -> None:
        self.temps: list[Value] = []
        self.handles: list[tuple[Value, bool]] = []  # (handle passed, consumed?) per non-primitive argument

    def close(self) -> None:
        for t in self.temps:
            t.free()
        self.temps.clear()


class _ScopeCM:
    def __init__(self) -> None:
        self.scope = _Scope()

    def __enter__(self) -> _Scope:
        return self.scope

    def __exit__(self, *exc: object) -> None:
        self.scope.close()


class Codec:
    """Python value <-> C argument, per manifest type name."""

    def __init__(self, library: "Library"):
        self.library = library
        self.ffi = library.ffi

    def call_scope(self) -> _ScopeCM:
        return _ScopeCM()

    def to_c(self, type_name: str, value: Any, what: str, scope: _Scope, unique: bool = False) -> Any:
        prim = PRIMITIVES.get(type_name)
        if prim is not None:
            return prim_to_c(prim, value, what)
        h = self._handle(type_name, value, what, scope)
        if unique and aliases.shared_with_live(h):
            # Consuming h would overwrite memory another live handle reads: consume a copy.
            h = copy_value(h, what)
            scope.temps.append(h)
        scope.handles.append((h, unique))
        return h.ptr

    def _handle(self, type_name: str, value: Any, what: str, scope: _Scope) -> Value:
        """The handle to pass: ``value`` itself, or a temporary (in ``scope``) built from it."""
        kind = self.library.types[type_name]
        if isinstance(value, Value):
            if value.library is not self.library:
                raise TypeError(f"{what}: the value belongs to another Futhark library/context")
            if value.type_name != type_name:
                raise TypeError(f"{what}: expected {type_name}, got a handle of {value.type_name}")
            value.ptr  # raises for a freed or consumed handle
            return value
        if isinstance(kind, ArrayKind):
            h: Value = kind._new_from(kind.coerce(value, what))
        elif kind.info.sum is not None and isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            h = kind.construct(value[0], *value[1])  # (variant, payload)
        elif kind.info.record_array is not None and isinstance(value, Mapping):
            h = kind.zip(**value)  # columns by field name
        elif kind.info.record is not None and kind.info.record.new:
            if isinstance(value, Mapping):
                h = kind.new(**value)
            elif isinstance(value, tuple):
                h = kind.new(*value)
            else:
                raise TypeError(f"{what}: expected {type_name} (a handle, or a {'tuple' if kind.kind == 'tuple' else 'dict of fields'}), got {type(value).__name__}")
        else:
            raise TypeError(f"{what}: expected a handle of opaque type {type_name}, got {type(value).__name__}")
        scope.temps.append(h)
        return h

    def out_cell(self, type_name: str) -> Any:
        prim = PRIMITIVES.get(type_name)
        if prim is not None:
            return self.ffi.new(f"{prim.ctype} *")
        return self.ffi.new(f"{struct_name(self.library.manifest.types[type_name].ctype)} **")

    def from_cell(self, type_name: str, cell: Any) -> Any:
        prim = PRIMITIVES.get(type_name)
        if prim is not None:
            return prim_from_c(prim, cell[0])
        kind = self.library.types[type_name]
        if isinstance(kind, ArrayKind):
            return ArrayHandle(self.library, kind, cell[0])
        return OpaqueHandle(self.library, kind, cell[0])


def _aliasing(parent: Value, child: Any) -> Any:
    """``child`` (a projection of ``parent``) shares its parent's memory."""
    if isinstance(child, Value):
        aliases.join([parent, child])
    return child


def copy_value(h: Value, what: str) -> Value:
    """A new value equal to ``h`` that shares no memory with it.

    The C API has no copy operation, so arrays go through host memory (``values`` then ``new``,
    one device-to-host and one host-to-device transfer on GPU backends) and opaques through
    ``store``/``restore`` (the same path pickling takes)."""
    if isinstance(h, ArrayHandle):
        return h.atype._new_from(h.numpy())
    assert isinstance(h, OpaqueHandle)
    ops = h.otype.info.ops
    if "store" not in ops or "restore" not in ops:
        raise ValueError(
            f"{what}: this {h.type_name} value may share memory with another live handle, and the library "
            "offers no store/restore to copy it; free the other handles (or pass a fresh value) first"
        )
    return h.otype.restore(h.store())


def link_results(scope: _Scope, outputs: Sequence[Any], results: Sequence[Any]) -> None:
    """After an entry point call: non-unique results may alias the non-unique arguments (as
    passed, temporaries included) and each other; unique results are fresh (docs/c-api.rst)."""
    outs = [r for o, r in zip(outputs, results) if not o.unique and isinstance(r, Value)]
    if outs:
        aliases.join([*(h for h, consumed in scope.handles if not consumed), *outs])


def to_numpy(value: Any) -> Any:
    """Recursively turn results into plain NumPy/Python data: arrays -> ndarray, records -> dict,
    tuples -> tuple, sums -> (variant, payload), arrays of records -> dict of column arrays, other
    opaque arrays (arrays of sums) -> nested lists of their elements."""
    if isinstance(value, ArrayHandle):
        return value.numpy()
    if isinstance(value, OpaqueHandle):
        info = value.otype.info
        if info.sum:
            return (value.variant, tuple(to_numpy(p) for p in value.payload))
        if info.record_array:
            return {n: to_numpy(value.field(n)) for n in value.field_names}
        if info.opaque_array:  # e.g. an array of sums: nested lists of the elements
            def elements(prefix: tuple[int, ...], shape: tuple[int, ...]) -> list[Any]:
                if len(shape) == 1:
                    return [to_numpy(value[prefix + (i,)]) for i in range(shape[0])]
                return [elements(prefix + (i,), shape[1:]) for i in range(shape[0])]
            return elements((), value.shape)
        if info.record:
            if value.is_tuple:
                return tuple(to_numpy(value.field(n)) for n in value.field_names)
            return {n: to_numpy(value.field(n)) for n in value.field_names}
        return value
    if isinstance(value, tuple):
        return tuple(to_numpy(v) for v in value)
    return value


_ = weakref  # handles are weak-referenceable (Value.__slots__) so registries can hold them weakly
