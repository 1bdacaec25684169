"""Hypothesis strategies for the inputs of a Futhark entry point or a CUDA kernel.

A signature is first turned into an :class:`InputSpec` (one :class:`ParamSpec` per parameter, each
with a value description: primitive, array with named dimensions, record, tuple, sum, array of
records). :func:`inputs` then builds one strategy that draws every *size name* once and every
parameter against those sizes, so ``xs: [n]f32`` and ``ys: [n]f32`` always have the same length.

Where the dimension names come from, in order:

1. ``sizes=`` given by the caller: ``{"xs": ("n",), "ys": "[n]"}`` (a tuple of names / ints /
   ``None``, or Futhark-style ``"[n][m]"``); record fields by dotted path (``"p.xs"``);
2. for a Futhark entry point, its header in the program's ``.fut`` source (``source=``, or found
   next to the manifest: see :func:`find_source`); for a CUDA kernel, the signature's ``x[n]``;
3. otherwise every array dimension is independent: it gets its own size, named
   ``"<param>[<axis>]"`` (e.g. ``"xs[0]"``).

Scalar integer parameters named like a size (``n`` in ``saxpy(..., float* out[n], int64 n)`` or in
``entry f (n: i64) (xs: [n]f32)``) are bound to that size instead of being drawn freely.

Values: NumPy arrays and NumPy scalars of the exact dtype (f16 as ``numpy.float16``), records as
``dict`` (field -> value), tuples as ``tuple``, sums as ``(variant_name, payload_tuple)``, arrays of
records as ``dict`` (field -> array; all fields share the outer shape). Floats are finite and
normal-or-zero unless ``allow_nan`` / ``allow_infinity`` / ``allow_subnormal`` say otherwise.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, Union

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays, from_dtype

from ..futhark.manifest import ArrayInfo, EntryInfo, Manifest, OpaqueInfo
from ..futhark.types import PRIMITIVES, split_array_type
from ..sizeexpr import SizeExpr, parse_size
from ..futhark.source import Dim, EntryDecl, SourceInfo, TypeExpr, load_source, parse_dims, parse_source

# ---------------------------------------------------------------- value descriptions

DimExpr = Union[str, int, SizeExpr]  # a size name or expression over size names ("n", "m*k"), or a fixed size


@dataclass(frozen=True)
class PrimSpec:
    dtype: np.dtype
    bound: str | None = None  # the size expression this scalar must equal (a size parameter)


@dataclass(frozen=True)
class ArraySpec:
    dtype: np.dtype
    dims: tuple[DimExpr, ...]


@dataclass(frozen=True)
class RecordSpec:
    fields: tuple[tuple[str, "ValueSpec"], ...]
    is_tuple: bool = False


@dataclass(frozen=True)
class SumSpec:
    variants: tuple[tuple[str, tuple["ValueSpec", ...]], ...]


@dataclass(frozen=True)
class RecordArraySpec:
    dims: tuple[DimExpr, ...]  # the outer (shared) dimensions
    fields: tuple[tuple[str, "PrimSpec | ArraySpec"], ...]  # each field's element


@dataclass(frozen=True)
class UnknownSpec:
    """A type we cannot generate (an abstract opaque, a function): needs ``values=``."""

    type_name: str


ValueSpec = Union[PrimSpec, ArraySpec, RecordSpec, SumSpec, RecordArraySpec, UnknownSpec]


@dataclass(frozen=True)
class ParamSpec:
    name: str
    spec: ValueSpec
    type_name: str = ""  # as the signature spells it, for messages
    is_output: bool = False  # CUDA non-const pointer (generated too: in/out)
    unique: bool = False  # Futhark *[]t: the callee consumes it


@dataclass(frozen=True)
class InputSpec:
    """Everything :func:`inputs` needs: the parameters, in call order."""

    name: str
    params: tuple[ParamSpec, ...]
    size_origin: str = "default"  # where the dimension names came from (for messages)

    def size_names(self) -> list[str]:
        """Every size name, in first-use order."""
        names: dict[str, None] = {}
        for p in self.params:
            for expr in _dim_exprs(p.spec):
                for n in size_names_in(expr):
                    names[n] = None
            if isinstance(p.spec, PrimSpec) and p.spec.bound:
                for n in size_names_in(p.spec.bound):
                    names[n] = None
        return list(names)

    def param(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name}: no parameter {name!r}; parameters: {[p.name for p in self.params]}")

    def describe(self) -> str:
        return f"{self.name}(" + ", ".join(f"{p.name}: {describe_spec(p.spec)}" for p in self.params) + ")"


def _dim_exprs(spec: ValueSpec) -> Iterator[DimExpr]:
    if isinstance(spec, ArraySpec):
        yield from spec.dims
    elif isinstance(spec, RecordArraySpec):
        yield from spec.dims
        for _, column in spec.fields:
            yield from _dim_exprs(column)
    elif isinstance(spec, RecordSpec):
        for _, f in spec.fields:
            yield from _dim_exprs(f)
    elif isinstance(spec, SumSpec):
        for _, payload in spec.variants:
            for p in payload:
                yield from _dim_exprs(p)


def _dtype_name(dtype: np.dtype) -> str:
    from ..futhark.types import BY_DTYPE

    p = BY_DTYPE.get(np.dtype(dtype))
    return p.name if p else str(dtype)


def describe_spec(spec: ValueSpec) -> str:
    """Futhark-like spelling of a value description, e.g. ``[n][xs[1]]f32``."""
    if isinstance(spec, PrimSpec):
        return _dtype_name(spec.dtype) + (f" (= {spec.bound})" if spec.bound else "")
    if isinstance(spec, ArraySpec):
        return "".join(f"[{d}]" for d in spec.dims) + _dtype_name(spec.dtype)
    if isinstance(spec, RecordSpec):
        if spec.is_tuple:
            return "(" + ", ".join(describe_spec(f) for _, f in spec.fields) + ")"
        return "{" + ", ".join(f"{n}: {describe_spec(f)}" for n, f in spec.fields) + "}"
    if isinstance(spec, SumSpec):
        return " | ".join(" ".join([f"#{n}", *(describe_spec(p) for p in ps)]) for n, ps in spec.variants)
    if isinstance(spec, RecordArraySpec):
        inner = ", ".join(f"{n}: {describe_spec(f)}" for n, f in spec.fields)
        return "".join(f"[{d}]" for d in spec.dims) + "{" + inner + "}"
    return f"<{spec.type_name}>"


# ---------------------------------------------------------------- size expressions

def size_names_in(expr: DimExpr) -> list[str]:
    """The size names an expression mentions: ``"m*k"`` -> ``["m", "k"]``."""
    if isinstance(expr, int):
        return []
    if isinstance(expr, SizeExpr):
        return expr.ordered_names()
    if _is_plain_name(expr):  # the common case; also allows names like "xs[0]" that aren't Python
        return [expr]
    return parse_size(expr).ordered_names()


def _is_plain_name(expr: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][\w']*(\[\d+\])?(\.[\w']+(\[\d+\])?)*", expr) is not None


def eval_size(expr: DimExpr, sizes: Mapping[str, int]) -> int:
    """The value of a size expression under drawn sizes (:mod:`pybridge.sizeexpr`, the one
    evaluator kernel checks and Futhark size rules use too)."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, SizeExpr):
        return expr.evaluate(sizes)
    if _is_plain_name(expr):
        return int(sizes[expr])
    return parse_size(expr).evaluate(sizes)


