"""Entry points as Python callables with real signatures.

Per call: convert each argument (handles pass through, NumPy is copied into temporaries that are
freed after the call), call the C function, raise on a nonzero code with Futhark's message, mark
consumed handles invalid, and wrap results (arrays/opaques as handles, scalars as NumPy scalars).
Calls are asynchronous on GPU backends; only scalar results force a sync, because the C API says
they may not be read before one.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from .manifest import EntryPoint as EntryInfo
from .types import PRIMITIVES, scalar_converter
from .errors import InvalidHandleError
from .names import name_lookup, python_names, resolve_keys
from .values import Value, prim_from_c

if TYPE_CHECKING:
    from .library import Library


def _annotation(type_name: str, unique: bool) -> str:
    return ("*" if unique else "") + type_name


class EntryPoint:
    """A callable Futhark entry point. ``inspect.signature`` and ``help()`` show Futhark's types."""

    def __init__(self, library: "Library", info: EntryInfo):
        self.library = library
        self.entry = info
        self.name = info.name
        self.__name__ = info.name
        self.__qualname__ = info.name
        self._fn = library.fn(info.cfun)
        self._codec = library.codec
        self._prim_inputs = [PRIMITIVES.get(p.type) for p in info.inputs]
        self._scalar_out = any(o.type in PRIMITIVES for o in info.outputs)
        self._n = len(info.inputs)
        # Precomputed per parameter/result: the hot path does no lookups and no imports.
        self._convs = [
            scalar_converter(prim, f"{info.name}: parameter {p.name!r}") if prim is not None else None
            for p, prim in zip(info.inputs, self._prim_inputs)
        ]
        self._all_prim = all(c is not None for c in self._convs)
        out_prims = [PRIMITIVES.get(o.type) for o in info.outputs]
        self._fast_out = all(p is not None for p in out_prims)
        self._out_ctypes = [f"{p.ctype} *" for p in out_prims if p is not None]
        self._out_prims = out_prims
        self._plain_out = len(out_prims) == 1 and out_prims[0] is not None and out_prims[0].name != "f16"
        self._state = library.context._state
        self._sync = library.lib.futhark_context_sync
        self._new = library.ffi.new
        # Python spellings of the parameter names (names.python_names: `as` -> `as_`, `arr'` -> `arr_1`,
        # `_` -> `_<position>`); keyword calls also take the exact Futhark name where it is unique.
        self._pynames = python_names([p.name for p in info.inputs])
        self._kw_lookup = name_lookup([p.name for p in info.inputs])
        params = [
            inspect.Parameter(py, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_annotation(p.type, p.unique))
            for py, p in zip(self._pynames, info.inputs)
        ]
        outs = [_annotation(o.type, o.unique) for o in info.outputs]
        ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        self.__signature__ = inspect.Signature(params, return_annotation=ret)
        consumed = [p.name for p in info.inputs if p.unique]
        self.__doc__ = (
            f"Futhark entry point {info.name}{self.__signature__}\n\n"
            f"C function: {info.cfun}; backend: {library.backend}.\n"
            + (f"Consumes {', '.join(consumed)}: handles passed there are invalid afterwards; "
               "NumPy arrays are copied in, so user data is never changed.\n" if consumed else "")
            + "".join(f"Parameter {py} is Futhark's {p.name!r}.\n" for py, p in zip(self._pynames, info.inputs) if py != p.name)
            + (f"\n{info.doc}\n" if info.doc else "")
        )

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        n = len(self.entry.inputs)
        if not kwargs and len(args) == n:
            return args
        try:
            kwargs = resolve_keys(kwargs, self._kw_lookup, self._pynames, self.name)
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}{self.__signature__}: {e}") from None
        return tuple(bound.arguments[py] for py in self._pynames)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._all_prim and self._fast_out and not kwargs and len(args) == self._n:
            return self._call_scalars(args)
        return self._call_general(self._bind(args, kwargs))

    def _call_scalars(self, args: tuple[Any, ...]) -> Any:
        """Scalars in, scalars out: no temporaries, no handles. The sync is required: the C API
        forbids reading a scalar result before one (futhark-ffi skips it, which is wrong on GPUs)."""
        state = self._state
        if not state.open:
            raise InvalidHandleError("the Futhark context is closed")
        ctx = state.ctx
        c_args = [conv(v) for conv, v in zip(self._convs, args)]
        cells = [self._new(t) for t in self._out_ctypes]
        rc = self._fn(ctx, *cells, *c_args)
        if rc != 0:
            raise self.library.context.error(rc, self.entry.cfun)
        rc = self._sync(ctx)
        if rc != 0:
            raise self.library.context.error(rc, "futhark_context_sync")
        if len(cells) == 1:
            return self._out_prims[0].scalar_type(cells[0][0]) if self._plain_out else prim_from_c(self._out_prims[0], cells[0][0])  # type: ignore[union-attr,arg-type]
        return tuple(prim_from_c(p, c[0]) for p, c in zip(self._out_prims, cells))  # type: ignore[arg-type]

    def _call_general(self, values: tuple[Any, ...]) -> Any:
        lib = self.library
        ctx = lib.context
        codec = self._codec
        info = self.entry
        with codec.call_scope() as scope:
            c_args = []
            for p, conv, v in zip(info.inputs, self._convs, values):
                if conv is not None:
                    c_args.append(conv(v))
                else:
                    c_args.append(codec.to_c(p.type, v, f"{self.name}: parameter {p.name!r}", scope, p.unique))
            # Two handles to one value in consuming position would be consumed twice.
            if any(p.unique for p in info.inputs):
                seen = [id(v) for p, v in zip(info.inputs, values) if isinstance(v, Value)]
                if len(seen) != len(set(seen)):
                    raise ValueError(f"{self.name}: a consumed handle may not also be passed as another argument")
            cells = [codec.out_cell(o.type) for o in info.outputs]
            rc = self._fn(ctx.ptr, *cells, *c_args)
            for p, v in zip(info.inputs, values):
                if p.unique and isinstance(v, Value):
                    v._mark_consumed(f"entry point {self.name!r} (parameter {p.name!r})")
            if rc != 0:
                raise ctx.error(rc, info.cfun)
        if self._scalar_out:
            ctx.sync()
        results = tuple(codec.from_cell(o.type, c) for o, c in zip(info.outputs, cells))
        return results[0] if len(results) == 1 else results

    def __repr__(self) -> str:
        return f"<Futhark entry point {self.name}{self.__signature__}>"
