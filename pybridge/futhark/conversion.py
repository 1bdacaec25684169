"""Conversions between Python/NumPy values and the C arguments and results of the Futhark API.

Rules (for users: docs/futhark.md and docs/comparison.md):
- a handle of the parameter's type from the same context is passed as is, never copied;
- a NumPy array must have the element dtype and rank exactly (TypeError otherwise); a non-contiguous
  one is copied into C order; nested lists/tuples are converted with ``np.asarray(x, dtype)`` and
  rejected if that changes a value (``kinds.ArrayKind.coerce``);
- scalars: see ``types.scalar_to_numpy`` (integers range-checked, no bool for numbers);
- a record parameter also takes a mapping of its fields, a tuple parameter a Python tuple, a sum
  parameter a ``(variant, payload)`` pair.

Results go the other way: ``Codec.from_cell`` wraps them as handles or NumPy scalars, and
``to_numpy`` (``pybridge.convert.to_numpy``, re-exported) turns handles into plain data through
their ``.numpy()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..convert import to_numpy  # the package's one converter: handles through their .numpy()
from . import aliases
from .cdef import struct_name
from .errors import InvalidHandleError, naming
from .handles import ArrayHandle, OpaqueHandle, Value
from .kinds import ArrayKind
from .types import PRIMITIVES, Primitive, scalar_to_numpy

if TYPE_CHECKING:
    from .protocols import LibraryLike


def prim_from_c(prim: Primitive, value: Any) -> np.generic:
    """A C scalar as a NumPy scalar (f16 travels as its 16 bits)."""
    if prim.name == "f16":
        return np.uint16(value).view(np.float16)
    return prim.scalar_type(value)


def prim_to_c(prim: Primitive, value: Any, what: str) -> Any:
    """A Python/NumPy scalar as the C argument of ``prim``, checked by ``types.scalar_to_numpy``."""
    v = scalar_to_numpy(prim, value, what)
    if prim.name == "f16":
        return int(v.view(np.uint16))
    return v.item()


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

    def __init__(self, library: "LibraryLike"):
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
            value._live_ptr(what)  # raises for a freed or consumed handle, naming the parameter
            return value
        if isinstance(kind, ArrayKind):
            h: Value = kind._new_from(kind.coerce(value, what))
        else:
            try:  # the kind's errors name the type and field; naming() adds the parameter
                h = self._opaque(kind, type_name, value, what)
            except (TypeError, ValueError, OverflowError, InvalidHandleError) as e:
                raise naming(e, what) from None
        scope.temps.append(h)
        return h

    @staticmethod
    def _opaque(kind: Any, type_name: str, value: Any, what: str) -> Value:
        """A temporary of opaque ``kind`` from (variant, payload), a dict of columns or fields, or a tuple."""
        if kind.info.sum is not None and isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
            return kind.construct(value[0], *value[1])  # (variant, payload)
        if kind.info.record_array is not None and isinstance(value, Mapping):
            return kind.zip(**value)  # columns by field name
        if kind.info.record is not None and kind.info.record.new:
            if isinstance(value, Mapping):
                return kind.new(**value)
            if isinstance(value, tuple):
                return kind.new(*value)
            raise TypeError(f"{what}: expected {type_name} (a handle, or a {'tuple' if kind.kind == 'tuple' else 'dict of fields'}), got {type(value).__name__}")
        raise TypeError(f"{what}: expected a handle of opaque type {type_name}, got {type(value).__name__}")

    def out_cell(self, type_name: str) -> Any:
        prim = PRIMITIVES.get(type_name)
        if prim is not None:
            return self.ffi.new(f"{prim.ctype} *")
        return self.ffi.new(f"{struct_name(self.library.manifest.types[type_name].ctype)} **")

    def shell(self, type_name: str) -> Any:
        """An empty handle object for a result of ``type_name`` (None for a primitive), made before
        the call so that ``take`` after it involves no allocation that a Ctrl-C could cut short."""
        if type_name in PRIMITIVES:
            return None
        return object.__new__(ArrayHandle if isinstance(self.library.types[type_name], ArrayKind) else OpaqueHandle)

    def take(self, type_name: str, shell: Any, cell: Any) -> Any:
        """The result in ``cell``: a primitive as a NumPy scalar, else ``shell`` made to own it
        (registered last: until then, ``id(shell) in`` the context's registry is False)."""
        if shell is None:
            return prim_from_c(PRIMITIVES[type_name], cell[0])
        type(shell).__init__(shell, self.library, self.library.types[type_name], cell[0])
        return shell

    def from_cell(self, type_name: str, cell: Any) -> Any:
        prim = PRIMITIVES.get(type_name)
        if prim is not None:
            return prim_from_c(prim, cell[0])
        kind = self.library.types[type_name]
        if isinstance(kind, ArrayKind):
            return ArrayHandle(self.library, kind, cell[0])
        return OpaqueHandle(self.library, kind, cell[0])


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


__all__ = ["Codec", "copy_value", "link_results", "prim_from_c", "prim_to_c", "to_numpy"]