# ---------------------------------------------------------------- user size annotations

SizesArg = Mapping[str, Union[str, Sequence[Union[str, int, None]]]]


def _normalise_sizes(sizes: SizesArg | None, shapes: SizesArg | None) -> dict[str, tuple[Dim, ...]]:
    """Merge ``sizes=`` and ``shapes=`` (same meaning; two spellings) into path -> dims."""
    out: dict[str, tuple[Dim, ...]] = {}
    for arg_name, arg in (("sizes", sizes), ("shapes", shapes)):
        for path, dims in (arg or {}).items():
            if path in out:
                raise ValueError(f"{path!r} is given in both sizes= and shapes=")
            if isinstance(dims, str):
                out[path] = parse_dims(dims) if dims.lstrip().startswith("[") else (dims,)
            elif isinstance(dims, int):
                out[path] = (dims,)
            else:
                try:
                    out[path] = tuple(None if d is None else (int(d) if isinstance(d, int) else str(d)) for d in dims)
                except TypeError:
                    raise TypeError(f"{arg_name}[{path!r}] must be a tuple of size names/ints or '[n][m]'") from None
    return out


def _name_dims(dims: Sequence[Dim], path: str) -> tuple[DimExpr, ...]:
    """Give every unknown dimension its own size name, so it is drawn independently."""
    return tuple(f"{path}[{k}]" if d is None else d for k, d in enumerate(dims))


def _pick_dims(path: str, rank: int, user: Mapping[str, tuple[Dim, ...]], decl: Sequence[Dim] | None) -> tuple[DimExpr, ...]:
    if path in user:
        dims = user[path]
        if len(dims) != rank:
            raise ValueError(f"sizes[{path!r}] has {len(dims)} dimension(s) but {path} has rank {rank}")
        return _name_dims(dims, path)
    if decl is not None and len(decl) == rank:
        return _name_dims(decl, path)
    return _name_dims([None] * rank, path)


def _bind_size_scalars(params: list[ParamSpec], result_sizes: Iterable[str] = ()) -> list[ParamSpec]:
    """Integer scalars whose name is a size name take that size's value.

    ``result_sizes``: size names of the result type. A scalar named there (``(nbins: i64) ... :
    [nbins]i32``) is an allocation size, so it is drawn like a size rather than from all of i64.
    """
    spec = InputSpec("", tuple(params))
    names = set(spec.size_names()) | set(result_sizes)
    out = []
    for p in params:
        if isinstance(p.spec, PrimSpec) and p.spec.bound is None and p.name in names and p.spec.dtype.kind in "iu":
            p = replace(p, spec=PrimSpec(p.spec.dtype, bound=p.name))
        out.append(p)
    return out


# ---------------------------------------------------------------- from a Futhark manifest

def _decl_field(decl: TypeExpr | None, name: str) -> TypeExpr | None:
    if decl is None or decl.kind not in ("record", "tuple"):
        return None
    for n, t in decl.fields:
        if n == name:
            return t
    return None


