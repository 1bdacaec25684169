"""Entry points as Python callables with real signatures.

The common call runs through a plan compiled per entry point (callplan.py); everything else takes
the general path here. Per call: convert each argument (handles pass through, NumPy is copied into temporaries that are
freed after the call), call the C function, raise on a nonzero code with Futhark's message, mark
consumed handles invalid, and wrap results (arrays/opaques as handles, scalars as NumPy scalars).
Calls are asynchronous on GPU backends; only scalar results force a sync, because the C API says
they may not be read before one.
"""

from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING, Any, Callable

from .callplan import compile_plan
from .conversion import link_results
from .errors import FutharkError
from .handles import Value
from .manifest import EntryInfo
from .names import name_lookup, python_names, resolve_keys
from .sizes import SizeRules
from .source import EntryDecl, declared_results, size_names, spelled_with_sizes
from .types import PRIMITIVES, scalar_converter

if TYPE_CHECKING:
    from .protocols import LibraryLike


def _size_names(decl: EntryDecl | None) -> tuple[str, ...]:
    """Size names of the header: the ``[n]`` binders in order, then other names the parameter and
    result types use, type by type (``(k: i64) ... : [k]f32`` adds ``k``)."""
    if decl is None:
        return ()
    found: dict[str, None] = dict.fromkeys(decl.size_params)
    for t in [p.type for p in decl.params] + ([decl.result] if decl.result is not None else []):
        found.update(dict.fromkeys(sorted(size_names(t))))
    return tuple(found)


def _non_negative(conv: Callable[[Any], Any], what: str) -> Callable[[Any], Any]:
    """A size parameter's converter: a negative size makes Futhark's C exit the process."""

    def conv_size(v: Any) -> Any:
        c = conv(v)
        if c < 0:
            raise ValueError(f"{what} is a size (the entry's types use it as an array length) and must be >= 0, got {c}")
        return c

    return conv_size


