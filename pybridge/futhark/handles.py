"""Handles: Python objects that each own one reference to a Futhark value (``ArrayHandle`` for
arrays of primitives, ``OpaqueHandle`` for records, tuples, sums, arrays of records and fully
opaque values; ``Value`` is their base).

A handle owns one reference (the C API reference-counts values) and frees it once: on ``free()``,
at the end of a ``with`` block, when garbage-collected, or when its context closes.

This module sits below the per-type objects (kinds.py) and the conversions (conversion.py): it
reaches them only through the handle's library (``library.codec``, ``library.fn``) and its kind
object, never by import. Pickling is registered by library.py (``copyreg``), which can load a
library again; nothing here reaches back up.
"""

from __future__ import annotations

from itertools import starmap
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..interop import futhark_cai, futhark_dlpack, futhark_dlpack_device
from . import aliases
from .callpath import compiled
from .context import Context
from .errors import FutharkError, InvalidHandleError, ProgramError, naming

if TYPE_CHECKING:
    from .protocols import LibraryLike


class _PythonValue:
    """The storage and lifetime methods of a handle in pure Python: the fallback of the compiled
    ``_callpath.Value`` (_callpath.c mirrors these methods; callpath.py says which is in use)."""

    __slots__ = ("_ctx", "_ptr", "_status", "_free_fn", "_keep", "_aliases", "library", "__weakref__")

    @property
    def ptr(self) -> Any:
        """The C pointer; raises InvalidHandleError after free/consume/close."""
        if self._status is not None:
            raise InvalidHandleError(f"{self._describe()} was {self._status}")  # type: ignore[attr-defined]
        if self._ctx.closed:
            raise InvalidHandleError(f"{self._describe()} belongs to a closed Futhark context")  # type: ignore[attr-defined]
        return self._ptr

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
            key = id(self)
            # From here to the free no call runs, so a KeyboardInterrupt (raised only at a call's
            # end, RELIABILITY.md "Ctrl-C") finds the value either untouched or freed and unregistered.
            # Only a registered value is freed: the registry says which handle owns it.
            self._status = status
            g = self._aliases
            if g is not None:
                g.live -= 1  # no longer a live member of its alias group (aliases.py)
            values = state.values
            try:
                if state.open and key in values:
                    del values[key]
                    rc = self._free_fn(state.ctx, self._ptr)
                    if rc != 0:
                        raise self._ctx.error(rc, "free")
            finally:
                self._keep = None  # after the free: the owner outlives the value; dropping it may run Python

    def _mark_consumed(self, by: str) -> None:
        # A consumed value may only be freed (docs/c-api.rst, "Entry points").
        self._release(f"consumed by {by}")

    def _register(self) -> None:
        """Enter this value in its context's registry (the last step of making a handle: the
        registry says which handle owns a value)."""
        state, key = self._ctx._state, id(self)
        if key in state.values:  # left by a handle whose __del__ an interrupt skipped (free_orphan)
            state.free_orphan(key)
        state.values[key] = (self._free_fn, self._ptr)

    def __del__(self) -> None:
        try:
            if self._status is None:
                self._release("freed")  # touches no C once the context is closed
        except Exception:
            pass
        except BaseException:
            # A Ctrl-C surfacing at _release's start left the value untouched: free it now (the
            # signal is handled), then let Python report the interrupt as ignored, as it does for
            # any finaliser. One surfacing at this method's own start is beyond reach (RELIABILITY.md).
            try:
                if self._status is None:
                    self._release("freed")
            except Exception:
                pass
            raise


class _PythonArray(_PythonValue):
    __slots__ = ("atype", "_shape")

    # DLPack export (interop.futhark_dlpack, bound as the method itself; _callpath.ArrayBase has
    # its common case in C).
    __dlpack__ = futhark_dlpack


class _PythonOpaque(_PythonValue):
    __slots__ = ("otype",)


if compiled is not None:
    _ValueBase, _ArrayBase, _OpaqueBase = compiled.Value, compiled.ArrayBase, compiled.OpaqueBase
else:
    _ValueBase, _ArrayBase, _OpaqueBase = _PythonValue, _PythonArray, _PythonOpaque


