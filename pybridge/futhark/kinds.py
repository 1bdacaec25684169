"""The per-type objects behind ``lib.types[name]``: ``ArrayKind`` (make arrays from NumPy data or
device pointers) and ``OpaqueKind`` (build records, tuples, sums and arrays of records; restore
stored bytes). Each holds its manifest record as ``.info`` (manifest.ArrayInfo / OpaqueInfo).

Arguments given as plain Python data are converted through the library's codec
(``library.codec``, conversion.py, a layer above), reached as an attribute, not imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
# NumPy 2 imports numpy.ma at the first `np.ma` (coerce's test). Imported here instead: an import
# that Ctrl-C interrupts can leave CPython's import lock held (RELIABILITY.md, "Ctrl-C").
import numpy.ma  # noqa: F401

from .. import interop, ordering
from ..interop import futhark_view_of
from . import aliases, binformat, restorecheck
from .callpath import compiled, plans_compiled
from .cdef import struct_name
from .context import function_address
from .errors import FutharkError, InvalidHandleError, ValueFormatError
from .gpustream import futhark_stream
from .handles import ArrayHandle, OpaqueHandle, Value, call_for_results, new_value
from .manifest import ArrayInfo, OpaqueInfo
from .names import name_lookup, python_names, resolve_keys
from .types import PRIMITIVES

if TYPE_CHECKING:
    from .protocols import LibraryLike


_UNMADE = object()


def _tell_compiled_path(kind: "ArrayKind | OpaqueKind") -> None:
    """Give the compiled path this type's free function by address and its pointer type
    (``_callpath.State._native``): a handle made here from Python (``new``, a projection) is then
    passed to a plan and freed by address, as a plan's result is. Where plans are compiled."""
    lib = kind.library
    if not (plans_compiled() and lib.mode == "api"):
        return
    try:
        free = function_address(lib.ffi, lib.lib, kind.info.ops["free"])
        ctype = lib.ffi.typeof(kind.info.ctype)
    except (AttributeError, lib.ffi.error):  # not reachable by address: the cffi calls serve
        return
    lib.context._state._native(kind.free_fn, free, ctype)