def _futhark_value_spec(
    type_name: str, manifest: Manifest | None, decl: TypeExpr | None, path: str, user: Mapping[str, tuple[Dim, ...]]
) -> ValueSpec:
    if type_name in PRIMITIVES:
        return PrimSpec(PRIMITIVES[type_name].dtype)
    if manifest is None or type_name not in manifest.types:
        rank, elem = split_array_type(type_name)
        if rank and elem in PRIMITIVES:  # an array type spelled out without a manifest
            decl_dims = decl.dims if decl is not None and decl.kind == "prim" else None
            return ArraySpec(PRIMITIVES[elem].dtype, _pick_dims(path, rank, user, decl_dims))
        return UnknownSpec(type_name)
    t = manifest.types[type_name]
    if isinstance(t, ArrayInfo):
        decl_dims = decl.dims if decl is not None and decl.kind == "prim" and decl.name == t.elemtype else None
        return ArraySpec(PRIMITIVES[t.elemtype].dtype, _pick_dims(path, t.rank, user, decl_dims))
    assert isinstance(t, OpaqueInfo)
    if t.record is not None:
        names = [f.name for f in t.record.fields]
        is_tuple = names == [str(k) for k in range(len(names))]
        inner = decl if decl is not None and not decl.dims else None
        return RecordSpec(
            tuple(
                (f.name, _futhark_value_spec(f.type, manifest, _decl_field(inner, f.name), f"{path}.{f.name}", user))
                for f in t.record.fields
            ),
            is_tuple,
        )
    if t.sum is not None:
        decl_variants = dict(decl.variants) if decl is not None and decl.kind == "sum" else {}
        variants = []
        for v in t.sum.variants:
            dv = decl_variants.get(v.name, ())
            variants.append(
                (
                    v.name,
                    tuple(
                        _futhark_value_spec(p, manifest, dv[k] if k < len(dv) else None, f"{path}.{v.name}.{k}", user)
                        for k, p in enumerate(v.payload)
                    ),
                )
            )
        return SumSpec(tuple(variants))
    if t.record_array is not None:
        ra = t.record_array
        decl_dims = decl.dims if decl is not None and decl.kind in ("record", "tuple") else None
        outer = _pick_dims(path, ra.rank, user, decl_dims)
        fields: list[tuple[str, PrimSpec | ArraySpec]] = []
        for f in ra.fields:
            rank, elem = split_array_type(f.type)
            ft = manifest.types.get(f.type)
            if isinstance(ft, ArrayInfo):
                rank, elem = ft.rank, ft.elemtype
            if elem not in PRIMITIVES or rank < ra.rank:
                return UnknownSpec(type_name)  # nested records inside an array: not generated
            inner_rank = rank - ra.rank
            if inner_rank == 0:
                fields.append((f.name, PrimSpec(PRIMITIVES[elem].dtype)))
            else:
                fdecl = _decl_field(decl.with_dims(()) if decl is not None else None, f.name)
                fd = fdecl.dims if fdecl is not None else None
                fields.append((f.name, ArraySpec(PRIMITIVES[elem].dtype, _pick_dims(f"{path}.{f.name}", inner_rank, user, fd))))
        return RecordArraySpec(outer, tuple(fields))
    return UnknownSpec(type_name)


def _decl_matches(entry: EntryInfo, decl: EntryDecl) -> bool:
    """The header describes this entry point (same parameter count and names)."""
    if len(decl.params) != len(entry.inputs):
        return False
    return all(d.name is None or d.name == i.name for d, i in zip(decl.params, entry.inputs))


def spec_from_entry(
    entry: EntryInfo,
    manifest: Manifest | None = None,
    *,
    sizes: SizesArg | None = None,
    shapes: SizesArg | None = None,
    source: SourceInfo | EntryDecl | str | Path | None = None,
) -> InputSpec:
    """Describe a Futhark entry point's inputs from its manifest (and its source header, if known)."""
    user = _normalise_sizes(sizes, shapes)
    decl = _entry_decl(entry.name, source)
    origin = "default"
    if decl is not None and not _decl_matches(entry, decl):
        decl = None  # a stale or unrelated source: ignore rather than guess
    if decl is not None:
        origin = "source"
    if user:
        origin = "sizes=" if origin == "default" else "sizes= and source"
    params = []
    for k, inp in enumerate(entry.inputs):
        d = decl.params[k].type if decl is not None else None
        params.append(
            ParamSpec(inp.name, _futhark_value_spec(inp.type, manifest, d, inp.name, user), inp.type, unique=inp.unique)
        )
    _check_user_paths(user, params)
    result_sizes = decl.result_size_names() if decl is not None else set()
    return InputSpec(entry.name, tuple(_bind_size_scalars(params, result_sizes)), origin)


def _entry_decl(name: str, source: SourceInfo | EntryDecl | str | Path | None) -> EntryDecl | None:
    if source is None:
        return None
    if isinstance(source, EntryDecl):
        return source if source.name == name else None
    if isinstance(source, Path) or (isinstance(source, str) and source.endswith(".fut") and "\n" not in source):
        source = load_source(source)
    elif isinstance(source, str):
        source = parse_source(source)
    return source.entries.get(name)