class Value(_ValueBase):  # type: ignore[misc,valid-type]
    """Base of all handles: one reference to a Futhark value in one context. Its storage and
    ``ptr``, ``free``, ``__del__`` come from ``_callpath.Value`` or ``_PythonValue`` (callpath.py)."""

    __slots__ = ()
    _ctx: Context
    _status: str | None
    _aliases: aliases.AliasGroup | None

    def __init__(self, library: "LibraryLike", ptr: Any, free_fn: Any, keep: Any = None):
        self.library = library
        self._ctx = library.context
        self._ptr = ptr
        self._free_fn = free_fn
        self._status = None  # None while live; else why it is unusable
        self._keep = keep  # an object that must outlive the value (new_raw's owner)
        self._aliases = None  # handles that may share memory (aliases.py)
        self._register()  # last

    def _live_ptr(self, what: str) -> Any:
        """``ptr``, its error naming ``what`` (``"saxpy: parameter 'ys'"``: where it was passed)."""
        try:
            return self.ptr
        except InvalidHandleError as e:
            raise naming(e, what) from None

    @property
    def valid(self) -> bool:
        return self._status is None and not self._ctx.closed

    def _describe(self) -> str:
        return f"Futhark value of type {self.type_name}"

    @property
    def type_name(self) -> str:
        raise NotImplementedError

    def __enter__(self) -> "Value":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def _nonnegative(shape: tuple[int, ...], type_name: str) -> tuple[int, ...]:
    """A shape Futhark reported; a negative dimension is an error, not a shape (a library whose C
    was not hardened by csource.py returned one for ``replicate n`` with ``n < 0``)."""
    if shape and min(shape) < 0:
        raise ProgramError(f"this {type_name} value has the impossible shape {shape} (a negative dimension): "
                           "the program computed a negative size; free it and check the sizes passed")
    return shape