class ArrayKind:
    """``lib.types['[]f32']``: make arrays from NumPy or device pointers."""

    def __init__(self, library: "LibraryLike", info: ArrayInfo):
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
        # new_raw in C (_callpath.RawNew), made at first use; None where the Python code serves
        # (as for call plans: no extension, ABI mode, PYBRIDGE_CALL_PATH=python, python_plans()).
        self._raw_new: Any = _UNMADE if plans_compiled() and library.mode == "api" else None
        self._from_cuda_c: Any = self._raw_new  # from_cuda in C (_callpath.FromCuda), likewise
        _tell_compiled_path(self)

    def _compiled_raw_new(self) -> Any:
        raw_new = self._raw_new
        if raw_new is _UNMADE:
            raw_new = self._raw_new = None
            lib, ops = self.library, self.info.ops
            if self.new_raw_fn is not None and 1 <= self.rank <= compiled.RAW_MAX_RANK:
                try:
                    fn, free = (function_address(lib.ffi, lib.lib, ops[op]) for op in ("new_raw", "free"))
                except (AttributeError, lib.ffi.error):  # not reachable by address: the Python code serves
                    return None
                raw_new = self._raw_new = compiled.RawNew(lib.context._state, lib, self, ArrayHandle, fn,
                                                          self.free_fn, free, self.rank, ops["new_raw"])
        return raw_new

    @property
    def dtype(self) -> np.dtype:
        return self.prim.dtype

    def _pointer(self, address: int) -> Any:
        """A value's pointer object from its address (the compiled call path keeps addresses)."""
        return self.library.ffi.cast(self.info.ctype, address)

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
            ctx.keep_until_sync(arr)  # the copy may still be reading arr (also after a Ctrl-C)
            args = (ctx.ptr, self.buffer(arr), *arr.shape)
            return new_value(lib, ArrayHandle, self, self.new_fn, args, self.info.ops["new"])

    def new_raw(self, pointer: int, shape: Sequence[int], owner: Any = None) -> ArrayHandle:
        """Wrap existing storage (a device pointer on cuda) without copying. Futhark never frees
        it, so ``owner`` (the object that owns the memory) is kept alive as long as the handle."""
        if self.new_raw_fn is None:
            raise TypeError(f"{self.name}: the library has no new_raw operation")
        shape = tuple(int(s) for s in shape)
        if len(shape) != self.rank or any(s < 0 for s in shape):
            raise ValueError(f"new_raw: shape must be {self.rank} non-negative ints, got {shape}")
        raw_new = self._compiled_raw_new() if type(pointer) is int and 0 <= pointer < 1 << 64 else None
        if raw_new is not None:
            return raw_new(pointer, shape, owner)
        raw_type = self.library.raw_ctype
        raw = pointer if raw_type == "CUdeviceptr" else self.ffi.cast(raw_type, pointer)
        with self.library.context.lock:
            return self._raw_handle(raw, shape, owner)

    def _raw_handle(self, raw: Any, shape: Sequence[int], owner: Any) -> ArrayHandle:
        """new_raw's value as a handle keeping ``owner`` alive. The caller holds the context lock."""
        args = (self.library.context.ptr, raw, *shape)
        h = new_value(self.library, ArrayHandle, self, self.new_raw_fn, args, self.info.ops["new_raw"])
        h._keep = owner
        return h

    def from_cuda(self, obj: Any) -> ArrayHandle:
        """Zero-copy view of a CUDA array (anything with ``__cuda_array_interface__``)."""
        fast = self._compiled_from_cuda()
        if fast is None:
            return self._from_cuda(obj)
        # Later calls find the C function on the instance before this method: no Python frame.
        vars(self)["from_cuda"] = fast
        return fast(obj)  # type: ignore[no-any-return]

    def _compiled_from_cuda(self) -> Any:
        """``_callpath.FromCuda`` for this kind (made once), or None where the Python code serves:
        no compiled path, not cuda, no stream accessors (the host syncs then), a library closed."""
        made = self._from_cuda_c
        if made is _UNMADE:
            lib = self.library
            if lib.backend != "cuda" or lib.context.closed:
                return None  # _from_cuda's error, or asked again once it can be made
            made = None
            fs, raw_new = futhark_stream(lib), self._compiled_raw_new()
            driver = ordering._compiled_order() if fs is not None else None
            if raw_new is not None and fs is not None and driver is not None and compiled is not None \
                    and lib.raw_ctype == "CUdeviceptr":
                made = compiled.FromCuda(raw_new, self.dtype, ArrayKind.from_cuda.__get__(self), self._from_cuda,
                                         ordering, interop, fs.stream, driver[1], driver[2])
            self._from_cuda_c = made
        return made

    def _from_cuda(self, obj: Any, cai: Any = interop.UNREAD) -> ArrayHandle:
        """from_cuda in Python: the definition, and what FromCuda calls off its common path (with
        ``cai``, the interface it read, if it read one)."""
        lib = self.library
        if lib.backend != "cuda":
            raise TypeError(f"from_cuda needs a cuda-backend library, this one is {lib.backend}")
        if lib.context.closed:  # before ordering anything on the freed context's stream
            raise InvalidHandleError("the Futhark context is closed")
        # checks, and orders Futhark's stream after the producer's (on the device where it can)
        ptr, shape, plain = futhark_view_of(obj, self.dtype, self.rank, futhark_stream(lib), cai)
        fn = self.new_raw_fn
        if not plain or fn is None or lib.raw_ctype != "CUdeviceptr":
            return self.new_raw(ptr, shape, owner=obj)
        # The plain CAI form has the rank and non-negative exact ints new_raw would check for.
        raw_new = self._compiled_raw_new()
        if raw_new is not None:
            return raw_new(ptr, shape, obj)  # type: ignore[no-any-return]
        with lib.context.lock:
            return self._raw_handle(ptr, shape, obj)

    def __repr__(self) -> str:
        return f"<ArrayKind {self.name}>"