def spec_from_decl(decl: EntryDecl | str, *, sizes: SizesArg | None = None, shapes: SizesArg | None = None) -> InputSpec:
    """Describe inputs from a Futhark entry header alone (no manifest): for plain Python targets.

    ``spec_from_decl("entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32")``
    """
    if isinstance(decl, str):
        from ..futhark.source import parse_entry_header

        decl = parse_entry_header(decl)
    user = _normalise_sizes(sizes, shapes)
    params = []
    for k, p in enumerate(decl.params):
        name = p.name or f"arg{k}"
        params.append(ParamSpec(name, _decl_value_spec(p.type, name, user), str(p.type), unique=p.type.unique))
    _check_user_paths(user, params)
    bound = _bind_size_scalars(params, decl.result_size_names())
    return InputSpec(decl.name, tuple(bound), "sizes=" if user else "source")


def _decl_value_spec(t: TypeExpr, path: str, user: Mapping[str, tuple[Dim, ...]]) -> ValueSpec:
    if t.kind == "prim" and t.name in PRIMITIVES:
        dtype = PRIMITIVES[t.name].dtype
        if not t.dims and path not in user:
            return PrimSpec(dtype)
        return ArraySpec(dtype, _pick_dims(path, len(user.get(path, t.dims)), user, t.dims))
    if t.kind in ("record", "tuple") and not t.dims:
        return RecordSpec(
            tuple((n, _decl_value_spec(f, f"{path}.{n}", user)) for n, f in t.fields), is_tuple=t.kind == "tuple"
        )
    if t.kind in ("record", "tuple"):
        outer = _pick_dims(path, t.rank, user, t.dims)
        fields: list[tuple[str, PrimSpec | ArraySpec]] = []
        for n, f in t.fields:
            if f.kind != "prim" or f.name not in PRIMITIVES:
                return UnknownSpec(str(t))
            dtype = PRIMITIVES[f.name].dtype
            fields.append((n, ArraySpec(dtype, _pick_dims(f"{path}.{n}", f.rank, user, f.dims)) if f.dims else PrimSpec(dtype)))
        return RecordArraySpec(outer, tuple(fields))
    if t.kind == "sum" and not t.dims:
        return SumSpec(
            tuple((n, tuple(_decl_value_spec(p, f"{path}.{n}.{k}", user) for k, p in enumerate(ps))) for n, ps in t.variants)
        )
    return UnknownSpec(str(t))


def _check_user_paths(user: Mapping[str, tuple[Dim, ...]], params: Sequence[ParamSpec]) -> None:
    """A misspelt key in sizes= would silently do nothing: refuse it instead."""
    known = {p.name for p in params}
    for path in user:
        if path.split(".")[0] not in known:
            raise ValueError(f"sizes/shapes: {path!r} is not a parameter; parameters: {sorted(known)}")


# ---------------------------------------------------------------- from a CUDA kernel signature

def spec_from_kernel(signature: Any, *, sizes: SizesArg | None = None, shapes: SizesArg | None = None) -> InputSpec:
    """Describe a kernel's parameters from a ``pybridge.cuda.signature.KernelSignature``.

    Duck-typed: ``signature.name`` and ``signature.params``, each with ``name``, ``dtype``,
    ``is_pointer``, ``is_const`` and ``size`` (an expression over scalar parameter names, or None).
    A string is parsed with ``pybridge.cuda.signature.parse_signature``.
    """
    if isinstance(signature, str):
        from ..cuda.signature import parse_signature

        signature = parse_signature(signature)
    user = _normalise_sizes(sizes, shapes)
    params: list[ParamSpec] = []
    for p in signature.params:
        dtype = np.dtype(p.dtype)
        if p.is_pointer:
            declared: tuple[Dim, ...] | None = (p.size,) if p.size else None
            dims = _pick_dims(p.name, 1, user, declared)
            ctype = f"{'const ' if p.is_const else ''}{dtype}*" + (f"[{p.size}]" if p.size else "")
            params.append(ParamSpec(p.name, ArraySpec(dtype, dims), ctype, is_output=not p.is_const))
        else:
            params.append(ParamSpec(p.name, PrimSpec(dtype), str(dtype)))
    _check_user_paths(user, params)
    return InputSpec(str(signature.name), tuple(_bind_size_scalars(params)), "sizes=" if user else "signature")


# ---------------------------------------------------------------- finding a program's source