class ArrayHandle(Value, _ArrayBase):  # type: ignore[misc,valid-type]
    """A Futhark array of primitives. Data stays in Futhark (on the GPU for GPU backends)."""

    __slots__ = ()
    atype: Any
    _shape: tuple[int, ...] | None

    def __init__(self, library: "LibraryLike", atype: Any, ptr: Any, keep: Any = None):
        # atype: the kinds.ArrayKind of this array's type (a layer above: not imported here)
        # Value.__init__ spelled out: every array result is built here, and super() costs more
        # than the C call it wraps (`pybridge bench overhead`).
        self.atype = atype
        self._shape: tuple[int, ...] | None = None
        self.library = library
        self._ctx = library.context
        self._ptr = ptr
        self._free_fn = atype.free_fn
        self._status = None
        self._keep = keep
        self._aliases = None
        self._register()  # last

    @property
    def type_name(self) -> str:
        return self.atype.name

    @property
    def dtype(self) -> np.dtype:
        return self.atype.prim.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self._shape
        if shape is not None:
            self.ptr  # a freed handle has no shape, even a cached one
            return shape
        with self._ctx.lock:  # checked under the lock: another thread may free it until then
            p = self.atype.shape_fn(self._ctx.ptr, self.ptr)
            self._shape = shape = _nonnegative(tuple(int(p[i]) for i in range(self.atype.rank)), self.atype.name)
        return shape

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
                ctx.keep_until_sync(out)  # the copy may write into out until the sync (also after a Ctrl-C)
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
        codec, prim = self.library.codec, self.atype.prim.name
        out = codec.out_cell(prim)
        with self._ctx.lock:
            self._ctx.keep_until_sync(out)  # as in numpy()
            rc = self.atype.index_fn(self._ctx.ptr, out, self.ptr, *norm)
            self._ctx.check(rc, self.atype.info.ops["index"])
            self._ctx.sync()
        return codec.from_cell(prim, out)

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
        return futhark_cai(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return futhark_dlpack_device(self)

    def __repr__(self) -> str:
        if self._status is not None:
            return f"<ArrayHandle {self.type_name} {self._status}>"
        return f"<ArrayHandle {self.type_name} shape={self.shape} backend={self.library.backend}>"


class OpaqueHandle(Value, _OpaqueBase):  # type: ignore[misc,valid-type]
    """A Futhark opaque value: record, tuple, sum, array of records, or fully opaque."""

    __slots__ = ()
    otype: Any

    def __init__(self, library: "LibraryLike", otype: Any, ptr: Any):
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
        Fields named like a handle attribute (``free``, ``store``, ``shape``, ``valid``, ``numpy``...) are reached
        only this way or as ``handle["free"]``."""
        i = self.otype.field_lookup.get(name)
        if i is None:
            raise AttributeError(f"{self.type_name} has no field {name!r}; fields: {list(self.field_names)}")
        f = self.otype.fields[i]  # type: ignore[index]
        out = self.library.codec.out_cell(f.type)
        with self._ctx.lock:
            args = (self._ctx.ptr, out, self.ptr)
            (v,) = call_for_results(self.library, self.library.fn(f.project), args, [f.type], [out], f.project)
            return _aliasing(self, v)

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
            args = (self._ctx.ptr, out, self.ptr, *norm)
            (v,) = call_for_results(self.library, self.library.fn(arr.index), args, [arr.elemtype], [out], arr.index)
            return _aliasing(self, v)

    @property
    def shape(self) -> tuple[int, ...]:
        arr = self.otype.info.record_array or self.otype.info.opaque_array
        if arr is None or arr.shape is None:
            raise AttributeError(f"{self.type_name} is not an array")
        with self._ctx.lock:
            p = self.library.fn(arr.shape)(self._ctx.ptr, self.ptr)
            return _nonnegative(tuple(int(p[k]) for k in range(arr.rank)), self.type_name)

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
            args = (self._ctx.ptr, *cells, self.ptr)
            parts = call_for_results(self.library, self.library.fn(v.destruct), args, list(v.payload), cells, v.destruct)
            return tuple(_aliasing(self, x) for x in parts)

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

    def numpy(self) -> Any:
        """The value as plain NumPy/Python data: a record -> dict of fields, a tuple -> tuple, a sum
        -> (variant, payload tuple), an array of records -> dict of column arrays, another opaque
        array (an array of sums) -> nested lists of its elements; components convert the same way
        (arrays -> ndarray). A fully opaque value has no such form: the handle itself is returned."""
        info = self.otype.info
        if info.sum:
            return (self.variant, tuple(_numpy(p) for p in self.payload))
        if info.record_array:
            return {n: _numpy(self.field(n)) for n in self.field_names}
        if info.opaque_array:
            return _elements(self, (), self.shape)
        if info.record:
            if self.is_tuple:
                return tuple(_numpy(self.field(n)) for n in self.field_names)
            return {n: _numpy(self.field(n)) for n in self.field_names}
        self.ptr  # a freed or consumed handle raises, as for every other form
        return self

    def __repr__(self) -> str:
        if self._status is not None:
            return f"<OpaqueHandle {self.type_name} {self._status}>"
        info = self.otype.info
        if info.sum:
            return f"<OpaqueHandle {self.type_name} #{self.variant}>"
        if info.record and self.field_names:
            return f"<OpaqueHandle {self.type_name} fields={list(self.field_names)}>"
        return f"<OpaqueHandle {self.type_name}>"



# Values made by C calls (RELIABILITY.md, "Ctrl-C"). Python checks for signals at the end of every
# call, so a KeyboardInterrupt can surface after a C constructor returned and before its result is
# stored: the new value would be lost, unregistered and never freed. These calls store the result
# from C instead (list.extend over itertools.starmap: no check between the C call's return and
# the append), the handle object exists before the call and takes the value with its __init__,
# which registers it last; after an exception, what no handle registered is freed.


def new_value(library: "LibraryLike", cls: type, kind: Any, fn: Callable[..., Any], args: tuple[Any, ...],
              what: str) -> Value:
    """A ``cls`` handle of the value ``fn(*args)`` returns (NULL: Futhark's error is raised).
    The caller holds the context lock."""
    h = object.__new__(cls)
    got: list[Any] = []
    try:
        got.extend(starmap(fn, (args,)))
        if got[0] == library.ffi.NULL:
            raise library.context.error(None, what)
        h.__init__(library, kind, got[0])
    except BaseException:
        if got:
            _free_untaken(library, got[0] == library.ffi.NULL, [(kind.free_fn, h, got[0])])
        raise
    return h


def call_for_results(library: "LibraryLike", fn: Callable[..., Any], args: tuple[Any, ...], types: list[str],
                     cells: list[Any], what: str) -> list[Any]:
    """The results ``fn(*args)`` writes into ``cells`` (one per type in ``types``: handles, or NumPy
    scalars for primitives); ``fn`` returns an error code. The caller holds the context lock."""
    codec = library.codec
    shells = list(map(codec.shell, types))
    got: list[Any] = []
    try:
        got.extend(starmap(fn, (args,)))
        if got[0] != 0:
            raise library.context.error(got[0], what)
        return list(map(codec.take, types, shells, cells))
    except BaseException:
        if got:
            made = [(library.types[t].free_fn, h, c[0]) for t, h, c in zip(types, shells, cells) if h is not None]
            _free_untaken(library, got[0] != 0, made)
        raise


def _free_untaken(library: "LibraryLike", failed: bool, made: list[tuple[Any, Any, Any]]) -> None:
    """After an exception once the C call ran: free each made value (free function, shell, pointer)
    its shell did not register; after a failure, drop Futhark's message if it was not read yet."""
    ctx = library.context
    if failed:
        ctx.drop_error()
        return
    state = ctx._state
    for free, h, ptr in made:
        if id(h) not in state.values:
            free(state.ctx, ptr)


def _aliasing(parent: Value, child: Any) -> Any:
    """``child`` (a projection of ``parent``) shares its parent's memory."""
    if isinstance(child, Value):
        aliases.join([parent, child])
    return child


def _elements(array: "OpaqueHandle", prefix: tuple[int, ...], shape: tuple[int, ...]) -> list[Any]:
    """The elements of an opaque array under ``prefix`` as nested lists. A function of the module,
    not a closure calling itself: that closure is a reference cycle holding ``array`` and the
    element handles until the cyclic GC runs, so their Futhark values stayed allocated for a
    nondeterministic time (found by the lifecycle machine on tests/programs/composed.fut)."""
    if len(shape) == 1:
        return [_numpy(array[prefix + (i,)]) for i in range(shape[0])]
    return [_elements(array, prefix + (i,), shape[1:]) for i in range(shape[0])]


def _numpy(x: Any) -> Any:
    """A component of an opaque value as plain data (primitives come back as NumPy scalars)."""
    return x.numpy() if isinstance(x, Value) else x


__all__ = ["ArrayHandle", "OpaqueHandle", "Value"]