class EntryPoint:
    """A callable Futhark entry point. ``inspect.signature`` and ``help()`` show Futhark's types."""

    def __init__(self, library: "LibraryLike", info: EntryInfo):
        self.library = library
        self.info = info  # the manifest's record (manifest.EntryInfo)
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
        # Python spellings of the parameter names (names.python_names: `as` -> `as_`, `arr'` -> `arr_1`,
        # `_` -> `_<position>`); keyword calls also take the exact Futhark name where it is unique.
        self._pynames = python_names([p.name for p in info.inputs])
        self._kw_lookup = name_lookup([p.name for p in info.inputs])
        # Size parameters (from the .fut beside the library): a negative one would make Futhark's
        # generated C exit the process, so their converters also check >= 0 (sizes.py).
        decl = library.source.entries.get(info.name) if library.source is not None else None
        self._sizes = SizeRules.from_decl(decl)
        self._convs = [
            _non_negative(c, f"{info.name}: parameter {p.name!r}") if c is not None and p.name in self._sizes.size_params else c
            for p, c in zip(info.inputs, self._convs)
        ]
        # Size names from the source header (empty without it); the signature spells array types
        # with them: `saxpy(a: 'f32', xs: '[n]f32', ys: '[n]f32') -> '[n]f32'`.
        self.sizes: tuple[str, ...] = _size_names(decl)
        declared = [decl.param(p.name) if decl is not None else None for p in info.inputs]
        params = [
            inspect.Parameter(py, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                              annotation=spelled_with_sizes(p.type, p.unique, d.type if d is not None else None))
            for py, p, d in zip(self._pynames, info.inputs, declared)
        ]
        outs = [spelled_with_sizes(o.type, o.unique, d) for o, d in zip(info.outputs, declared_results(decl, len(info.outputs)))]
        ret = outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
        self.__signature__ = inspect.Signature(params, return_annotation=ret)
        consumed = [p.name for p in info.inputs if p.unique]
        # The program's doc comment (``-- |`` before the entry) first, as a packaged module's
        # function has it: help() and editors show its first line as the summary.
        doc = info.doc or (library.source.docs.get(info.name) if library.source is not None else None)
        self.__doc__ = (
            (f"{doc.strip()}\n\n" if doc else "")
            + f"Futhark entry point {info.name}{self.__signature__}\n\n"
            f"C function: {info.cfun}; backend: {library.backend}.\n"
            + (f"Consumes {', '.join(consumed)}: handles passed there are invalid afterwards; "
               "NumPy arrays are copied in, so user data is never changed.\n" if consumed else "")
            + "".join(f"Parameter {py} is Futhark's {p.name!r}.\n" for py, p in zip(self._pynames, info.inputs) if py != p.name)
        )
        # Each entry point gets its own class whose __call__ is its compiled plan, so a call is one
        # Python function call (a special method is looked up on the type, not the instance).
        self.__class__ = type("EntryPoint", (EntryPoint,), {"__call__": compile_plan(self), "__module__": __name__})

    @property
    def entry(self) -> EntryInfo:
        """Deprecated: the former name of ``info`` (one name per concept; this one warns)."""
        warnings.warn("EntryPoint.entry is now EntryPoint.info", DeprecationWarning, stacklevel=2)
        return self.info

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        n = len(self.info.inputs)
        if not kwargs and len(args) == n:
            return args
        try:
            kwargs = resolve_keys(kwargs, self._kw_lookup, self._pynames, self.name)
            for k in kwargs:  # before bind(), which would report a missing argument first and hide the typo
                if k not in self._pynames:
                    raise TypeError(f"got an unexpected keyword argument {k!r}")
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.name}{self.__signature__}: {e}") from None
        return tuple(bound.arguments[py] for py in self._pynames)

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        # Replaced per entry point by its compiled call plan (callplan.py); this is its fallback.
        return self._call_general(self._bind(args, kwargs))

    def _convert_scalars(self, args: tuple[Any, ...]) -> None:
        """Run every scalar parameter's converter: raises the error that names the parameter."""
        for conv, v in zip(self._convs, args):
            if conv is not None:
                conv(v)

    def _call_general(self, values: tuple[Any, ...]) -> Any:
        lib = self.library
        ctx = lib.context
        codec = self._codec
        info = self.info
        with codec.call_scope() as scope:
            c_args = []
            for p, conv, v in zip(info.inputs, self._convs, values):
                if conv is not None:
                    c_args.append(conv(v))
                else:
                    c_args.append(codec.to_c(p.type, v, f"{self.name}: parameter {p.name!r}", scope, p.unique))
            handles = [v for v in values if isinstance(v, Value)]
            # Two handles to one value in consuming position would be consumed twice.
            if any(p.unique for p in info.inputs):
                seen = [id(v) for v in handles]
                if len(seen) != len(set(seen)):
                    raise ValueError(f"{self.name}: a consumed handle may not also be passed as another argument")
            cells = [codec.out_cell(o.type) for o in info.outputs]
            shells = [codec.shell(o.type) for o in info.outputs]
            with ctx.lock:  # docs/DESIGN.md, "Threads"
                for p, v in zip(info.inputs, values):  # still live: another thread may have freed or consumed it since conversion
                    if isinstance(v, Value):
                        v._live_ptr(f"{self.name}: parameter {p.name!r}")
                cptr = ctx.ptr  # a property, so out of the try: there, a KeyboardInterrupt before `rc` is set came after the C call
                step, rc = 1, None
                try:
                    rc = self._fn(cptr, *cells, *c_args)
                    step = 2
                    if rc == 0:
                        for o, h, c in zip(info.outputs, shells, cells):
                            if h is not None:
                                codec.take(o.type, h, c)
                    for p, v in zip(info.inputs, values):  # temporaries (copies included): freed by the scope
                        if p.unique and isinstance(v, Value):
                            v._mark_consumed(f"entry point {self.name!r} (parameter {p.name!r})")
                    step = 3
                except BaseException as e:
                    if step == 1 and isinstance(e, (OverflowError, TypeError)):
                        raise  # cffi refused an argument: the call did not run
                    self._settle(rc, cells, shells, values)
                    raise
                if rc != 0:  # the message taken by a C call at once: Futhark keeps the first until taken
                    message = lib.lib.futhark_context_get_error(cptr)
                    raise self._explained(ctx.error_from(rc, message, info.cfun), values)
                if self._scalar_out:
                    ctx.sync()
                results = tuple(codec.take(o.type, h, c) if h is None else h for o, h, c in zip(info.outputs, shells, cells))
                link_results(scope, info.outputs, results)  # results may share the arguments' memory
        return results[0] if len(results) == 1 else results

    def _settle(self, rc: int | None, cells: list[Any], shells: list[Any], values: tuple[Any, ...]) -> None:
        """After an exception (a KeyboardInterrupt from Ctrl-C) cut a call short once the C call
        ran: results no shell took are freed, consumed arguments marked consumed (RELIABILITY.md,
        "Ctrl-C"). ``rc`` None: the return code was lost; a failed call left Futhark's message."""
        lib = self.library
        state = lib.context._state
        # A failed call's message is taken here if it was not yet: Futhark keeps the first message
        # until taken, so one left would be reported for the next failure.
        pending = lib.lib.futhark_context_get_error(state.ctx)
        if pending != lib.ffi.NULL:
            lib.lib.free(pending)
        if rc is None:
            rc = 0 if pending == lib.ffi.NULL else 1
        if rc == 0:
            for o, h, c in zip(self.info.outputs, shells, cells):
                if h is not None and id(h) not in state.values:
                    lib.types[o.type].free_fn(state.ctx, c[0])
        for p, v in zip(self.info.inputs, values):  # temporaries are freed by the call's scope
            if p.unique and isinstance(v, Value):
                v._mark_consumed(f"entry point {self.name!r} (parameter {p.name!r})")

    def _explained(self, err: Exception, values: tuple[Any, ...]) -> Exception:
        """Futhark's "invalid sizes" names no argument: add the ones whose sizes disagree."""
        if isinstance(err, FutharkError) and "invalid sizes" in err.message:
            detail = self._sizes.explain([p.name for p in self.info.inputs], values)
            if detail:
                return type(err)(f"{self.name}: {err.message} ({detail})", err.code, err.function)
        return err

    def __repr__(self) -> str:
        return f"<Futhark entry point {self.name}{self.__signature__}>"