def find_source(obj: Any) -> Path | None:
    """The ``.fut`` file a library (or manifest, or path) was built from, when it can be found.

    Looks at, in order: an attribute ``source_path`` / ``fut_source`` of the library; ``<stem>.fut``
    next to the manifest or library file (``probe.json``, ``probe.c.json`` and ``libprobe.so`` all
    give ``probe``); for artefacts under the checkout's ``build/futhark`` or ``build/reference``
    trees, ``futhark/<stem>.fut`` and ``tests/reference/<stem>.fut`` of the checkout.
    """
    for attr in ("source_path", "fut_source"):
        p = getattr(obj, attr, None)
        if p and Path(p).suffix == ".fut" and Path(p).is_file():
            return Path(p)
    paths: list[Path] = []
    if isinstance(obj, (str, Path)):
        paths.append(Path(obj))
    manifest = getattr(obj, "manifest", obj)
    src = getattr(manifest, "source", None)
    if isinstance(src, (str, Path)):
        paths.append(Path(src))
    for attr in ("path", "library_path", "so_path"):
        p = getattr(obj, attr, None)
        if isinstance(p, (str, Path)):
            paths.append(Path(p))
    root = Path(__file__).resolve().parents[2]
    for p in paths:
        if p.suffix == ".fut" and p.is_file():
            return p
        stem = p.name.split(".")[0].removeprefix("lib")
        candidates = [p.parent / f"{stem}.fut"]
        resolved = p.resolve()
        if (root / "build") in resolved.parents:
            candidates += [root / "futhark" / f"{stem}.fut", root / "tests" / "reference" / f"{stem}.fut"]
        for c in candidates:
            if c.is_file():
                return c
    return None


# ---------------------------------------------------------------- drawn inputs

class Inputs(Mapping[str, Any]):
    """One drawn set of arguments: ``inputs["xs"]``, ``inputs.args`` (call order), ``inputs.sizes``."""

    def __init__(self, values: Mapping[str, Any], sizes: Mapping[str, int] | None = None):
        self._data: dict[str, Any] = dict(values)
        self.sizes: dict[str, int] = dict(sizes or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    @property
    def args(self) -> tuple[Any, ...]:
        return tuple(self._data.values())

    def copy(self) -> "Inputs":
        """A deep copy: each callee gets arrays it may overwrite without affecting the other."""
        return Inputs(copy.deepcopy(self._data), self.sizes)

    def __repr__(self) -> str:
        with np.printoptions(threshold=16, edgeitems=3, precision=9):
            body = ", ".join(f"{k}={_short_repr(v)}" for k, v in self._data.items())
        return f"Inputs({body})"

    def summary(self, indent: str = "  ") -> str:
        """One line per parameter: type, shape and (abbreviated) values."""
        with np.printoptions(threshold=16, edgeitems=3, precision=9, linewidth=100):
            lines = [f"{indent}{k}: {_summarise(v)}" for k, v in self._data.items()]
        if self.sizes:
            lines.append(f"{indent}sizes: " + ", ".join(f"{k}={v}" for k, v in self.sizes.items()))
        return "\n".join(lines)


def _short_repr(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return repr(v).replace("\n", "")
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_short_repr(x)}" for k, x in v.items()) + "}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_short_repr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v)


def _summarise(v: Any) -> str:
    if isinstance(v, np.ndarray):
        text = np.array2string(v, separator=", ").replace("\n", "")
        return f"{_dtype_name(v.dtype)}{list(v.shape)} {text}"
    if isinstance(v, np.generic):
        return f"{_dtype_name(v.dtype)} {v.item()!r}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_summarise(x)}" for k, x in v.items()) + "}"
    if isinstance(v, tuple):
        return "(" + ", ".join(_summarise(x) for x in v) + ")"
    return repr(v)


# ---------------------------------------------------------------- element strategies

def _representable_bound(dtype: np.dtype, value: float, upward: bool) -> float:
    """``value`` moved inwards to the nearest number of ``dtype`` (from_dtype wants exact bounds)."""
    t = dtype.type
    with np.errstate(over="ignore"):  # 1e6 as f16 is inf: clipped just below
        v = t(value)
    if not math.isfinite(float(v)):
        v = t(np.finfo(dtype).max if value > 0 else -np.finfo(dtype).max)
    if upward and float(v) < value:
        v = np.nextafter(v, t(np.inf))
    if not upward and float(v) > value:
        v = np.nextafter(v, t(-np.inf))
    return float(v)