class OpaqueKind:
    """``lib.types['point']``: build records/tuples/sums/arrays of records, restore bytes."""

    def __init__(self, library: "LibraryLike", info: OpaqueInfo):
        self.library, self.info, self.name = library, info, info.name
        self.free_fn = library.fn(info.ops["free"])
        self.fields = info.record.fields if info.record else (info.record_array.fields if info.record_array else None)
        names = [f.name for f in self.fields or ()]
        self.python_fields = python_names(names)  # attribute spellings (names.python_names)
        self.field_lookup = name_lookup(names)  # either spelling -> position
        # (rank, type) of each component in store() bytes, learnt from the first store(): the
        # manifest does not say how Futhark flattens the value.
        self.layout: list[tuple[int, str]] | None = None
        _tell_compiled_path(self)

    _pointer = ArrayKind._pointer


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

    def _call_new(self, fn_name: str, cell: Any, c_args: Sequence[Any], handles: Sequence[Any], scope: Any) -> OpaqueHandle:
        """Call a constructor (record new, zip, sum construct) under the context lock, with the
        handles given as fields checked live there (another thread may have freed them). The result
        shares the memory of every handle it was built from (temporaries included)."""
        ctx = self.library.context
        with ctx.lock:
            for h in handles:
                h.ptr  # raises InvalidHandleError for a handle freed since its conversion
            args = (ctx.ptr, cell, *c_args)
            (out,) = call_for_results(self.library, self.library.fn(fn_name), args, [self.name], [cell], fn_name)
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

    def new(self, /, *args: Any, **kwargs: Any) -> OpaqueHandle:
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

    def zip(self, /, *args: Any, **kwargs: Any) -> OpaqueHandle:
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

    def structure(self) -> tuple[list[tuple[int, str, str]], Any] | None:
        """The stored form's components (rank, type field, path) and tree, derived from the
        manifest (restorecheck.flatten); None where some part has no structure there."""
        if not hasattr(self, "_structure"):
            types = self.library.manifest.types
            try:
                self._structure = restorecheck.flatten(
                    self.name, lambda t: types[t] if t in types and isinstance(self.library.types.get(t), OpaqueKind) else None)
            except (restorecheck.Unknown, KeyError):
                self._structure = None
        return self._structure

    def _check_parts(self, comps: Sequence[binformat.Component], raw: bytes, what: str) -> None:
        """The components agree with each other (restorecheck.py): outer lengths of arrays of
        records and sums, tags in range and bools 0 or 1 wherever an active variant reaches."""
        derived = self.structure()
        core = restorecheck.core_type  # signedness aside: Futhark's core types have none
        if derived is not None and [(r, core(t)) for r, t, _ in derived[0]] == [(c.rank, core(c.type)) for c in comps]:
            paths = [p for _, _, p in derived[0]]
            names = lambda i: f"component {i} ({paths[i]})"  # noqa: E731
            restorecheck.Checker(comps, raw, what, names).check(derived[1], 0, None)
            return
        # No derivable layout: what holds for every value of an array type, and every bool.
        names = lambda i: f"component {i}"  # noqa: E731
        arr = self.info.record_array or self.info.opaque_array
        if arr is not None:
            restorecheck.outer_dims(comps, arr.rank, what, names)
        binformat.read_values(raw, what)  # bools 0 or 1 everywhere, as before

    def restore(self, data: bytes) -> OpaqueHandle:
        """Rebuild a value from ``OpaqueHandle.store()`` bytes."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{self.name}.restore: expected bytes, got {type(data).__name__}")
        what = f"{self.name}.restore"
        raw = bytes(data)
        comps = binformat.read_values(raw, what, bools=False)  # Futhark would read past a truncated buffer
        found = [(c.rank, c.type) for c in comps]
        if self.layout is not None and found != self.layout:
            raise ValueFormatError(f"{what}: the bytes hold components {found}, a {self.name} value has {self.layout}")
        s = self.info.sum
        if s is not None:
            tag = comps[0].scalar(raw) if found[0] == (0, "  i8") else None
            if tag is None or not 0 <= int(tag) < len(s.variants):
                raise ValueFormatError(f"{what}: the variant tag {tag!r} is not one of the {len(s.variants)} variants")
        self._check_parts(comps, raw, what)
        # Without a learnt layout, zero padding makes any header Futhark expects beyond the
        # components present fail its own check instead of reading past the buffer.
        pad = 0 if self.layout is not None else 16 * self._max_components()
        lib = self.library
        buf = lib.ffi.from_buffer(raw + bytes(pad))
        with lib.context.lock:
            lib.context.keep_until_sync(buf)  # restore is asynchronous and reads buf (also after a Ctrl-C)
            try:
                h = new_value(lib, OpaqueHandle, self, lib.fn(self.info.ops["restore"]), (lib.context.ptr, buf), self.info.ops["restore"])
            except FutharkError as e:
                raise ValueFormatError(f"{what}: Futhark rejected the bytes (not a {self.name} value): {e.message}") from None
            lib.context.sync()
            return h

    def __repr__(self) -> str:
        return f"<OpaqueKind {self.name} ({self.kind})>"



__all__ = ["ArrayKind", "OpaqueKind"]