def elements(
    dtype: Any,
    *,
    min_value: float | int | None = None,
    max_value: float | int | None = None,
    allow_nan: bool = False,
    allow_infinity: bool = False,
    allow_subnormal: bool = False,
) -> st.SearchStrategy[Any]:
    """NumPy scalars of ``dtype``: finite (by default), in [min_value, max_value] (clipped to the dtype).

    Integers never leave the dtype's range; bools ignore the bounds; floats include NaN, ±inf and
    subnormals only when asked (subnormals: GPUs often flush them to zero).
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return from_dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        ilo = int(info.min) if min_value is None else max(int(info.min), math.ceil(min_value))
        ihi = int(info.max) if max_value is None else min(int(info.max), math.floor(max_value))
        if ilo > ihi:
            raise ValueError(f"empty range [{min_value}, {max_value}] for {dtype}")
        return from_dtype(dtype, min_value=ilo, max_value=ihi)
    if dtype.kind != "f":
        return from_dtype(dtype)
    if min_value is None and max_value is None:
        return from_dtype(dtype, allow_nan=allow_nan, allow_infinity=allow_infinity, allow_subnormal=allow_subnormal)
    lo = None if min_value is None else _representable_bound(dtype, float(min_value), upward=True)
    hi = None if max_value is None else _representable_bound(dtype, float(max_value), upward=False)
    base = from_dtype(
        dtype, min_value=lo, max_value=hi, allow_nan=False, allow_infinity=False, allow_subnormal=allow_subnormal
    )
    # Bounded floats() cannot mix in NaN/inf, so add them as explicit alternatives.
    specials: list[Any] = []
    if allow_nan:
        specials.append(dtype.type(np.nan))
    if allow_infinity:
        specials += [dtype.type(np.inf), dtype.type(-np.inf)]
    return st.one_of(base, st.sampled_from(specials)) if specials else base


def sizes_strategy(
    min_size: int = 0, max_size: int = 32, extra_sizes: Iterable[int] = ()
) -> st.SearchStrategy[int]:
    """One size: usually in [min_size, max_size], sometimes one of ``extra_sizes`` (even beyond).

    Shrinks towards ``min_size``: the extras sit behind a choice that shrinks away from them.
    """
    if min_size < 0 or max_size < min_size:
        raise ValueError(f"need 0 <= min_size <= max_size, got {min_size}, {max_size}")
    base = st.integers(min_size, max_size)
    extras = sorted({int(e) for e in extra_sizes if int(e) >= 0})
    if not extras:
        return base

    @st.composite
    def draw_size(draw: st.DrawFn) -> int:
        if draw(st.integers(0, 3)) == 3:  # about one draw in four uses an extra size
            return draw(st.sampled_from(extras))
        return draw(base)

    return draw_size()


def block_sizes(block: int = 256, *, large: int | None = None) -> tuple[int, ...]:
    """Edge sizes for a kernel launched with ``block`` threads per block: 0, 1, block-1, block,
    block+1, 2*block+1 and optionally ``large`` (pass them as ``extra_sizes=``)."""
    out = [0, 1, block - 1, block, block + 1, 2 * block + 1]
    if large is not None:
        out.append(large)
    return tuple(sorted({s for s in out if s >= 0}))


T = TypeVar("T")


def seeded(make: Callable[[np.random.Generator], T]) -> st.SearchStrategy[T]:
    """``make(numpy.random.default_rng(seed))`` for a drawn 32-bit seed.

    For dense random arrays of any size: Hypothesis draws only the seed, where its own ``arrays``
    would draw a few elements and fill the rest with one value (and cannot draw thousands of
    elements one by one). Shrinks towards seed 0. Typically a function of the drawn sizes, given
    as ``values=``::

        values={"b": lambda s: seeded(lambda rng: rng.uniform(-2, 2, (s["k"], s["n"])).astype(np.float32))}
    """
    return st.integers(0, 2**32 - 1).map(lambda seed: make(np.random.default_rng(seed)))


# ---------------------------------------------------------------- the inputs strategy

StrategyOrFactory = Union[st.SearchStrategy[Any], Callable[[Mapping[str, int]], st.SearchStrategy[Any]]]


@dataclass(frozen=True)
class InputOptions:
    """How :func:`inputs` (and ``check_against(inputs=InputOptions(...))``) generates values.

    - ``min_size``/``max_size``: bounds of every size name; ``extra_sizes``: sizes also tried
      (0, 1, block±1, a large one: see :func:`block_sizes`), for every size, or per size name
      (``{"n": block_sizes(256), "nbins": (0, 12288)}``; sizes not named get none);
      ``max_elements`` caps one array.
    - ``allow_nan``/``allow_infinity``/``allow_subnormal``: special floats (default: none).
    - ``ranges={"name": (lo, hi)}``: bounds for a parameter's elements (dotted paths for record
      fields) or for a size name; ``min_value``/``max_value``: default bounds of every number.
    - ``elements={"xs": strategy}`` replaces a parameter's element strategy; ``values={"p":
      strategy}`` replaces the whole value. Either may be a function of the drawn sizes
      (``lambda sizes: st.integers(0, sizes["n"] - 1)``) for values that depend on them.
    """

    min_size: int = 0
    max_size: int = 32
    extra_sizes: tuple[int, ...] | Mapping[str, tuple[int, ...]] = ()  # for every size, or per size name
    max_elements: int = 1 << 22
    allow_nan: bool = False
    allow_infinity: bool = False
    allow_subnormal: bool = False
    min_value: float | None = None
    max_value: float | None = None
    ranges: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    elements: Mapping[str, StrategyOrFactory] = field(default_factory=dict)
    values: Mapping[str, StrategyOrFactory] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept any iterable / None where a tuple or a dict is kept (frozen: set via object).
        extra = self.extra_sizes
        try:
            extra = {k: tuple(v) for k, v in extra.items()} if isinstance(extra, Mapping) else tuple(extra or ())
        except TypeError:
            raise TypeError(f"InputOptions(extra_sizes=...): expected sizes (an iterable of int) or a mapping "
                            f"of size name -> sizes, got {self.extra_sizes!r:.80}") from None
        object.__setattr__(self, "extra_sizes", extra)
        for name in ("ranges", "elements", "values"):
            value = getattr(self, name) or {}
            try:
                object.__setattr__(self, name, dict(value))
            except (TypeError, ValueError):
                raise TypeError(f"InputOptions({name}=...): expected a mapping of parameter name -> "
                                f"{'(low, high)' if name == 'ranges' else 'strategy'}, got {value!r:.80}") from None


def _resolve(s: StrategyOrFactory, sizes: Mapping[str, int]) -> st.SearchStrategy[Any]:
    return s if isinstance(s, st.SearchStrategy) else s(sizes)


def _elements_for(dtype: np.dtype, path: str, sizes: Mapping[str, int], o: InputOptions) -> st.SearchStrategy[Any]:
    if path in o.elements:
        return _resolve(o.elements[path], sizes)
    lo, hi = o.ranges.get(path, (o.min_value, o.max_value))
    if dtype.kind == "b":
        lo = hi = None
    return elements(
        dtype,
        min_value=lo,
        max_value=hi,
        allow_nan=o.allow_nan,
        allow_infinity=o.allow_infinity,
        allow_subnormal=o.allow_subnormal,
    )


def _cast_elements(dtype: np.dtype, s: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """User element strategies may give Python numbers: make them the parameter's dtype."""
    return s.map(lambda v: dtype.type(v))


def _array(dtype: np.dtype, shape: tuple[int, ...], path: str, sizes: Mapping[str, int], o: InputOptions) -> st.SearchStrategy[Any]:
    n = math.prod(shape)
    assume(n <= o.max_elements)  # a product of large extra sizes: skip rather than exhaust memory
    elems = _elements_for(dtype, path, sizes, o)
    return arrays(dtype, shape, elements=elems)


def _value(spec: ValueSpec, path: str, sizes: Mapping[str, int], o: InputOptions) -> st.SearchStrategy[Any]:
    if path in o.values:
        return _resolve(o.values[path], sizes)
    if isinstance(spec, PrimSpec):
        if spec.bound is not None:
            return st.just(spec.dtype.type(eval_size(spec.bound, sizes)))
        elems = _elements_for(spec.dtype, path, sizes, o)
        return elems if path not in o.elements else _cast_elements(spec.dtype, elems)
    if isinstance(spec, ArraySpec):
        shape = tuple(eval_size(d, sizes) for d in spec.dims)
        assume(all(s >= 0 for s in shape))  # e.g. "n-1" with n = 0
        return _array(spec.dtype, shape, path, sizes, o)
    if isinstance(spec, RecordSpec):
        parts = [(n, _value(f, f"{path}.{n}", sizes, o)) for n, f in spec.fields]
        if spec.is_tuple:
            return st.tuples(*(s for _, s in parts))
        return st.fixed_dictionaries(dict(parts))
    if isinstance(spec, SumSpec):
        if not spec.variants:
            raise ValueError(f"{path}: a sum type without variants cannot be generated")
        return st.one_of(
            [
                st.tuples(st.just(n), st.tuples(*(_value(p, f"{path}.{n}.{k}", sizes, o) for k, p in enumerate(ps))))
                for n, ps in spec.variants
            ]
        )
    if isinstance(spec, RecordArraySpec):
        outer = tuple(eval_size(d, sizes) for d in spec.dims)
        assume(all(s >= 0 for s in outer))
        columns: dict[str, st.SearchStrategy[Any]] = {}
        for n, f in spec.fields:
            inner = tuple(eval_size(d, sizes) for d in f.dims) if isinstance(f, ArraySpec) else ()
            columns[n] = _array(f.dtype, outer + inner, f"{path}.{n}", sizes, o)
        return st.fixed_dictionaries(columns)
    raise ValueError(
        f"cannot generate {path!r} of type {spec.type_name!r} (an opaque type with no record or sum "
        f"structure); give a strategy for it: values={{{path!r}: ...}}"
    )


def _unknown_paths(spec: ValueSpec, path: str) -> Iterator[tuple[str, UnknownSpec]]:
    if isinstance(spec, UnknownSpec):
        yield path, spec
    elif isinstance(spec, RecordSpec):
        for n, f in spec.fields:
            yield from _unknown_paths(f, f"{path}.{n}")
    elif isinstance(spec, SumSpec):
        for n, ps in spec.variants:
            for k, p in enumerate(ps):
                yield from _unknown_paths(p, f"{path}.{n}.{k}")


def inputs(spec: InputSpec, options: InputOptions | None = None, **keywords: Any) -> st.SearchStrategy[Inputs]:
    """A strategy of :class:`Inputs` for ``spec``, generated as ``options`` says (an
    :class:`InputOptions`); its fields may also be given as keywords (``inputs(spec, max_size=8)``),
    which override those of ``options``."""
    if options is not None and not isinstance(options, InputOptions):
        raise TypeError(f"options must be an InputOptions, got {type(options).__name__}")
    try:
        o = replace(options, **keywords) if options is not None else InputOptions(**keywords)
    except TypeError as e:
        raise TypeError(f"inputs(): {e}; the options are the fields of InputOptions") from None
    names = spec.size_names()
    known = {p.name for p in spec.params} | set(names)
    for what, keys in (("ranges", o.ranges), ("elements", o.elements), ("values", o.values)):
        for k in keys:
            if k.split(".")[0] not in known:
                raise ValueError(f"{what}: {k!r} is neither a parameter nor a size of {spec.name}; known: {sorted(known)}")
    if isinstance(o.extra_sizes, Mapping):
        for k in o.extra_sizes:
            if k not in names:
                raise ValueError(f"extra_sizes: {k!r} is not a size of {spec.name}; sizes: {names}")
    # Validate now, not at the first draw: unknown types fail with a message that says what to do.
    for p in spec.params:
        for path, unknown in _unknown_paths(p.spec, p.name):
            parts = path.split(".")
            if not any(".".join(parts[:k]) in o.values for k in range(1, len(parts) + 1)):
                _value(unknown, path, {}, o)
    size_strategies = {}
    for n in names:
        lo, hi = o.ranges.get(n, (o.min_size, o.max_size))
        lo = o.min_size if lo is None else int(lo)
        hi = max(lo, o.max_size) if hi is None else int(hi)
        extras = o.extra_sizes.get(n, ()) if isinstance(o.extra_sizes, Mapping) else o.extra_sizes
        size_strategies[n] = sizes_strategy(lo, hi, extras)
    all_independent = all("[" in n for n in names) and not o.extra_sizes and not o.ranges

    @st.composite
    def draw_inputs(draw: st.DrawFn) -> Inputs:
        sizes: dict[str, int] = {}
        if all_independent and len(names) > 1:
            # No shared names (the documented default): one shape draw gives every dimension.
            shape = draw(array_shapes(min_dims=len(names), max_dims=len(names), min_side=o.min_size, max_side=o.max_size))
            sizes = dict(zip(names, shape))
        else:
            for n in names:
                sizes[n] = draw(size_strategies[n])
        vals = {p.name: draw(_value(p.spec, p.name, sizes, o)) for p in spec.params}
        return Inputs(vals, sizes)

    return draw_inputs()


# ---------------------------------------------------------------- convenience front doors

def entry_inputs(
    entry: Any,
    *,
    sizes: SizesArg | None = None,
    shapes: SizesArg | None = None,
    source: SourceInfo | EntryDecl | str | Path | None | bool = None,
    **options: Any,
) -> st.SearchStrategy[Inputs]:
    """Inputs for a Futhark entry point: ``lib.saxpy`` (has ``.info`` and ``.library``), or a
    manifest ``EntryInfo`` with ``manifest=``. ``source=False`` ignores the program's source."""
    return inputs(entry_spec(entry, sizes=sizes, shapes=shapes, source=source, manifest=options.pop("manifest", None)), **options)


def entry_spec(
    entry: Any,
    *,
    sizes: SizesArg | None = None,
    shapes: SizesArg | None = None,
    source: SourceInfo | EntryDecl | str | Path | None | bool = None,
    manifest: Manifest | None = None,
) -> InputSpec:
    """:func:`spec_from_entry` for a wrapped entry point, finding its manifest and source."""
    ep = getattr(entry, "info", entry)
    if not isinstance(ep, EntryInfo):
        raise TypeError(f"expected a Futhark entry point (lib.<name>) or a manifest EntryInfo, got {type(entry).__name__}")
    library = getattr(entry, "library", None)
    if manifest is None and library is not None:
        manifest = getattr(library, "manifest", None)
    if source is None:
        found = find_source(library) if library is not None else None
        if found is None and manifest is not None:
            found = find_source(manifest)
        source = found
    elif source is False:
        source = None
    return spec_from_entry(ep, manifest, sizes=sizes, shapes=shapes, source=source)  # type: ignore[arg-type]


def kernel_inputs(
    kernel: Any, *, sizes: SizesArg | None = None, shapes: SizesArg | None = None, **options: Any
) -> st.SearchStrategy[Inputs]:
    """Inputs for a CUDA kernel (a ``pybridge.cuda`` Kernel, a KernelSignature, or its text)."""
    sig = getattr(kernel, "signature", kernel)
    return inputs(spec_from_kernel(sig, sizes=sizes, shapes=shapes), **options)


def signature_inputs(text: str, **options: Any) -> st.SearchStrategy[Inputs]:
    """Inputs from a signature written out: a Futhark header (``"entry f [n] (xs: [n]f32) ..."``)
    or a CUDA one (``"saxpy(float a, const float* x[n], ..., int64 n)"``)."""
    sizes, shapes = options.pop("sizes", None), options.pop("shapes", None)
    return inputs(spec_from_text(text, sizes=sizes, shapes=shapes), **options)


def spec_from_text(text: str, *, sizes: SizesArg | None = None, shapes: SizesArg | None = None) -> InputSpec:
    if re.match(r"\s*(--[^\n]*\n\s*)*(#\[[^\]]*\]\s*)*entry\b", text):
        return spec_from_decl(text, sizes=sizes, shapes=shapes)
    return spec_from_kernel(text, sizes=sizes, shapes=shapes)


__all__ = [
    "ArraySpec",
    "InputOptions",
    "InputSpec",
    "Inputs",
    "ParamSpec",
    "PrimSpec",
    "RecordArraySpec",
    "RecordSpec",
    "SumSpec",
    "UnknownSpec",
    "ValueSpec",
    "block_sizes",
    "describe_spec",
    "elements",
    "entry_inputs",
    "entry_spec",
    "eval_size",
    "find_source",
    "inputs",
    "kernel_inputs",
    "seeded",
    "signature_inputs",
    "sizes_strategy",
    "size_names_in",
    "spec_from_decl",
    "spec_from_entry",
    "spec_from_kernel",
    "spec_from_text",
]
